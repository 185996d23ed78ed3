"""Ctrl-C during a regular (non-PD) rolling restart, through the real ``fleet restart PB
--rolling --max-unavailable 2`` in a subprocess that gets SIGINT at a moment read from its
progress lines: four single-node replicas (h1..h4) behind the deployment's own router (the real
sglang-router 0.3.2 as a fleet unit on h5, drained through without ``--router``), a load
generator sending short requests and streams through that router the whole time.  Batches:
(single0, single1), then (single2, single3).

Moments, in order on one sandbox (each case starts from the state the previous one left and
rolls the next generation label):

a.  batch 2 drained out of the router, before anything stopped (its ``draining`` line);
b.  batch 2's new generation starting (its ``starting`` line: start or health gate);
b2. batch 1's new generation healthy, before it is back in the router: ``FLEET_STEP_HOOK`` holds
    the rollout at batch 1's ``register`` step (its ``healthy`` line read at the right moment
    raced the registration at CI's load);
c.  between batches (batch 1 back in the router; batch 2 untouched): ``FLEET_STEP_HOOK`` holds the
    rollout at batch 2's ``batch`` step (a progress line read at the right moment raced batch 2's
    first steps on a loaded machine);
k.  fleet SIGKILLed while batch 2 is drained out of the router (nothing cleans up): the same
    command (with ``--break-lock``: the killed run's deploy locks stay) registers the two
    replicas it finds running outside the router again, then rolls;
e.  a second Ctrl-C while fleet puts batch 2's previous generation back: it stops at once,
    leaving batch 2 stopped and out of the router; the same command restarts those two first
    (they are out of service already), into the router, then the others;
x.  as b, with an external ``--router`` (a real sglang-router on loopback, the load through it).

After each Ctrl-C: exit 130, ``fleet: interrupted`` last and no traceback; every replica runs
(one running container per host), healthy, on the generation expected (a batch interrupted
before its new generation was healthy is back on the one it ran; one interrupted after keeps
the new one), and is registered and healthy in the router; requests are answered by the
generation each host runs; no deploy lock and no fleet SSH connection left (connections matched
by both ends).  Then the same command exits 0 with every replica on the new generation.

The load rule: no request fails.  A replica is stopped only after it left the router and
drained; the interrupt either finds it still running (it goes back in as it is) or stopped (it
is restarted on a generation before it goes back), so nothing routed to it is cut.

Run (root, ~2.5 min): ``FLEET_SANDBOX_NAME=rollint1 python -m pytest -x -q tests/rolling/test_sandbox_rolling_interrupt.py``
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Iterator

import pytest

from launcher.rolling.router_api import RouterClient
from launcher.sandbox.client import Sandbox
from tests.rolling.conftest import Router, fleet, ok, router_variant, unit_rows
from tests.rolling.loadgen import LoadGen, Outcome
from tests.cli_process import Cli, local_conns, peers
from tests.cli_process import until as _until

pytestmark = pytest.mark.sandbox

DEPLOYMENT = "sb-rri"
HOSTS = ("h1", "h2", "h3", "h4")
ROUTER_HOST = "h5"
HTTP_PORT, ROUTER_PORT = 31300, 8300
UNITS = {h: f"fleet-{DEPLOYMENT}-single{i}-r0" for i, h in enumerate(HOSTS)}
GROUPS = {h: f"{DEPLOYMENT}/single{i}" for i, h in enumerate(HOSTS)}


# Generations whose case interrupts at a "starting" line: their stand-ins stay unready for 2 s,
# so the Ctrl-C surely lands before the health gate passes, however slow the test is to react.
SLOW_START = {3, 7, 8}


def _playbook(tmp: Path, gen: int) -> str:
    """rolling-router.yaml as its own deployment (name, ports) with generation label ``gen``."""
    ports = {"http": HTTP_PORT, "router": ROUTER_PORT, "router_metrics": 29300}
    env = {"FLEET_GENERATION": str(gen), **({"FLEET_STANDIN_START_DELAY": "2"} if gen in SLOW_START else {})}
    return router_variant(tmp, DEPLOYMENT, ports, f"rri-v{gen}", env)


Setup = tuple[Sandbox, Path, str]


@pytest.fixture(scope="module")
def deployed(sandbox_fleet: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """Generation 1 on h1..h4 behind its router on h5."""
    sb = sandbox_fleet
    tmp = tmp_path_factory.mktemp("rolling-interrupt")
    first = _playbook(tmp, 1)
    try:
        ok(fleet(sb, "up", first, "--skip-preflight", "--quiet"))
        yield sb, tmp, f"http://{sb.host(ROUTER_HOST).address}:{ROUTER_PORT}"
    finally:
        fleet(sb, "down", first, "--quiet")


def _args(tmp: Path, gen: int) -> tuple[str, ...]:
    return ("restart", _playbook(tmp, gen), "--rolling", "--max-unavailable", "2")


def _worker(sb: Sandbox, h: str) -> str:
    return f"http://{sb.host(h).data_ip}:{HTTP_PORT}"


def _interrupted(setup: Setup, name: str, args: tuple[str, ...], moment: str) -> tuple[Cli, list[Outcome]]:
    """Runs ``fleet args`` under load; Ctrl-C when a progress line matches ``moment``; exit 130."""
    sb, tmp, router = setup
    load = LoadGen(router, workers=8, stream_every=4, stream_tokens=200).start()
    cli = Cli(sb, sb.inventory, tmp, name, *args)
    try:
        cli.wait_line(moment)
        rc = cli.interrupt()
    finally:
        cli.close()
        results = load.stop(at_least=50)
    assert rc == 130, cli.stderr
    assert "Traceback" not in cli.stderr, cli.stderr
    assert cli.stderr.splitlines()[-1] == "fleet: interrupted", cli.stderr
    assert load.failures == [], [(r.error, r.status) for r in load.failures[:5]]
    return cli, results


def _serving(setup: Setup, gens: dict[str, int], cli: Cli | None) -> None:
    """Every replica runs whole and healthy on ``gens[host]`` (its manifest, and the answers it
    gives through the router), registered and healthy in the router; the router runs; no deploy
    lock left; none of ``cli``'s SSH connections left on any host."""
    sb, tmp, router = setup
    rows = unit_rows(sb, _playbook(tmp, 1))
    assert {h: rows[h] for h in HOSTS} == {h: ("running", "ok", gens[h]) for h in HOSTS}, rows
    assert rows[ROUTER_HOST][:2] == ("running", "ok"), rows
    assert {w.url: w.healthy for w in RouterClient(router).workers()} == {_worker(sb, h): True for h in HOSTS}
    for h in (*HOSTS, ROUTER_HOST):
        res = sb.ssh(h, f"docker ps -q --filter status=running --filter label=fleet.deployment={DEPLOYMENT}")
        assert len(res.out.split()) == 1, (h, res.out)
        assert sb.ssh(h, f"test -e /run/fleet/lock/{DEPLOYMENT}").rc != 0, f"{h}: deploy lock left"
    if cli is not None:
        assert cli.conns, "no connection of fleet seen while it settled"
        mine = local_conns(os.getpid())  # this test's own cached SSH connections
        for h in (*HOSTS, ROUTER_HOST):
            _until(f"{h}: fleet's SSH connections closed", lambda h=h: not (peers(sb, h) - mine) & cli.conns)  # type: ignore[misc]
    after = LoadGen(router, workers=4, stream_every=4, stream_tokens=20).start().stop(at_least=40)
    assert after and all(r.ok for r in after), [r.error for r in after if not r.ok][:5]
    assert {(r.host, r.generation) for r in after} <= {(h, str(gens[h])) for h in HOSTS}


