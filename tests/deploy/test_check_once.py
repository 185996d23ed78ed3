"""Each host is tried once per command (issue #26 follow-up): ``fleet up --check`` goes on past
a preflight gate that failed, and its check pass reports the host the gate could not reach from
the gate's outcome instead of connecting again (a dead host cost its connect timeout twice);
the output and RECAP stay what they were.  :class:`TriedOnce` itself: the memory is one
wrapper's (one command's), a lost connection is not remembered, and the wrapped connector's
route check and close are its own."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from pathlib import Path
from typing import Sequence

import pytest

from launcher.cli.deploy import report_recap
from launcher.deploy.orchestrate import Options
from launcher.errors import ExitCode, FleetError, InputError, UnreachableError
from launcher.execute.command import Command, Token
from launcher.execute.fanout import each, run_all
from launcher.execute.once import TriedOnce
from launcher.execute.transport import Result, Transport
from launcher.flows.up import UpRequest, UpResult, up
from launcher.model import Host, Source
from launcher.output import QuietProgress
from launcher.pipeline import Inputs
from launcher.preflight.run import PreflightReport
from launcher.recap import lines
from tests.deploy.simhost import SimHost
from tests.preflight import factory as f
from tests.preflight.test_run import ScriptedTransport, healthy

DOWN = "no answer from 198.18.48.16:22 within 10s"


class Counting:
    """A connector counting connect attempts per host: ``down`` hosts (name -> reason) fail to
    connect (with ``debug``); the others answer with :meth:`answer` (a transport lost at its
    first command)."""

    debug = "why"

    def __init__(self, down: dict[str, str] | None = None) -> None:
        self.down = down or {}
        self.attempts: Counter[str] = Counter()
        self.routes: list[list[str]] = []
        self.closed = False
        self._lock = threading.Lock()

    def connect(self, host: Host) -> Transport:
        with self._lock:
            self.attempts[host.name] += 1
        if host.name in self.down:
            raise UnreachableError(host.name, self.down[host.name], debug=self.debug)
        return self.answer(host)

    def answer(self, host: Host) -> Transport:
        return Lost()

    def check_routes(self, hosts: Sequence[Host]) -> None:
        self.routes.append([h.name for h in hosts])
        if any(h.name == "bad" for h in hosts):
            raise InputError(SRC, "no such file: key", "bad/ansible_ssh_private_key_file")

    def close(self) -> None:
        self.closed = True


class CountingFleet(Counting):
    """:class:`Counting` whose hosts answer preflight's rounds as the sandbox hosts did
    (tests/preflight/test_run.py) and the deploy layer's commands as a :class:`SimHost`."""

    debug = ""

    def __init__(self, down: dict[str, str] | None = None) -> None:
        super().__init__(down)
        self.sims: dict[str, SimHost] = {}
        self.preflight_log: list[tuple[str, str]] = []

    def answer(self, host: Host) -> Transport:
        sim = self.sims.setdefault(host.name, SimHost(host.name))
        return _Both(ScriptedTransport(host.name, healthy(), self.preflight_log), sim)


class _Both:
    """Preflight's commands to the scripted host, every other one to the simulated host."""

    def __init__(self, scripted: ScriptedTransport, sim: SimHost) -> None:
        self._scripted, self._sim = scripted, sim

    @property
    def host(self) -> str:
        return self._sim.host

    def run(self, argv: Sequence[Token] | Command, *, timeout: float, stdin: bytes | None = None,
            env: object = None, check: bool = False) -> Result:  # fmt: skip
        text = " ".join(Command.of(argv).reveal())
        if any(mark in text for mark in ("fleet:clock_start", "fleet:ports", "fleet-preflight")):
            return self._scripted.run(argv, timeout=timeout, stdin=stdin, check=check)
        return self._sim.run(argv, timeout=timeout, stdin=stdin, check=check)  # type: ignore[arg-type]

    def put(self, path: str, data: bytes, mode: int) -> None:
        self._sim.put(path, data, mode)

    def get(self, path: str) -> bytes:
        return self._sim.get(path)

    def close(self) -> None:
        self._sim.close()


