"""The preflight claim (launcher/preflight/claim.py) against scripted hosts that keep their
claims the way lock-acquire.sh / lock-release.sh / lock-break.sh do (a directory per name with
its owner line): a second preflight of a deployment is refused before any probe, naming the
first and releasing what it took; a claim left by a preflight of this control host that is gone
is taken over; --break-lock breaks any; claims are released after the rounds, also when one
raises, and after a Ctrl-C over new connections; a host SSH cannot reach is left out; a host where no claim can be made (no flock) is
probed unclaimed and fails a deploy-lock check, since the deploy lock fails there too."""

from __future__ import annotations

import socket
from typing import Any

import psutil
import pytest

from launcher.errors import UnreachableError
from launcher.execute.once import TriedOnce
from launcher.model import Host, Inventory
from launcher.preflight.claim import PreflightBusy, claimed
from launcher.preflight.run import run_preflight
from tests.preflight import factory as f
from tests.preflight.test_run import Handler, Scripted, ScriptedTransport, claim_kind, healthy, inventory, playbook

CLAIM = "/run/fleet/lock/x.preflight"  # the factory's deployment is "x"


def live_owner() -> str:
    """An owner line of a fleet run that is still going on this control host (this process)."""
    me = psutil.Process()
    return f"alice@{socket.gethostname()} pid={me.pid} start={me.create_time():.2f} time=T id=first"


def gone_owner() -> str:
    """An owner line of a run of this control host whose pid is not a live process any more."""
    pid = max(psutil.pids()) + 100_000
    return f"alice@{socket.gethostname()} pid={pid} start=1.00 time=T id=gone"


class Claims:
    """Each host's claim directory: its owner line, or absent."""

    def __init__(self, no_flock: tuple[str, ...] = (), **held: str) -> None:
        self.owners: dict[str, str] = dict(held)
        self.no_flock = no_flock  # hosts where lock-acquire.sh exits 127 (checked first)

    def handler(self, base: Handler) -> Handler:
        def handle(host: str, args: tuple[str, ...]) -> tuple[int, str]:
            kind = claim_kind(args)
            if kind == "claim":
                assert args[5] == CLAIM
                if host in self.no_flock:
                    return 127, ""
                if host in self.owners:
                    return 75, self.owners[host] + "\n"
                self.owners[host] = args[6]
                return 0, ""
            if kind == "unclaim":
                if self.owners.get(host) == args[5]:
                    del self.owners[host]
                return 0, ""
            if kind == "break":
                return 0, self.owners.pop(host, "") + "\n"
            return base(host, args)
        return handle


def preflight(inv: Inventory, connector: Scripted, **kw: bool) -> object:
    return run_preflight(inv, f.catalog(f.multinode()), playbook("h2:h6"), connector, cache=False, **kw)


def test_a_second_preflight_is_refused_before_any_probe_and_releases_what_it_took() -> None:
    first = live_owner()
    claims = Claims(h6=first)
    connector = Scripted(claims.handler(healthy()))
    with pytest.raises(PreflightBusy) as caught:
        preflight(inventory("h2", "h6"), connector)
    assert str(caught.value) == (f"h6: a preflight of deployment 'x' is running already ({first}); run this one "
                                 "when it has ended (one that is gone: --break-lock)")  # fmt: skip
    kinds = sorted(connector.log)
    assert kinds == [("h2", "claim"), ("h2", "gather"), ("h2", "unclaim"), ("h6", "claim"), ("h6", "gather")]
    assert claims.owners == {"h6": first}, "h2's claim given back, the first preflight's kept"


def test_a_claim_of_a_preflight_that_is_gone_is_taken_over() -> None:
    claims = Claims(h6=gone_owner())
    connector = Scripted(claims.handler(healthy()))
    report = preflight(inventory("h2", "h6"), connector)
    assert getattr(report, "exit_code") == 0
    assert [k for h, k in connector.log if h == "h6"] == ["gather", "claim", "unclaim", "claim", "probe", "client",
                                                          "unclaim"]  # fmt: skip
    assert claims.owners == {}


def test_break_lock_breaks_any_claim_first() -> None:
    claims = Claims(h2=live_owner(), h6="bob@other-control-host pid=1 start=1.00 time=T id=other")
    connector = Scripted(claims.handler(healthy()))
    report = preflight(inventory("h2", "h6"), connector, force=True)
    assert getattr(report, "exit_code") == 0
    assert [k for h, k in connector.log if h == "h6"][:3] == ["gather", "break", "claim"]
    assert claims.owners == {}


def test_claims_are_released_when_the_block_raises_and_an_unreachable_host_is_left_out() -> None:
    claims = Claims()
    connector = Scripted(claims.handler(healthy()), down={"h6": "no SSH banner within 10s"})
    hosts = inventory("h2", "h6").hosts
    with pytest.raises(RuntimeError, match="a round failed"):
        with claimed(hosts, "x", connector, forks=4):
            assert list(claims.owners) == ["h2"]
            raise RuntimeError("a round failed")
    assert claims.owners == {}
    assert connector.log == [("h2", "claim"), ("h2", "unclaim")]


