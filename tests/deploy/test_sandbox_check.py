"""``--limit``, ``--check``, the run summary and ``fleet history`` through the real CLI on the
sandbox fleet (real sshd and dockerd per host; issue #26 items 1, 2, 3, 9): a limited check
reads only its hosts, a check with a host whose SSH port drops packets goes through every
other host and names that one, ``up --check`` goes on past a preflight gate that failed (a host
whose SSH port drops packets) and ends with every host in its RECAP, nothing is started or
written by a check, and a real ``up`` / ``down`` ends with its RECAP and lands in the history."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from launcher.sandbox import faults
from launcher.sandbox.client import Sandbox

pytestmark = pytest.mark.sandbox
SANDBOX_HOSTS = 4
REPO = Path(__file__).resolve().parents[2]
PB = REPO / "playbooks" / "sandbox" / "rolling-single.yaml"  # one replica on each of h1..h4


def fleet(sb: Sandbox, state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = ["fleet", *args, "-i", sb.inventory, "--known-hosts", sb.known_hosts]
    env = {**os.environ, "FLEET_STATE_DIR": str(state), "FLEET_FACTS_DIR": str(state / "facts")}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=400, cwd=REPO)


def doc(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def containers(sb: Sandbox, host: str) -> str:
    return sb.ssh(host, "docker ps -a --format '{{.Names}}' --filter name=fleet-sb-roll").out.strip()


def test_limit_check_recap_and_history(sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    sb = sandbox_fleet
    state = tmp_path / "state"

    limited = fleet(sb, state, "up", str(PB), "--check", "--json", "--limit", "h1:h2")
    assert limited.returncode == 0, limited.stderr
    checked = doc(limited)
    assert {(u["host"], u["action"], u["outcome"]) for u in checked["units"]} == {
        ("h1", "start", "planned"), ("h2", "start", "planned")}
    assert checked["recap"]["check"] is True and list(checked["recap"]["counts"]) == ["h1", "h2"]
    # The limited gate asked h1 and h2 only (each host it gathers from is cached).
    assert sorted(p.name for p in (state / "facts").glob("*/*.json")) == ["h1.json", "h2.json"]

    faults.drop_ssh(sb.host("h3"))
    try:
        blind = fleet(sb, state, "up", str(PB), "--check", "--json", "--skip-preflight")
    finally:
        faults.clear(sb.host("h3"))
    assert blind.returncode == 3, blind.stderr
    seen = doc(blind)
    assert {u["host"]: u["outcome"] for u in seen["units"]} == {
        "h1": "planned", "h2": "planned", "h3": "unreachable", "h4": "planned"}
    assert [e.split(": ")[:2] for e in seen["errors"]] == [["h3", "unreachable"]]
    assert blind.stderr == ""  # --json: the errors are in the document
    assert all(containers(sb, h) == "" for h in ("h1", "h2", "h4")), "--check started nothing"

    up = fleet(sb, state, "up", str(PB), "--limit", "h1:h2")
    assert up.returncode == 0, up.stderr
    assert "RECAP sb-roll: up: groups per host" in up.stdout, up.stdout
    recap = up.stdout[up.stdout.index("RECAP sb-roll: up: groups per host"):].splitlines()
    assert recap == [  # a rolling playbook: `up` rolls restart groups
        "RECAP sb-roll: up: groups per host",
        "h1 : started=1  unchanged=0  stopped=0  failed=0  skipped=0  unreachable=0  unknown=0",
        "h2 : started=1  unchanged=0  stopped=0  failed=0  skipped=0  unreachable=0  unknown=0",
        "exit 0: every group is as planned",
    ]

    gone = fleet(sb, state, "down", str(PB), "--check", "--json")
    assert gone.returncode == 0, gone.stderr
    assert {(u["host"], u["outcome"]) for u in doc(gone)["units"]} == {("h1", "planned"), ("h2", "planned")}
    assert containers(sb, "h1") != "", "down --check removed nothing"

    down = fleet(sb, state, "down", str(PB))
    assert down.returncode == 0, down.stderr
    runs = [json.loads(line) for line in (state / "history.jsonl").read_text().splitlines()]
    assert [(r["command"][1], r["deployment"], r["exit_code"]) for r in runs] == [("up", "sb-roll", 0),
                                                                                  ("down", "sb-roll", 0)]
    assert sorted((o["host"], o["outcome"]) for o in runs[0]["outcomes"]) == [("h1", "restarted"), ("h2", "restarted")]
    listed = fleet_history(state)
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) == 3


def test_check_goes_on_past_a_failed_gate_and_reports_every_host(sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    """flows/up.py: a failed preflight gate stops ``up`` but not ``up --check`` (issue #26 item 2),
    and the host the gate could not reach is tried once: the check pass reports it from the
    gate's outcome (``-v`` shows every connect attempt, failed ones too)."""
    sb = sandbox_fleet
    h3 = sb.host("h3")
    faults.drop_ssh(h3)
    try:
        r = fleet(sb, tmp_path / "state", "-v", "up", str(PB), "--check")
    finally:
        faults.clear(h3)
    assert r.returncode == 3, r.stdout + r.stderr
    err = r.stderr.splitlines()
    assert "fleet: preflight failed: fleet up would stop here, before starting anything; --check goes on" in err, r.stderr
    assert [line.split(": ")[:3] for line in err if line.startswith("fleet: error:")] == [["fleet", "error", "h3"]]
    dropped = f"no answer from {h3.address}:{h3.port} within 10s"
    assert [line for line in err if line.startswith("fleet: error:")] == [f"fleet: error: h3: unreachable: {dropped}"]
    tries = [line for line in err if line.startswith("fleet: info: h3: no connection to ")]
    assert [re.sub(r" after \d+\.\d\d s:", " after N s:", line) for line in tries] == [
        f"fleet: info: h3: no connection to {h3.address}:{h3.port} after N s: {dropped}"], "h3 was tried more than once"
    assert r.stdout[r.stdout.index("RECAP"):].splitlines() == [
        "RECAP sb-roll: up --check (nothing was changed): units per host",
        "h1 : started=1  unchanged=0  stopped=0  failed=0  skipped=0  unreachable=0  unknown=0",
        "h2 : started=1  unchanged=0  stopped=0  failed=0  skipped=0  unreachable=0  unknown=0",
        "h3 : started=0  unchanged=0  stopped=0  failed=0  skipped=0  unreachable=1  unknown=0",
        "h4 : started=1  unchanged=0  stopped=0  failed=0  skipped=0  unreachable=0  unknown=0",
        "exit 3: some hosts could not be read (errors above); the counts are what the command would do on the "
        "others (nothing was changed)",
    ]
    assert all(containers(sb, h) == "" for h in ("h1", "h2", "h4")), "--check started nothing"


def fleet_history(state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["fleet", "history"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "FLEET_STATE_DIR": str(state)})  # fmt: skip