class Shown:
    """The flow's events, kept."""

    def __init__(self) -> None:
        self.gate: PreflightReport | None = None
        self.result: UpResult | None = None

    def note(self, line: str) -> None:
        pass

    def drain_note(self, line: str) -> None:
        pass

    def preflight(self, report: PreflightReport) -> None:
        self.gate = report

    def warmed(self, warmed: object) -> None:
        raise AssertionError("--check warms nothing")

    def deployed(self, result: UpResult) -> None:
        self.result = result


def request(*, check: bool) -> UpRequest:
    inv = f.inventory(*(f.host(n, ip, nccl_ifname="veth0", gid_index=gid, models_dir="/srv/models")
                        for n, ip, gid in (("h2", "198.18.48.12", 5), ("h6", "198.18.48.16", 3))))  # fmt: skip
    pb = f.playbook({"rank": "h2:h6"}, overrides=f.overrides(drop_docker_flags=("--gpus", "--ulimit")))
    inputs = Inputs(inventory=inv, catalog=f.catalog(f.multinode()), playbook=pb)
    return UpRequest(inputs=inputs, playbook_path="playbooks/x.yaml", inventory_path="inv.yaml", secrets={},
                     options=Options(forks=4, check=check))  # fmt: skip


def run_up(fleet: CountingFleet, *, check: bool) -> tuple[UpResult, Shown]:
    shown = Shown()
    result = up(request(check=check), fleet, shown, lambda: contextlib.nullcontext(QuietProgress()))  # type: ignore[arg-type]
    return result, shown


@pytest.fixture(autouse=True)
def facts_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_FACTS_DIR", str(tmp_path / "facts"))  # the gate caches what it gathers


def seen(result: UpResult) -> tuple[object, ...]:
    """What the operator sees of a ``--check`` run: its units, errors, RECAP and exit code."""
    report, target = result.report, result.target
    assert report is not None and target is not None
    return ([(u.host, u.unit, u.action, u.outcome, u.reason) for u in report.units], report.errors,
            lines(report_recap(report, target, "up", check=True, exit_code=result.exit_code)), result.exit_code)  # fmt: skip


def test_check_past_a_failed_gate_tries_the_dead_host_once_and_reports_it_as_before() -> None:
    fleet = CountingFleet(down={"h6": DOWN})
    result, shown = run_up(fleet, check=True)
    assert fleet.attempts["h6"] == 1, "the check pass connected again to the host the gate found unreachable"
    assert shown.gate is not None and [c.line() for c in shown.gate.failed] == [
        f"fail: h6: ssh: unreachable: {DOWN} (fix: check SSH to h6: fleet run -i inv.yaml h6 -- true)",
    ]
    assert shown.result == result
    assert seen(result) == (
        [("h2", "fleet-x-rank0-r0", "unknown", "unknown", "its group also runs on a host that did not answer"),
         ("h6", "fleet-x-rank0-r1", "unknown", "unreachable", f"unreachable: {DOWN}")],
        (f"h6: unreachable: {DOWN}",),
        ["RECAP x: up --check (nothing was changed): units per host",
         "h2 : started=0  unchanged=0  stopped=0  failed=0  skipped=0  unreachable=0  unknown=1",
         "h6 : started=0  unchanged=0  stopped=0  failed=0  skipped=0  unreachable=1  unknown=0",
         "exit 1: some hosts could not be read (errors above); the counts are what the command would do on the "
         "others (nothing was changed)"],
        ExitCode.FAILED,
    )  # fmt: skip
    assert [e for e in fleet.sims["h2"].log if e[0] == "put" or "docker rm" in " ".join(e)] == [], "--check wrote"


