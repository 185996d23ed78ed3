"""A vLLM NIXL prefill/decode deployment on the sandbox with the stand-in engines (issue 24's failure
cases in the CI tier; the real engines' are in tests/real_engine/test_real_pd.py): catalog entry
deepseek/vllm-pd-tp8-6000d-nvfp4 reshaped by overrides to 1P1D on h9 (prefill) and h10 (decode),
the vllm-router stand-in in PD mode on h1 (standin/router.py, from an image derived here: the base
stand-in image carries no vllm-router).

- NIXL missing from the image: the stand-in image has no nixl package, so ``fleet up`` refuses in
  preflight with one line per rank naming host and image, and nothing starts.
- With ``--skip-preflight`` the deployment comes up and ``up``'s canary proves the KV crossed (the
  decode's own ``vllm:nixl_xfer_time_seconds`` count moved).
- The prefill host refusing its NIXL side channel (tcp/5600, a reject rule in its network
  namespace -- the failure the real-engine tier injects with iptables): ``fleet status --probe``
  exits 1 with the canary's line naming router, prefill and decode hosts and the decode engine's
  own error line; ``fleet up`` of the deployment exits non-zero with that line and leaves nothing
  running: no container, no deploy lock.
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from launcher.sandbox.client import Sandbox
from launcher.sandbox.standin.router import SHIM
from tests.deploy.test_sandbox_e2e import containers, fleet, need_netns, ok
from tests.sandbox_playbooks import DROP

pytestmark = pytest.mark.sandbox
SANDBOX_HOSTS = 10

DEPLOYMENT = "sb-pdc"
PREFILL, DECODE, ROUTER = "h9", "h10", "h1"
HOSTS = (ROUTER, PREFILL, DECODE)
ROUTER_IMAGE = "fleet-standin-vllm-router:pd"
SIDE_CHANNEL_PORT = 5600  # the recipe's nixl_side_channel port
PLAYBOOK = f"""\
name: {DEPLOYMENT}
recipe: deepseek/vllm-pd-tp8-6000d-nvfp4
placement:
  prefill:
    hosts: {PREFILL}
    replicas: 1
  decode:
    hosts: {DECODE}
    replicas: 1
  router:
    hosts: {ROUTER}
overrides:
  image: fleet-standin:latest
  images: {{router: {ROUTER_IMAGE}}}
  parallelism: {{tp: 1}}
  gpus_per_node: 1
  drop: [mooncake_store, gateway]
  drop_docker_flags: {DROP}
  shm_size: 1g
  start_timeout_s: 60
ports:
  http: 8510
  router: 8310
"""
CANARY = f"PD canary through the router on {ROUTER} (prefill {PREFILL} -> decode {DECODE}): no KV transfer: "
NFT_TABLE = "fleetpdc"


def errors(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("fleet: error: ")]


def locks(sb: Sandbox) -> list[str]:
    """Hosts still holding the deployment's deploy lock."""
    return [h for h in HOSTS if sb.ssh(h, f"test -e /run/fleet/lock/{DEPLOYMENT}").rc == 0]


