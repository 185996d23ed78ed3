"""Ctrl-C during a PD cohort switch, through the real ``fleet restart --rolling --surge`` in a
subprocess that gets SIGINT (as an operator's terminal sends it) at a moment read from its
progress lines: the 2P1D deployment of test_sandbox_pd (two-node instances, its real
sglang-router 0.3.2 as a fleet unit) behind a front router on this machine's loopback, a load
generator sending through the front the whole time.

Moments, in order on one sandbox (each case starts from the state the previous one left):

a1. the new cohort's engines are starting (its first step);
a2. the new cohort's router is starting (its engines are up and healthy: the last step);
    then the same command again converges onto generation 2 (a full switch);
b.  right after the old cohort's router left the front router (traffic moved), before the old
    cohort is retired -- rolling generation 3 back onto the first hosts;
c.  while the old cohort is being retired (its first unit stopping) -- generation 4;
b0. right after the new cohort's router joined the front, while the old one is still there
    (both cohorts serve) -- generation 5 back onto the first hosts.

Then generation 6: fleet SIGKILLed with both cohort routers in the front (nothing cleans up);
generation 7: a second Ctrl-C while fleet finishes retiring the old cohort (it stops at once);
after each the same command finishes the switch.  A stale playbook rolled with ``--surge``
naming the serving cohort is refused untouched.  Last, ``fleet rollback --surge``: Ctrl-C while
the revived cohort's router is restored puts the revived cohort back into prev/, and the same
command then brings generation 6 back.

After each Ctrl-C: exit 130 with ``fleet: interrupted`` as the last line and no traceback; the
front router holds exactly one cohort router and what it serves is one generation's complete
pairs (every answer's prefill and decode ran on the hosts of its generation's cohort); each
cohort is either fully running behind the front (7 units) or has nothing left on its hosts; no
deploy lock and no fleet SSH connection left on any host.  Then the same command again exits 0
with the new generation serving alone (after a1/a2 a full switch; after b, c, b0 it finds the new
cohort's router registered and only finishes).

The load rule: no request fails.  Ctrl-C never cuts a request here: before the new cohort's
router is registered in the front nothing of the new cohort has served (it is removed); after
that the switch is finished (the old cohort is deregistered, drained and retired decodes first,
as in an uninterrupted switch).  So the interrupt explains no failure at these moments.

Run (root, ~2 min): ``FLEET_SANDBOX_NAME=pdint1 python -m pytest -x -q tests/rolling/test_sandbox_pd_interrupt.py``
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import Iterator

import pytest

from launcher.sandbox.client import Sandbox
from tests.cli_process import WAIT_S, Cli, local_conns, peers
from tests.cli_process import until as _until
from tests.rolling.conftest import Router, container_id, deploy, fleet
from tests.rolling.loadgen import LoadGen, Outcome
from tests.rolling.test_sandbox_pd import OLD, SURGE, V1, V2
from tests.rolling.test_sandbox_pd_rollback import DEPLOYMENT, MODEL, _clean, _containers, _moved, fresh_pd

pytestmark = pytest.mark.sandbox

ROUTER_UNIT = "fleet-sb-roll-pd-router-r0"
class HeldDeletes:
    """A pass-through to the front router on loopback, for fleet's worker-management calls only
    (the load goes to the front itself), that can hold the next ``DELETE`` and then swallow it:
    fleet is then deterministically between registering the new cohort's router and
    deregistering the old one."""

    def __init__(self, upstream: str) -> None:
        import http.server
        import threading
        import urllib.error
        import urllib.request

        self.armed, self.held, self.release = threading.Event(), threading.Event(), threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _pass(self) -> None:
                if self.command == "DELETE" and outer.armed.is_set():
                    outer.armed.clear()
                    outer.held.set()
                    outer.release.wait(30)
                    with contextlib.suppress(OSError):  # swallowed: it never reaches the front
                        self.send_error(503)
                    return
                size = int(self.headers.get("Content-Length") or 0)
                req = urllib.request.Request(upstream + self.path, data=self.rfile.read(size) if size else None,
                                             method=self.command, headers={"Content-Type": "application/json"})  # fmt: skip
                try:
                    with urllib.request.urlopen(req, timeout=10) as r:
                        code, body = r.status, r.read()
                except urllib.error.HTTPError as err:
                    code, body = err.code, err.read()
                try:
                    self.send_response(code)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # fleet went away (Ctrl-C) while this was held

            do_GET = do_POST = do_DELETE = _pass

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def pd(sandbox_fleet: Sandbox, tmp_path_factory: pytest.TempPathFactory, logs_dir: Path) -> Iterator[tuple[Sandbox, str, Path, Router]]:
    """Generation 1 on OLD (h6, h7 instances; h8 its router) behind the front router."""
    sb = sandbox_fleet
    tmp = tmp_path_factory.mktemp("pd-interrupt")
    inventory = fresh_pd(sb, tmp)
    front: Router | None = None
    try:
        deploy(sb, V1, inventory)
        front = Router(("--worker-urls", _router_url(sb, OLD)), logs_dir / "router-front-interrupt.log")
        front.wait_workers(1)
        yield sb, inventory, tmp, front
    finally:
        if front is not None:
            front.stop()
        _clean(sb)


def _router_url(sb: Sandbox, cohort: tuple[str, ...]) -> str:
    return f"http://{sb.host(cohort[2]).data_ip}:38100"


def _restart(tmp: Path, gen: int, serving: tuple[str, ...], surge: tuple[str, ...], front: Router) -> tuple[str, ...]:
    """``fleet restart`` argv rolling generation ``gen`` from ``serving`` onto ``surge``."""
    pb = _moved(V2, tmp / f"pd-v{gen}.yaml", serving, generation=str(gen))
    return ("restart", pb, "--rolling", "--surge", ":".join(surge), "--router", front.url)


def _interrupted(pd: tuple[Sandbox, str, Path, Router], name: str, args: tuple[str, ...], moment: str) -> tuple[Cli, list[Outcome]]:
    """Runs ``fleet args`` under load and sends Ctrl-C when a progress line matches ``moment``."""
    sb, inventory, tmp, front = pd
    load = LoadGen(front.url, workers=4, stream_every=3, stream_tokens=300, model=MODEL).start()
    cli = Cli(sb, inventory, tmp, name, *args)
    try:
        cli.wait_line(moment)
        rc = cli.interrupt()
    finally:
        cli.close()
        results = load.stop(at_least=20)
    _settled(cli, rc, load)
    return cli, results


def _settled(cli: Cli, rc: int, load: LoadGen) -> None:
    assert rc == 130, cli.stderr
    assert "Traceback" not in cli.stderr, cli.stderr
    assert cli.stderr.splitlines()[-1] == "fleet: interrupted", cli.stderr
    assert load.failures == [], [(r.error, r.status) for r in load.failures[:5]]


def _one_cohort_serves(sb: Sandbox, front: Router, cli: Cli | None, results: list[Outcome], serving: tuple[str, ...],
                       gen: str, gens: dict[str, tuple[str, ...]]) -> None:  # fmt: skip
    """Only ``serving`` (generation ``gen``) is up, behind the front, alone; the other cohort's
    hosts run nothing of the deployment; no lock or fleet connection is left; every answer
    (during the run and now) paired a prefill and a decode of its own generation's cohort."""
    assert [(w["url"], w["is_healthy"]) for w in front.workers()] == [(_router_url(sb, serving), True)]
    for h in OLD + SURGE:
        found = _containers(sb, h)
        if h not in serving:
            assert found == [], h
        else:  # an engine host runs a rank of each of the three instances
            assert found == [ROUTER_UNIT] if h == serving[2] else len(found) == 3 and ROUTER_UNIT not in found, (h, found)
        res = sb.ssh(h, "docker ps --filter status=running -q --filter label=fleet.deployment=" + DEPLOYMENT)
        assert len(res.out.split()) == len(found), (h, res.out)
        assert sb.ssh(h, f"test -e /run/fleet/lock/{DEPLOYMENT}").rc != 0, f"{h}: deploy lock left"
    if cli is not None:
        assert cli.conns, "no connection of fleet seen while it settled"
        mine = local_conns(os.getpid())  # this test's own cached SSH connections
        for h in OLD + SURGE:
            _until(f"{h}: fleet's SSH connections closed", lambda h=h: not (peers(sb, h) - mine) & cli.conns)  # type: ignore[misc]
    after = LoadGen(front.url, workers=2, stream_every=3, stream_tokens=50, model=MODEL).start().stop(at_least=12)
    assert after and all(r.ok for r in after), [r.error for r in after if not r.ok][:5]
    assert {r.generation for r in after} == {gen}
    for r in [*results, *after]:
        hosts = set(gens[r.generation][:2])
        assert r.origin.get("prefill_host") in hosts and r.origin.get("decode_host") in hosts, r