def test_the_output_is_what_a_second_attempt_gave(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run without the memory (as before the fix: the check pass connects again, for the
    same error) shows the operator exactly the same."""
    remembered = CountingFleet(down={"h6": DOWN})
    with_memory, _ = run_up(remembered, check=True)
    monkeypatch.setattr("launcher.flows.up.TriedOnce", lambda connector: connector)
    twice = CountingFleet(down={"h6": DOWN})
    without, _ = run_up(twice, check=True)
    assert (remembered.attempts["h6"], twice.attempts["h6"]) == (1, 2)
    assert seen(with_memory) == seen(without)


def test_up_stops_at_the_failed_gate_having_tried_the_dead_host_once() -> None:
    fleet = CountingFleet(down={"h6": DOWN})
    result, shown = run_up(fleet, check=False)
    assert fleet.attempts["h6"] == 1
    assert shown.gate is not None and shown.result is None and result.report is None
    assert result.exit_code == shown.gate.exit_code != 0


# ---------------------------------------------------------------------------------------------
# TriedOnce


class Lost:
    """A transport whose connection is lost at its first command."""

    host = "h1"

    def run(self, argv: object, **kw: object) -> Result:
        raise UnreachableError("h1", "connection lost during true")

    def put(self, path: str, data: bytes, mode: int) -> None:
        raise AssertionError

    def get(self, path: str) -> bytes:
        raise AssertionError

    def close(self) -> None:
        pass


SRC = Source(path="inv.yaml", line=3, col=5)


def host(name: str) -> Host:
    return Host(name=name, address="198.18.0.9", source=SRC)


def test_an_unreachable_host_is_tried_once_with_the_same_error_each_time() -> None:
    inner = Counting(down={"h2": "no answer from h2:22 within 10s"})
    once = TriedOnce(inner)
    errors = []
    for _ in range(3):
        with pytest.raises(UnreachableError) as caught:
            once.connect(host("h2"))
        errors.append((str(caught.value), caught.value.host, caught.value.reason, caught.value.debug))
    assert errors == [("h2: unreachable: no answer from h2:22 within 10s", "h2", "no answer from h2:22 within 10s",
                       "why")] * 3  # fmt: skip
    assert inner.attempts == {"h2": 1}


def test_concurrent_connects_to_a_dead_host_make_one_attempt() -> None:
    inner = Counting(down={"h2": "no answer from h2:22 within 10s"})
    once = TriedOnce(inner)
    results = each(list(range(8)), lambda _: once.connect(host("h2")), 8)
    assert {str(r) for r in results.values()} == {"h2: unreachable: no answer from h2:22 within 10s"}
    assert inner.attempts == {"h2": 1}


def test_reachable_hosts_and_lost_connections_are_not_remembered() -> None:
    inner = Counting()
    once = TriedOnce(inner)
    with pytest.raises(UnreachableError, match="^h1: unreachable: connection lost during true$"):
        once.connect(host("h1")).run(["true"], timeout=5)
    once.connect(host("h1"))
    assert inner.attempts == {"h1": 2}, "a lost connection is connected again"


def test_the_memory_is_one_wrappers_a_new_command_tries_again() -> None:
    """``fleet watch`` and the next command use the connector itself (or a new wrapper): the
    host that was down is tried again."""
    inner = Counting(down={"h2": "no answer from h2:22 within 10s"})
    for _ in range(2):
        with pytest.raises(UnreachableError):
            TriedOnce(inner).connect(host("h2"))
    with pytest.raises(UnreachableError):
        inner.connect(host("h2"))
    assert inner.attempts == {"h2": 3}


def test_fanout_through_it_keeps_the_route_check_and_close_of_the_connector() -> None:
    inner = Counting(down={"h2": "no answer from h2:22 within 10s"})
    once = TriedOnce(inner)
    first = run_all([host("h1"), host("h2")], lambda h, t: h.name, connector=once)
    again = run_all([host("h2")], lambda h, t: h.name, connector=once)
    assert [o.reason for o in (*first.unreachable, *again.unreachable)] == [
        "h2: unreachable: no answer from h2:22 within 10s"] * 2
    assert inner.routes == [["h1", "h2"], ["h2"]] and inner.attempts == {"h1": 1, "h2": 1}
    with pytest.raises(InputError, match="no such file: key"):
        run_all([host("bad")], lambda h, t: h.name, connector=once)
    assert inner.attempts["bad"] == 0, "bad settings stop the command before any host is contacted"
    once.close()
    assert inner.closed


def test_only_unreachable_is_remembered() -> None:
    class Refusing(Counting):
        def connect(self, host: Host) -> Transport:
            self.attempts[host.name] += 1
            raise FleetError(f"{host.name}: something else")

    inner = Refusing()
    once = TriedOnce(inner)
    for _ in range(2):
        with pytest.raises(FleetError, match="^h1: something else$"):
            once.connect(host("h1"))
    assert inner.attempts == {"h1": 2}