@pytest.fixture(scope="module")
def pb(sandbox_fleet: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The playbook, with the router's image derived on h1: the stand-in image plus the
    ``vllm-router`` shim (busybox has no chmod: the image's python writes it)."""
    sb = sandbox_fleet
    need_netns(sb)
    shim = base64.b64encode(SHIM.encode()).decode()  # no shell quoting on its way into the image
    write = (f"import base64, os; open('/usr/local/bin/vllm-router', 'wb').write(base64.b64decode('{shim}')); "
             "os.chmod('/usr/local/bin/vllm-router', 0o755)")  # fmt: skip
    res = sb.ssh(ROUTER, "docker rm -f fleet-pdc-mk >/dev/null 2>&1; "
                         f"docker run --name fleet-pdc-mk --entrypoint python3 fleet-standin:latest -c \"{write}\" && "
                         f"docker commit fleet-pdc-mk {ROUTER_IMAGE} && docker rm fleet-pdc-mk")  # fmt: skip
    assert res.rc == 0, res.out + res.err
    path = tmp_path_factory.mktemp("pdc") / f"{DEPLOYMENT}.yaml"
    path.write_text(PLAYBOOK)
    yield path
    refuse_side_channel(sb, False)
    if containers(sb, HOSTS, DEPLOYMENT) or locks(sb):
        fleet(sb, "down", str(path), "-q", "--break-lock")


def refuse_side_channel(sb: Sandbox, on: bool) -> None:
    """The prefill host resets connections to its NIXL side channel (on), or no longer (off)."""
    ns = sb.host(PREFILL).netns
    assert ns, "needs a netns sandbox"
    if on:
        rule = (f"table inet {NFT_TABLE} {{\n chain input {{\n  type filter hook input priority 0;\n"
                f"  tcp dport {SIDE_CHANNEL_PORT} reject with tcp reset\n }}\n}}\n")  # fmt: skip
        subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=rule, text=True, check=True)
    else:
        subprocess.run(["ip", "netns", "exec", ns, "nft", "delete", "table", "inet", NFT_TABLE],
                       capture_output=True, check=False)  # fmt: skip


def test_nixl_missing_from_the_image_is_refused_by_preflight(sandbox_fleet: Sandbox, pb: Path) -> None:
    sb = sandbox_fleet
    refused = fleet(sb, "up", str(pb))
    assert refused.returncode != 0, refused.stdout
    fails = [ln for ln in refused.stderr.splitlines() if ln.startswith("fleet: preflight: fail: ")]
    fix = "(fix: use an image that provides it: image in the recipe, or overrides.image in the playbook)"
    assert fails == [
        f"fleet: preflight: fail: {DECODE}/fleet-{DEPLOYMENT}-decode0-r0: programs: image fleet-standin:latest on "
        f"{DECODE} has no python3 -m nixl (the decode needs it) {fix}",
        f"fleet: preflight: fail: {PREFILL}/fleet-{DEPLOYMENT}-prefill0-r0: programs: image fleet-standin:latest on "
        f"{PREFILL} has no python3 -m nixl (the prefill needs it) {fix}",
    ], refused.stderr
    assert containers(sb, HOSTS, DEPLOYMENT) == {} and locks(sb) == [], "nothing starts"


def test_a_canary_that_moves_no_kv_fails_probe_and_up(sandbox_fleet: Sandbox, pb: Path) -> None:
    sb = sandbox_fleet
    # Past preflight (it refuses the image without NIXL): the canary proves the crossing.
    up = fleet(sb, "up", str(pb), "--skip-preflight", "--json")
    assert up.returncode == 0, up.stdout + up.stderr
    crossing = json.loads(up.stdout)["crossing"]
    assert (crossing["ok"], crossing["router"], crossing["prefill"], crossing["decode"]) == (
        True, ROUTER, [PREFILL], [DECODE]), crossing
    assert crossing["transfers"][DECODE]["done"] == 1, crossing

    engine_line = f"; {DECODE}: ERROR "  # vLLM's logger format, then [nixl_connector.py] and its text
    nixl = (f"[nixl_connector.py] NIXL transfer failure: handshake_setup_failed | Context: KV transfer from "
            f"{sb.host(PREFILL).data_ip}:{SIDE_CHANNEL_PORT} failed: [Errno 111] Connection refused")  # fmt: skip
    refuse_side_channel(sb, True)
    try:
        probe = fleet(sb, "status", str(pb), "--probe")
        assert probe.returncode == 1, probe.stdout + probe.stderr
        assert len(errors(probe)) == 1, probe.stderr
        line = errors(probe)[0].removeprefix("fleet: error: ")
        print(f"status --probe with the side channel refused: {line}")
        assert line.startswith(CANARY + "the router answered 500: Internal server error" + engine_line), line
        assert line.endswith(nixl), line

        ok(fleet(sb, "down", str(pb), "-q"))
        failed = fleet(sb, "up", str(pb), "--skip-preflight")
    finally:
        refuse_side_channel(sb, False)
    assert failed.returncode != 0, failed.stdout
    line = errors(failed)[-1].removeprefix("fleet: error: ")
    print(f"up with the side channel refused: rc={failed.returncode} {line}")
    assert line.startswith(CANARY + "the router answered 500: Internal server error" + engine_line), failed.stderr
    assert line.endswith(nixl), line
    assert containers(sb, HOSTS, DEPLOYMENT) == {}, "the deployment that never crossed is torn down"
    assert locks(sb) == [], "and its deploy lock released"