def _converges(pd: tuple[Sandbox, str, Path, Router], args: tuple[str, ...], new: tuple[str, ...], gen: str,
               gens: dict[str, tuple[str, ...]], *, resumed: bool, outcome: str = "restarted") -> None:  # fmt: skip
    """The same command again: exit 0, generation ``gen`` on ``new`` serving alone (``resumed``:
    the new cohort's router was registered already, so it only checks and finishes)."""
    sb, inventory, _, front = pd
    proc = fleet(sb, *args, "--json", inventory=inventory)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    doc = json.loads(proc.stdout)
    assert doc["errors"] == [], doc
    assert any("(an interrupted switch): finishing the switch" in n for n in doc["notes"]) == resumed, doc["notes"]
    assert {(g["group"].split("/")[1], g["outcome"]) for g in doc["groups"] if g["detail"] == "new cohort"} == {
        (g, outcome) for g in ("prefill0", "prefill1", "decode0", "router")
    }, doc  # fmt: skip
    _one_cohort_serves(sb, front, None, [], new, gen, gens)


GENS: dict[str, tuple[str, ...]] = {"1": OLD, "2": SURGE, "3": OLD, "4": SURGE, "5": OLD, "6": SURGE, "7": OLD}


def test_ctrl_c_while_new_engines_start_removes_the_new_cohort(pd: tuple[Sandbox, str, Path, Router]) -> None:
    sb, inventory, tmp, front = pd
    args = _restart(tmp, 2, OLD, SURGE, front)
    cli, results = _interrupted(pd, "a1", args, rf"^{SURGE[0]}/fleet-sb-roll-pd-(prefill|decode)\S*: starting")
    assert "cohort router" not in cli.seen_at_interrupt, "interrupted after the front router was touched"
    _one_cohort_serves(sb, front, cli, results, OLD, "1", GENS)


