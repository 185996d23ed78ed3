"""``fleet up`` with a rolling rollout when only the deployment's own router changed (its metrics
port), on the sandbox: four single-node replicas on h1..h4 behind the real sglang-router 0.3.2 as
a fleet unit on h5.  The engines stay as they are; the router restarts after them.

- Ctrl-C while h5's new router is being started (h5's docker shim holds ``docker run`` twice
  fleet's interrupt grace, ``fanout.INTERRUPT_GRACE_S``, so the interrupt lands inside the start): exit 130, ``fleet: interrupted`` last; the router is
  back on the generation it ran, healthy, listing every replica; a request through it is
  answered.  The same command then finishes the change (exit 0).
- The new router's ``docker run`` fails (h5's docker shim refuses it once, as a daemon refuses a
  container): exit 1, the router reported ``restored`` -- back on its previous generation and
  serving -- and the error names the group.

Run (root, ~1.5 min): ``FLEET_SANDBOX_NAME=uprr1 python -m pytest -x -q tests/rolling/test_sandbox_up_rolling_router.py``
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Iterator

import pytest

from launcher.execute.fanout import INTERRUPT_GRACE_S
from launcher.rolling.router_api import RouterClient
from launcher.sandbox.client import Sandbox
from tests.cli_process import Cli, until
from tests.rolling.conftest import fleet, http, ok, router_variant, unit_rows

pytestmark = pytest.mark.sandbox

DEPLOYMENT = "sb-rur"
HOSTS = ("h1", "h2", "h3", "h4")
ROUTER_HOST = "h5"
HTTP_PORT, ROUTER_PORT = 31400, 8400
ROUTER = f"{DEPLOYMENT}/router"
BEGAN, FAIL_ONCE = "fleet-rur-run", "fleet-rur-fail-once"


def _playbook(tmp: Path, metrics_port: int) -> str:
    """rolling-router.yaml (rollout: rolling) as its own deployment; ``metrics_port`` changes the
    router's argv only."""
    ports = {"http": HTTP_PORT, "router": ROUTER_PORT, "router_metrics": metrics_port}
    return router_variant(tmp, DEPLOYMENT, ports, f"rur-{metrics_port}")


Setup = tuple[Sandbox, Path, str]


@pytest.fixture(scope="module")
def deployed(sandbox_fleet: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    sb = sandbox_fleet
    tmp = tmp_path_factory.mktemp("up-rolling-router")
    first = _playbook(tmp, 29400)
    try:
        ok(fleet(sb, "up", first, "--skip-preflight", "--quiet"))
        yield sb, tmp, f"http://{sb.host(ROUTER_HOST).address}:{ROUTER_PORT}"
    finally:
        fleet(sb, "down", first, "--quiet")


@pytest.fixture
def docker_shim(deployed: Setup) -> Iterator[Path]:
    """h5's ``docker``, wrapped: ``docker run`` first touches /run/BEGAN; it fails once if
    /run/FAIL_ONCE exists (removing it) and otherwise waits the seconds /run/BEGAN.delay holds."""
    sb = deployed[0]
    docker = shutil.which("docker")
    assert docker is not None
    shim = Path(sb.host(ROUTER_HOST).dir) / "fakehw" / "bin" / "docker"
    shim.write_text(
        f'#!/bin/sh\n[ "$1" = run ] || exec {docker} "$@"\n'
        f"touch /run/{BEGAN}\n"
        f'if [ -e /run/{FAIL_ONCE} ]; then rm -f /run/{FAIL_ONCE}; '
        'echo "docker: Error response from daemon: driver failed programming external connectivity" >&2; exit 125; fi\n'
        f'd=$(cat /run/{BEGAN}.delay 2>/dev/null); [ -z "$d" ] || sleep "$d"\n'
        f'exec {docker} "$@"\n'
    )
    shim.chmod(0o755)
    try:
        yield shim
    finally:
        shim.unlink()
        sb.ssh(ROUTER_HOST, f"rm -f /run/{BEGAN} /run/{BEGAN}.delay /run/{FAIL_ONCE}")


def _router_serves(setup: Setup, generation: int) -> None:
    """The router unit runs healthy on ``generation``, the engines on generation 1; the router
    lists every replica healthy and answers a request."""
    sb, tmp, url = setup
    rows = unit_rows(sb, _playbook(tmp, 29400))
    assert rows == {**{h: ("running", "ok", 1) for h in HOSTS}, ROUTER_HOST: ("running", "ok", generation)}, rows
    everyone = {f"http://{sb.host(h).data_ip}:{HTTP_PORT}": True for h in HOSTS}
    until("the router to list every replica healthy", lambda: {w.url: w.healthy for w in RouterClient(url).workers()} == everyone)
    code, body = http(f"{url}/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 4}}, timeout=30)
    assert code == 200 and body["text"], (code, body)


def test_ctrl_c_while_the_new_router_starts_puts_the_previous_back(deployed: Setup, docker_shim: Path) -> None:
    sb, tmp, _ = deployed
    sb.ssh(ROUTER_HOST, f"echo {2 * INTERRUPT_GRACE_S:g} > /run/{BEGAN}.delay")
    args = ("up", _playbook(tmp, 29401), "--skip-preflight")
    cli = Cli(sb, sb.inventory, tmp, "ctrl-c", *args)
    try:
        until("h5's docker run", lambda: sb.ssh(ROUTER_HOST, f"test -e /run/{BEGAN}").rc == 0, timeout=240)
        rc = cli.interrupt()
    finally:
        cli.close()
    assert rc == 130, cli.stderr
    assert "Traceback" not in cli.stderr, cli.stderr
    assert cli.stderr.splitlines()[-1] == "fleet: interrupted", cli.stderr
    assert (f"interrupted while restarting the routers / Mooncake / gateway: putting {ROUTER} back in service first"
            in cli.stderr), cli.stderr  # fmt: skip
    assert f"back in service: {ROUTER} on generation 1 (as before)" in cli.stderr, cli.stderr
    _router_serves(deployed, 1)
    sb.ssh(ROUTER_HOST, f"rm -f /run/{BEGAN}.delay")
    proc = ok(fleet(sb, *args, "--json"))
    rows = [(g["group"], g["outcome"], g["generation_after"]) for g in json.loads(proc.stdout)["groups"]]
    assert rows == [*((f"{DEPLOYMENT}/single{i}", "unchanged", 1) for i in range(4)), (ROUTER, "restarted", 2)], rows
    _router_serves(deployed, 2)


def test_a_new_router_that_fails_to_start_is_restored(deployed: Setup, docker_shim: Path) -> None:
    sb, tmp, _ = deployed
    sb.ssh(ROUTER_HOST, f"touch /run/{FAIL_ONCE}")
    proc = fleet(sb, "up", _playbook(tmp, 29402), "--skip-preflight", "--json")
    assert proc.returncode == 1, f"{proc.stdout}\n{proc.stderr}"
    doc = json.loads(proc.stdout)
    router = next(g for g in doc["groups"] if g["group"] == ROUTER)
    assert (router["outcome"], router["generation_after"], router["detail"]) == (
        "restored", 2, "previous generation 2 restored and healthy"), router  # fmt: skip
    assert len(doc["errors"]) == 1 and doc["errors"][0].startswith(f"group {ROUTER}: "), doc["errors"]
    assert "driver failed programming external connectivity" in doc["errors"][0], doc["errors"]
    _router_serves(deployed, 2)