def _converges(setup: Setup, args: tuple[str, ...], gen: int, *extra: str) -> dict[str, object]:
    """The same command again, under load: exit 0, every replica restarted onto ``gen``."""
    sb, _, router = setup
    load = LoadGen(router, workers=8, stream_every=4, stream_tokens=200).start()
    try:
        proc = fleet(sb, *args, *extra, "--json")
    finally:
        results = load.stop(at_least=50)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    doc: dict[str, object] = json.loads(proc.stdout)
    assert doc["errors"] == [], doc
    rows = [(g["group"], g["outcome"], g["generation_after"]) for g in doc["groups"]]  # type: ignore[attr-defined]
    assert rows == [*((GROUPS[h], "restarted", gen) for h in HOSTS), (f"{DEPLOYMENT}/router", "skipped", 1)], rows
    assert load.failures == [], [(r.error, r.status) for r in load.failures[:5]]
    _serving(setup, {h: gen for h in HOSTS}, None)
    return doc


def _unit_line(h: str, state: str) -> str:
    return rf"^{h}/{re.escape(UNITS[h])}: {state}"


def _group_line(h: str, state: str) -> str:
    return rf"^{h}/{re.escape(GROUPS[h])}: {state}"


def test_ctrl_c_while_a_batch_is_drained_puts_it_back_as_it_runs(deployed: Setup) -> None:
    sb, tmp, _ = deployed
    args = _args(tmp, 2)
    cli, _ = _interrupted(deployed, "a", args, _group_line("h3", "draining"))
    assert not re.search(_unit_line("h3", "stopping"), cli.seen_at_interrupt, re.M), "interrupted after h3 stopped"
    assert re.search(r"^interrupted in batch 2/2: putting sb-rri/single2, sb-rri/single3 back in service first", cli.stderr, re.M)
    assert re.search(r"^back in service: sb-rri/single2 on generation 1 \(as before\), sb-rri/single3 on generation 1 "
                     r"\(as before\)$", cli.stderr, re.M), cli.stderr  # fmt: skip
    _serving(deployed, {"h1": 2, "h2": 2, "h3": 1, "h4": 1}, cli)
    _converges(deployed, args, 2)