def test_ctrl_c_while_new_router_starts_removes_the_whole_new_cohort(pd: tuple[Sandbox, str, Path, Router]) -> None:
    sb, inventory, tmp, front = pd
    args = _restart(tmp, 2, OLD, SURGE, front)
    cli, results = _interrupted(pd, "a2", args, rf"^{SURGE[2]}/{ROUTER_UNIT}: starting")
    assert "cohort router" not in cli.seen_at_interrupt, "interrupted after the front router was touched"
    assert re.search(rf"^{SURGE[0]}/\S+: healthy", cli.seen_at_interrupt, re.M), "the new engines were up"
    _one_cohort_serves(sb, front, cli, results, OLD, "1", GENS)
    _converges(pd, args, SURGE, "2", GENS, resumed=False)


def test_ctrl_c_right_after_traffic_moved_finishes_the_switch(pd: tuple[Sandbox, str, Path, Router]) -> None:
    sb, inventory, tmp, front = pd
    args = _restart(tmp, 3, SURGE, OLD, front)
    old = re.escape(_router_url(sb, SURGE))
    cli, results = _interrupted(pd, "b", args, rf"cohort router {old} deregistered$")
    assert ": retiring" not in cli.seen_at_interrupt, "interrupted after the old cohort began to retire"
    _one_cohort_serves(sb, front, cli, results, OLD, "3", GENS)
    _converges(pd, args, OLD, "3", GENS, resumed=True)