def test_the_first_host_is_claimed_alone_so_a_refusal_there_takes_nothing() -> None:
    """Two preflights started together: the one refused on the first host (by name) claims no
    other, so the one that took it is not refused on the next."""
    first = live_owner()
    claims = Claims(h2=first)
    connector = Scripted(claims.handler(healthy()))
    with pytest.raises(PreflightBusy, match="^h2: a preflight of deployment 'x' is running already"):
        preflight(inventory("h2", "h6"), connector)
    assert [k for h, k in connector.log if k in ("claim", "unclaim")] == ["claim"]
    assert claims.owners == {"h2": first}


def test_a_host_where_no_claim_can_be_made_is_probed_and_fails_the_deploy_lock_check() -> None:
    claims = Claims(no_flock=("h6",))
    connector = Scripted(claims.handler(healthy()))
    report = preflight(inventory("h2", "h6"), connector)
    assert [c.line() for c in getattr(report, "checks") if c.status == "fail"] == [
        "fail: h6: deploy-lock: flock not found (util-linux): fleet needs it on every host it deploys to (fix: fleet "
        "up, down and restart take their lock in /run/fleet/lock on every host)",
    ]
    assert [k for h, k in connector.log if h == "h6"] == ["gather", "claim", "probe", "client"]
    assert claims.owners == {}


class Reopening(Scripted):
    """A connector a Ctrl-C has closed (run_all closes it: connect then refuses), with
    ``reopened()`` as SSH's: a new connector to the same hosts."""

    def __init__(self, handler: Handler) -> None:
        super().__init__(handler)
        self.fresh: list[Scripted] = []

    def connect(self, host: Host) -> ScriptedTransport:
        if self.closed:
            raise UnreachableError(host.name, "connections were closed (interrupted)")
        return super().connect(host)

    def reopened(self) -> Scripted:
        fresh = Scripted(self.handler)
        fresh.log = self.log
        self.fresh.append(fresh)
        return fresh


@pytest.mark.parametrize("wrapped", [False, True], ids=["ssh", "tried-once"])
def test_after_a_ctrl_c_the_claims_are_released_over_new_connections(wrapped: bool) -> None:
    claims = Claims()
    closing = Reopening(claims.handler(healthy()))
    connector = TriedOnce(closing) if wrapped else closing  # fleet up's gate wraps it
    with pytest.raises(KeyboardInterrupt):
        with claimed(inventory("h2", "h6").hosts, "x", connector, forks=4):
            assert sorted(claims.owners) == ["h2", "h6"]
            closing.close()  # what run_all does on the Ctrl-C
            raise KeyboardInterrupt
    assert claims.owners == {}
    assert len(closing.fresh) == 1 and closing.fresh[0].closed


def test_a_ctrl_c_during_the_claim_round_releases_on_every_host_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Ctrl-C cuts the second wave off after its claims were made (run_all then reports no
    host of it): they are released all the same, over new connections."""
    from launcher.execute.fanout import FanoutInterrupted, FanoutResult
    from launcher.preflight import claim

    claims = Claims()
    closing = Reopening(claims.handler(healthy()))
    real, waves = claim.run_all, []

    def run_all(hosts: Any, fn: Any, *, connector: Any, forks: int = 4) -> Any:
        waves.append([h.name for h in hosts])
        done = real(hosts, fn, connector=connector, forks=forks)
        if len(waves) == 2:  # the second wave's claims made, its answers lost to the Ctrl-C
            closing.close()
            raise FanoutInterrupted(FanoutResult(outcomes=()))
        return done

    monkeypatch.setattr(claim, "run_all", run_all)
    hosts = f.inventory(*(f.host(n, f"198.18.48.{i}") for i, n in enumerate(("h2", "h6", "h7"), 12))).hosts
    with pytest.raises(KeyboardInterrupt):
        with claimed(hosts, "x", closing, forks=4):
            raise AssertionError("the block never runs")
    assert waves[:2] == [["h2"], ["h6", "h7"]]
    assert claims.owners == {}


def test_a_ctrl_c_between_the_waves_releases_the_first_hosts_claim() -> None:
    """The Ctrl-C lands in the main thread after the first host's claim and before the second
    wave runs (here: while its routes are checked), a bare KeyboardInterrupt rather than
    run_all's: the first host's claim is released all the same (ci of 78feaae left it)."""

    class CutAtSecondWave(Reopening):
        def __init__(self, handler: Handler) -> None:
            super().__init__(handler)
            self.waves = 0

        def check_routes(self, hosts: Any) -> None:
            self.waves += 1
            if self.waves == 2:
                raise KeyboardInterrupt

    claims = Claims()
    connector = CutAtSecondWave(claims.handler(healthy()))
    hosts = f.inventory(*(f.host(n, f"198.18.48.{i}") for i, n in enumerate(("h2", "h6", "h7"), 12))).hosts
    with pytest.raises(KeyboardInterrupt):
        with claimed(hosts, "x", connector, forks=4):
            raise AssertionError("the block never runs")
    assert connector.waves == 2
    assert connector.log[0] == ("h2", "claim")
    assert sorted(connector.log[1:]) == [("h2", "unclaim"), ("h6", "unclaim"), ("h7", "unclaim")]
    assert claims.owners == {}