def test_ctrl_c_while_the_new_generation_starts_restores_the_previous(deployed: Setup) -> None:
    sb, tmp, _ = deployed
    args = _args(tmp, 3)
    cli, _ = _interrupted(deployed, "b", args, _unit_line("h3", "starting"))
    assert not re.search(_unit_line("h3", "healthy"), cli.seen_at_interrupt, re.M), "interrupted after h3 was healthy"
    assert "group sb-rri/single2: back to generation 2" in cli.stderr, cli.stderr
    _serving(deployed, {"h1": 3, "h2": 3, "h3": 2, "h4": 2}, cli)
    _converges(deployed, args, 3)


def test_ctrl_c_after_the_new_generation_is_healthy_keeps_it(deployed: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    sb, tmp, _ = deployed
    args = _args(tmp, 4)
    cli = _interrupted_while_held(deployed, "b2", args, "register", "h1 h2", monkeypatch)
    assert re.search(_unit_line("h1", "healthy"), cli.seen_at_interrupt, re.M), cli.seen_at_interrupt
    assert not re.search(_group_line("h1", "back in router"), cli.seen_at_interrupt, re.M), "h1 was back already"
    assert "back to generation" not in cli.stderr, cli.stderr
    _serving(deployed, {"h1": 4, "h2": 4, "h3": 3, "h4": 3}, cli)
    _converges(deployed, args, 4)


def _interrupted_while_held(setup: Setup, name: str, args: tuple[str, ...], step: str, hosts: str,
                            monkeypatch: pytest.MonkeyPatch) -> Cli:  # fmt: skip
    """:func:`_interrupted`, the Ctrl-C sent while a step hook holds fleet at ``step`` on exactly
    ``hosts`` (saying so on fleet's stderr); the hook lets go once the run ended."""
    hold = setup[1] / f"hold-{name}"
    hold.mkdir()
    (hold / "hook.sh").write_text(
        f'[ "$FLEET_STEP" = {step} ] && [ "$FLEET_STEP_HOSTS" = "{hosts}" ] || exit 0\n'
        f'echo "hook: holding {step} $FLEET_STEP_HOSTS"\n'
        'while [ ! -e "$HOLD_DIR/go" ]; do sleep 0.1; done\n'
    )
    with monkeypatch.context() as env:  # this run's environment only
        env.setenv("FLEET_STEP_HOOK", f"sh {hold / 'hook.sh'}")
        env.setenv("HOLD_DIR", str(hold))
        try:
            cli, _ = _interrupted(setup, name, args, f"^hook: holding {step} {hosts}$")
        finally:
            (hold / "go").touch()
    return cli


def test_ctrl_c_between_batches_leaves_every_replica_serving(deployed: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    sb, tmp, _ = deployed
    args = _args(tmp, 5)
    # batch 2, before anything of it is touched
    cli = _interrupted_while_held(deployed, "c", args, "batch", "h3 h4", monkeypatch)
    assert re.search(_group_line("h2", "back in router"), cli.seen_at_interrupt, re.M), cli.seen_at_interrupt
    assert not re.search(_unit_line("h3", "stopping"), cli.stderr, re.M), "batch 2 was stopped"
    _serving(deployed, {"h1": 5, "h2": 5, "h3": 4, "h4": 4}, cli)
    _converges(deployed, args, 5)


def test_killed_while_drained_the_same_command_puts_the_replicas_back(deployed: Setup) -> None:
    """SIGKILL while batch 2 is out of the router: nothing puts it back; the same command
    (``--break-lock``: the dead run's locks stay) registers both replicas first, then rolls."""
    sb, tmp, router = deployed
    args = _args(tmp, 6)
    cli = Cli(sb, sb.inventory, tmp, "kill", *args)
    try:
        cli.wait_line(_group_line("h3", "draining"))
        cli.kill()
    finally:
        cli.close()
    listed = {w.url for w in RouterClient(router).workers()}
    assert listed == {_worker(sb, h) for h in ("h1", "h2")}, listed
    doc = _converges(deployed, args, 6, "--break-lock")
    notes = [n for n in doc["notes"] if "ran outside its routers" in n]  # type: ignore[attr-defined]
    assert [n.split()[1] for n in notes] == [GROUPS["h3"], GROUPS["h4"]], doc["notes"]



def test_a_second_ctrl_c_while_restoring_leaves_it_for_the_same_command(deployed: Setup) -> None:
    """Ctrl-C while batch 2's new generation starts, and again while fleet puts the previous
    one back: exit 130 at once (batch 2 may be left stopped, out of the router; no lock left);
    the same command then restarts it into the router with the rest."""
    sb, tmp, router = deployed
    args = _args(tmp, 7)
    load = LoadGen(router, workers=8, stream_every=4, stream_tokens=200).start()
    cli = Cli(sb, sb.inventory, tmp, "twice", *args)
    try:
        cli.wait_line(_unit_line("h3", "starting"))
        cli.sigint()
        cli.wait_line(r"^group sb-rri/single2: back to generation 6$")
        rc = cli.interrupt()
    finally:
        cli.close()
        load.stop(at_least=50)
    assert rc == 130, cli.stderr
    assert "Traceback" not in cli.stderr, cli.stderr
    assert cli.stderr.splitlines()[-1] == "fleet: interrupted", cli.stderr
    assert "back in service:" not in cli.stderr, cli.stderr
    assert load.failures == [], [(r.error, r.status) for r in load.failures[:5]]
    for h in (*HOSTS, ROUTER_HOST):
        assert sb.ssh(h, f"test -e /run/fleet/lock/{DEPLOYMENT}").rc != 0, f"{h}: deploy lock left"
    # Batch 2 is out of service either way: left stopped (torn down, not restarted yet), or
    # already back on generation 6 but not yet in the router when the second Ctrl-C came (on a
    # loaded machine the restore can finish first).  The stopped ones go first.
    assert {w.url for w in RouterClient(router).workers()} == {_worker(sb, h) for h in ("h1", "h2")}
    stopped = [GROUPS[h] for h in ("h3", "h4") if not sb.ssh(h, f"docker ps -q -f name=^{UNITS[h]}$").out.strip()]
    doc = _converges(deployed, args, 7)
    rest = [b for b in ([GROUPS["h1"], GROUPS["h2"]], [g for g in (GROUPS["h3"], GROUPS["h4"]) if g not in stopped]) if b]
    assert doc["batches"] == ([stopped] if stopped else []) + rest, (stopped, doc)
    first = f"not running, so restarted first (batch 1): {', '.join(stopped)}"
    assert (first in doc["notes"]) == bool(stopped), (stopped, doc["notes"])  # type: ignore[operator]


def test_ctrl_c_with_an_external_router_puts_the_batch_back_there(deployed: Setup, logs_dir: Path) -> None:
    """The same with ``--router`` (a real sglang-router on this machine's loopback over the
    four replicas; the load goes through it): Ctrl-C while batch 2's new generation starts puts
    batch 2 back on the previous generation and into that router; the deployment's own router,
    not given, is not touched."""
    sb, tmp, own = deployed
    ext = Router(("--worker-urls", *(_worker(sb, h) for h in HOSTS)), logs_dir / "router-rri-external.log")
    try:
        ext.wait_workers(4)
        setup = (sb, tmp, ext.url)
        args = (*_args(tmp, 8), "--router", ext.url)
        cli, _ = _interrupted(setup, "external", args, _unit_line("h3", "starting"))
        assert "group sb-rri/single2: back to generation 7" in cli.stderr, cli.stderr
        _serving(setup, {"h1": 8, "h2": 8, "h3": 7, "h4": 7}, cli)
        _converges(setup, args, 8)
    finally:
        ext.stop()
    everyone = {_worker(sb, h): True for h in HOSTS}  # its health checks see the replicas up again
    _until("the deployment's own router to list every replica healthy",
           lambda: {w.url: w.healthy for w in RouterClient(own).workers()} == everyone)  # fmt: skip