def test_ctrl_c_while_the_old_cohort_retires_finishes_retiring_it(pd: tuple[Sandbox, str, Path, Router]) -> None:
    sb, inventory, tmp, front = pd
    args = _restart(tmp, 4, OLD, SURGE, front)
    cli, results = _interrupted(pd, "c", args, rf"^({'|'.join(OLD)})/\S+: retiring$")
    assert not re.search(r": retired$", cli.seen_at_interrupt, re.M), "interrupted after a unit was retired"
    _one_cohort_serves(sb, front, cli, results, SURGE, "4", GENS)
    _converges(pd, args, SURGE, "4", GENS, resumed=True)


def test_ctrl_c_while_both_cohort_routers_are_in_the_front_finishes_the_switch(pd: tuple[Sandbox, str, Path, Router]) -> None:
    """fleet reaches the front through :class:`HeldDeletes`, which holds its deregistration of
    the old cohort's router: Ctrl-C lands with both cohort routers in the front."""
    sb, inventory, tmp, front = pd
    held = HeldDeletes(front.url)
    try:
        held.armed.set()
        args = (*_restart(tmp, 5, SURGE, OLD, front)[:-1], held.url)
        load = LoadGen(front.url, workers=4, stream_every=3, stream_tokens=300, model=MODEL).start()
        cli = Cli(sb, inventory, tmp, "b0", *args)
        try:
            _until("fleet's deregistration of the old cohort's router", held.held.is_set, WAIT_S)
            assert {w["url"] for w in front.workers()} == {_router_url(sb, OLD), _router_url(sb, SURGE)}
            rc = cli.interrupt_and(held.release.set)
        finally:
            cli.close()
            results = load.stop(at_least=20)
    finally:
        held.close()
    _settled(cli, rc, load)
    assert " deregistered" not in cli.seen_at_interrupt
    _one_cohort_serves(sb, front, cli, results, OLD, "5", GENS)
    _converges(pd, _restart(tmp, 5, SURGE, OLD, front), OLD, "5", GENS, resumed=True)


def test_killed_with_both_cohort_routers_in_the_front_the_same_command_finishes(pd: tuple[Sandbox, str, Path, Router]) -> None:
    """fleet dies (SIGKILL, nothing cleans up) while both cohort routers are in the front: each
    request is still routed inside one cohort; the same command again finishes the switch."""
    sb, inventory, tmp, front = pd
    args = _restart(tmp, 6, OLD, SURGE, front)
    held = HeldDeletes(front.url)
    try:
        held.armed.set()
        cli = Cli(sb, inventory, tmp, "kill", *(*args[:-1], held.url))
        try:
            _until("fleet's deregistration of the old cohort's router", held.held.is_set, WAIT_S)
            cli.kill()
        finally:
            cli.close()
    finally:
        held.close()
    assert {w["url"] for w in front.workers()} == {_router_url(sb, OLD), _router_url(sb, SURGE)}
    load = LoadGen(front.url, workers=4, stream_every=3, stream_tokens=300, model=MODEL).start()
    try:
        _converges(pd, args, SURGE, "6", GENS, resumed=True)
    finally:
        results = load.stop(at_least=20)
    assert load.failures == [], [(r.error, r.status) for r in load.failures[:5]]
    assert {r.generation for r in results} == {"5", "6"}
    _one_cohort_serves(sb, front, None, results, SURGE, "6", GENS)


