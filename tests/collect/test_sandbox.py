"""``fleet collect`` on the sandbox fleet through the real CLI: a 2-node deployment brought up with
``fleet up`` (a secret, NCCL_DEBUG on), then one bundle with a directory per host and a file set
per rank, secrets nowhere; a host whose sshd hangs is recorded in the manifest, not fatal."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from launcher.sandbox import faults
from launcher.sandbox.client import Sandbox
from tests.deploy.test_sandbox_e2e import fleet
from tests.sandbox_playbooks import DROP_KEEP_DEVICE, standin_playbook

pytestmark = pytest.mark.sandbox

SECRET = "hf_pfcollect_s3cr3t"


@pytest.fixture(autouse=True)
def facts_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Facts that fleet up's preflight gathers stay in the test's tmp dir, not ~/.cache."""
    monkeypatch.setenv("FLEET_FACTS_DIR", str(tmp_path / "facts"))


def test_collect_after_up_has_every_rank_and_no_secret(sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    sb = sandbox_fleet
    pb = tmp_path / "pf-collect.yaml"
    pb.write_text(standin_playbook(
        "pf-collect", "kimi/sglang-tp8pp2-h100", {"rank": "h1:h2"}, drop=DROP_KEEP_DEVICE, start_timeout_s=90,
        env={"NCCL_DEBUG": "INFO"}, rest="secrets:\n  - name: HF_TOKEN\n    from_env: PF_COLLECT_TOKEN\n",
    ))
    up = fleet(sb, "up", str(pb), "-q", env={"PF_COLLECT_TOKEN": SECRET})
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        out = tmp_path / "evidence.tar.gz"
        # The secret readable here too: collect masks its value wherever it occurs (issue 25, left item 4).
        proc = fleet(sb, "collect", str(pb), "-o", str(out), "--tail", "100", env={"PF_COLLECT_TOKEN": SECRET})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout.splitlines()[0].startswith("h1 | ok | 1 unit(s), ")
        with tarfile.open(out) as tar:
            names = tar.getnames()
            data = {n: (tar.extractfile(n).read() if tar.getmember(n).isfile() else b"") for n in names}  # type: ignore[union-attr]
        root = names[0].split("/")[0]
        manifest = json.loads(data[f"{root}/manifest.json"])
        assert {h: (v["status"], v["units"]) for h, v in manifest["hosts"].items()} == {
            "h1": ("ok", ["fleet-pf-collect-rank0-r0"]), "h2": ("ok", ["fleet-pf-collect-rank0-r1"])}
        for host, rank in (("h1", 0), ("h2", 1)):
            unit = f"{root}/{host}/fleet-pf-collect-rank0-r{rank}"
            for name in ("docker-logs.txt", "docker-inspect.json", "nccl.log",
                         f"files/etc/fleet/pf-collect/fleet-pf-collect-rank0-r{rank}/run.sh",
                         f"files/etc/fleet/pf-collect/fleet-pf-collect-rank0-r{rank}/env.names",
                         f"files/etc/fleet/pf-collect/fleet-pf-collect-rank0-r{rank}/manifest.json"):
                assert f"{unit}/{name}" in names, (host, name)
            assert data[f"{unit}/docker-logs.txt"].strip(), "container logs were collected"
            env = json.loads(data[f"{unit}/docker-inspect.json"])[0]["Config"]["Env"]
            assert "HF_TOKEN=***" in env and "NCCL_DEBUG=INFO" in env
            for name in ("facts.txt", "facts.json", "nvidia-smi-topo.txt", "show_gids.txt", "ip-addr.txt"):
                assert f"{root}/{host}/{name}" in names, (host, name)
        gids = data[f"{root}/h2/show_gids.txt"].decode()
        assert "\t5\t" in gids and "v2" in gids
        assert json.loads(data[f"{root}/h2/facts.json"])["gids"][-1]["index"] == 5
        assert "NV18" in data[f"{root}/h1/nvidia-smi-topo.txt"].decode()
        assert not [n for n in names if "secrets.env" in n]
        assert out.stat().st_mode & 0o777 == 0o600
        assert not [n for n, blob in data.items() if SECRET.encode() in blob], "the secret leaked into the bundle"
        assert sb.ssh("h1", "ls /tmp | grep -c fleet-collect || true").out.strip() == "0", "temp dir removed"
    finally:
        fleet(sb, "down", str(pb), "-q")


def test_collect_records_a_hung_host_and_goes_on(sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    sb = sandbox_fleet
    pb = tmp_path / "pf-hung.yaml"
    pb.write_text("name: pf-hung\nrecipe: qwen/sglang-tp2-h100-tuned\nplacement:\n  single:\n    hosts: h1:h8\n")
    faults.sshd_signal(sb.host("h8"), "stop")
    try:
        out = tmp_path / "hung.tar.gz"
        proc = fleet(sb, "collect", str(pb), "-o", str(out))
    finally:
        faults.sshd_signal(sb.host("h8"), "cont")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("h1 | ok | 0 unit(s), ")
    assert lines[1] == f"h8 | unreachable | no SSH banner from {sb.host('h8').address} within 10s"
    with tarfile.open(out) as tar:
        names = tar.getnames()
    root = names[0].split("/")[0]
    assert f"{root}/h8/UNREACHABLE.txt" in names and f"{root}/h1/facts.json" in names
