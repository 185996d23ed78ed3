"""``fleet up/status/logs/down`` end to end on the sandbox fleet (real sshd, real dockerd, the
engine stand-in), through the real CLI in a subprocess.  One fleet per session (conftest)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from launcher.sandbox import dockerd, procs, state
from launcher.sandbox.client import Sandbox

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "playbooks" / "sandbox"


def fleet(sb: Sandbox, *args: str, env: dict[str, str] | None = None, known: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = ["fleet", *args[:1], *args[1:], "-i", sb.inventory]
    if known:
        cmd += ["--known-hosts", sb.known_hosts]
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=300, cwd=REPO)


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def status(sb: Sandbox, playbook: Path) -> list[dict[str, Any]]:
    proc = fleet(sb, "status", str(playbook), "--json")
    rows: list[dict[str, Any]] = json.loads(proc.stdout)
    return rows


def up_json(sb: Sandbox, playbook: Path, *extra: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = fleet(sb, "up", str(playbook), "--json", *extra, env=env)
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def generate(sb: Sandbox, host: str, url: str) -> dict[str, Any]:
    """POST /generate from the serving host itself (its data IP is only reachable in-fleet)."""
    body = json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": 4}})
    res = sb.ssh(host, f"curl -fsS -m 20 -H 'Content-Type: application/json' -d '{body}' {url}/generate")
    assert res.rc == 0, res.err
    answer: dict[str, Any] = json.loads(res.out)
    return answer


def started_at(sb: Sandbox, host: str, name: str) -> str:
    res = sb.ssh(host, f"docker inspect -f '{{{{.State.StartedAt}}}}' {name}")
    assert res.rc == 0, res.err
    return res.out.strip()


def with_overrides(src: Path, dest: Path, extra: str) -> Path:
    dest.write_text(src.read_text().replace("overrides:\n", "overrides:\n" + extra, 1))
    return dest


def test_single_node_lifecycle(sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    sb = sandbox_fleet
    pb = PLAYBOOKS / "single.yaml"
    unit = "fleet-sb-single-single0-r0"
    first = up_json(sb, pb)
    assert [(u["unit"], u["outcome"]) for u in first["units"]] == [(unit, "healthy")]
    gen = first["units"][0]["generation"]
    rows = status(sb, pb)
    assert [(r["host"], r["state"], r["health"], r["generation"], r["drift"]) for r in rows] == [
        ("h1", "running", "ok", gen, "none")
    ]
    answer = generate(sb, "h1", "http://127.0.0.1:30000")
    assert answer["fleet_standin"]["host"] == "h1" and answer["text"]

    before = started_at(sb, "h1", unit)
    again = up_json(sb, pb)
    assert [(u["action"], u["outcome"]) for u in again["units"]] == [("unchanged", "unchanged")]
    assert started_at(sb, "h1", unit) == before

    changed = with_overrides(pb, tmp_path / "single-ov.yaml", '  engine_args: [--max-running-requests, "16"]\n')
    check = up_json(sb, changed, "--check", "--diff")
    assert [(u["action"], u["outcome"]) for u in check["units"]] == [("restart", "planned")]
    assert f"+++ h1:/etc/fleet/sb-single/{unit}/run.sh" in check["diff"]
    assert "--max-running-requests 16" in check["diff"]
    assert started_at(sb, "h1", unit) == before, "--check touched nothing"
    assert [r["drift"] for r in status(sb, pb)] == ["none"]

    logs = ok(fleet(sb, "logs", str(pb), "--tail", "5")).stdout
    assert logs and all(line.startswith(f"h1/{unit} | ") for line in logs.splitlines())

    ok(fleet(sb, "down", str(pb), "-q"))
    assert [(r["state"], r["drift"]) for r in status(sb, pb)] == [("missing", "not deployed")]
    assert sb.ssh("h1", f"docker inspect {unit}").rc != 0


def test_two_node_pp_answers_through_rank0_and_restarts_as_a_group(sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    sb = sandbox_fleet
    pb = PLAYBOOKS / "pp2.yaml"
    up_json(sb, pb)
    rows = status(sb, pb)
    assert [(r["host"], r["rank"], r["state"]) for r in rows] == [("h6", 0, "running"), ("h7", 1, "running")]
    answer = generate(sb, "h6", "http://127.0.0.1:30000")
    assert answer["fleet_standin"]["host"] == "h6" and answer["text"]
    r1_before = started_at(sb, "h7", "fleet-sb-pp2-rank0-r1")
    changed = with_overrides(pb, tmp_path / "pp2-ov.yaml", '  engine_args: [--max-running-requests, "16"]\n')
    gen = rows[0]["generation"]
    doc = up_json(sb, changed)
    assert [(u["host"], u["outcome"], u["generation"]) for u in doc["units"]] == [
        ("h6", "healthy", gen + 1),
        ("h7", "healthy", gen + 1),
    ]
    assert started_at(sb, "h7", "fleet-sb-pp2-rank0-r1") != r1_before, "rank 1 restarted with its group"
    ok(fleet(sb, "down", str(changed), "-q"))
    assert [r["state"] for r in status(sb, pb)] == ["missing", "missing"]


def test_secret_reaches_the_engine_but_no_argv_log_or_world_readable_file(sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    sb = sandbox_fleet
    token = "hf_sandboxSECRET0123456789"
    pb = tmp_path / "secret.yaml"
    pb.write_text(
        (PLAYBOOKS / "single.yaml").read_text().replace("name: sb-single", "name: sb-secret")
        + "secrets:\n  - name: HF_TOKEN\n    from_env: FLEET_TEST_HF_TOKEN\n"
    )
    proc = fleet(sb, "up", str(pb), env={"FLEET_TEST_HF_TOKEN": token})
    ok(proc)
    assert token not in proc.stdout + proc.stderr
    unit = "fleet-sb-secret-single0-r0"
    env = sb.ssh("h1", f"docker exec {unit} sh -c 'cat /proc/1/environ | tr \"\\0\" \"\\n\"'")
    assert f"HF_TOKEN={token}" in env.out.splitlines(), "the engine can read it"
    for host in sb.hosts:
        ps = sb.ssh(host, "ps -eo args")
        assert ps.rc == 0 and token not in ps.out, host
    found = sb.ssh("h1", f"grep -rl {token} /etc/fleet /run/lock/fleet 2>/dev/null; true").out.split()
    assert found == [f"/etc/fleet/sb-secret/{unit}/secrets.env"]
    modes = sb.ssh("h1", f"stat -c %a {found[0]}").out.strip()
    assert modes == "600"
    logs = ok(fleet(sb, "logs", str(pb), "--tail", "50")).stdout
    assert token not in logs
    ok(fleet(sb, "down", str(pb), "-q"))
    assert sb.ssh("h1", f"grep -rl {token} /etc/fleet; true").out.strip() == "", "down leaves no secret behind"


def test_unknown_host_key_stops_up_before_anything_runs(sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    sb = sandbox_fleet
    pb = tmp_path / "hostkey.yaml"
    pb.write_text((PLAYBOOKS / "single.yaml").read_text().replace("name: sb-single", "name: sb-hostkey"))
    proc = fleet(sb, "up", str(pb), known=False, env={"HOME": str(tmp_path)})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("fleet: error: h1: host key"), proc.stderr
    assert sb.ssh("h1", "test -e /etc/fleet/sb-hostkey || test -e /run/lock/fleet/sb-hostkey").rc == 1


def test_unit_comes_back_after_its_dockerd_restarts(sandbox_fleet: Sandbox) -> None:
    sb = sandbox_fleet
    pb = PLAYBOOKS / "single.yaml"
    unit = "fleet-sb-single-single0-r0"
    up_json(sb, pb)
    _restart_dockerd(sb, "h1")
    deadline = time.monotonic() + 60
    while sb.ssh("h1", f"docker inspect -f '{{{{.State.Running}}}}' {unit}").out.strip() != "true":
        assert time.monotonic() < deadline, "container did not come back"
        time.sleep(0.5)
    rows = status(sb, pb)
    assert [r["state"] for r in rows] == ["running"]
    assert [(u["outcome"]) for u in up_json(sb, pb)["units"]] == ["unchanged"]
    ok(fleet(sb, "down", str(pb), "-q"))


def _restart_dockerd(sb: Sandbox, name: str) -> None:
    """SIGTERM the host's dockerd (containers stop with it), start it again, record the new PID
    in the sandbox state so teardown still finds it."""
    st = state.load(sb.state.name)
    assert st is not None
    host = st.host(name)
    assert host.dockerd is not None
    procs.kill_all((host.dockerd,), 15.0)
    host = replace(host, dockerd=dockerd.start(st.name, host))
    state.save(st.with_host(host))
    dockerd.wait_ready(host, time.monotonic() + 30)