def test_a_second_ctrl_c_while_retiring_leaves_it_for_the_same_command(pd: tuple[Sandbox, str, Path, Router]) -> None:
    """Ctrl-C while the old cohort retires, and again while fleet finishes retiring it: exit 130
    at once with the old cohort partly retired (out of the front, no lock left); the same
    command again retires the rest."""
    sb, inventory, tmp, front = pd
    args = _restart(tmp, 7, SURGE, OLD, front)
    load = LoadGen(front.url, workers=4, stream_every=3, stream_tokens=300, model=MODEL).start()
    cli = Cli(sb, inventory, tmp, "twice", *args)
    try:
        cli.wait_line(rf"^({'|'.join(SURGE)})/\S+: retiring$")
        cli.sigint()
        cli.wait_line(r"^interrupted after traffic began moving[\s\S]*: retiring$")
        rc = cli.interrupt()
    finally:
        cli.close()
        results = load.stop(at_least=20)
    _settled(cli, rc, load)
    assert "the switch finished" not in cli.stderr
    assert [w["url"] for w in front.workers()] == [_router_url(sb, OLD)]
    assert any(_containers(sb, h) for h in SURGE), "nothing of the old cohort was left to retire"
    for h in OLD + SURGE:
        assert sb.ssh(h, f"test -e /run/fleet/lock/{DEPLOYMENT}").rc != 0, f"{h}: deploy lock left"
    _converges(pd, args, OLD, "7", GENS, resumed=True)
    _one_cohort_serves(sb, front, None, results, OLD, "7", GENS)


def test_a_switch_onto_the_serving_cohort_is_refused_untouched(pd: tuple[Sandbox, str, Path, Router]) -> None:
    """A stale playbook (placement on the hosts that no longer serve) rolled with --surge naming
    the serving cohort: refused (exit 2, one exact line) before anything changes."""
    sb, inventory, tmp, front = pd
    before = {(h, u): container_id(sb, h, u) for h in OLD for u in _containers(sb, h)}
    proc = fleet(sb, *_restart(tmp, 8, SURGE, OLD, front), inventory=inventory)
    assert proc.returncode == 2, f"{proc.stdout}\n{proc.stderr}"
    assert proc.stderr.strip().splitlines()[-1] == (
        f"fleet: error: router {front.url}: the cohort on h6, h7, h8 serves deployment {DEPLOYMENT} already "
        f"({_router_url(sb, OLD)}; {_router_url(sb, SURGE)} is not registered): set the playbook's placement to those "
        f"hosts and give the others as --surge"
    )
    assert {(h, u): container_id(sb, h, u) for h in OLD for u in _containers(sb, h)} == before
    _one_cohort_serves(sb, front, None, [], OLD, "7", GENS)


def test_ctrl_c_while_a_rollback_revives_its_router_puts_the_cohort_back_into_prev(pd: tuple[Sandbox, str, Path, Router]) -> None:
    """``fleet rollback --surge`` of generation 7 (on OLD): generation 6, kept in prev/ on SURGE,
    is revived step by step; Ctrl-C while its router is restored (its engines revived and
    healthy) puts all of it back into prev/, so the same command then brings generation 6 back."""
    sb, inventory, tmp, front = pd
    pb = _moved(V2, tmp / "pd-v7-rollback.yaml", OLD, generation="7")
    args = ("rollback", pb, "--surge", ":".join(SURGE), "--router", front.url)
    cli, results = _interrupted(pd, "rollback", args, rf"^{SURGE[2]}/{ROUTER_UNIT}: restoring")
    assert "cohort router" not in cli.seen_at_interrupt, "interrupted after the front router was touched"
    assert re.search(rf"^{SURGE[0]}/\S+: healthy", cli.seen_at_interrupt, re.M), "the revived engines were up"
    _one_cohort_serves(sb, front, cli, results, OLD, "7", GENS)
    _converges(pd, args, SURGE, "6", GENS, resumed=False, outcome="rolled-back")
