"""Preflight of the sandbox's 2P1D PD playbook (GLM on the RTX-6000D hosts h9..h15): every rank
reaches its instance's dist-init port and every decode rank (and the other prefill rank) reaches
each prefill leader's bootstrap port; a decode rank whose packets to one bootstrap port are
dropped fails, named, with nothing started."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest

from launcher.sandbox.client import Sandbox

pytestmark = pytest.mark.sandbox
SANDBOX_HOSTS = 15

REPO = Path(__file__).resolve().parents[2]
PB = REPO / "playbooks" / "sandbox" / "pd-2p1d.yaml"


def preflight(sb: Sandbox, tmp: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    proc = subprocess.run(
        ["fleet", "preflight", str(PB), "--json", "-i", sb.inventory, "--known-hosts", sb.known_hosts],
        capture_output=True, text=True, timeout=300, cwd=REPO, env={**os.environ, "FLEET_FACTS_DIR": str(tmp)},
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return proc, doc


def test_pd_bootstrap_and_dist_init_reachability(sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    sb = sandbox_fleet
    ip = {h: sb.host(h).data_ip for h in ("h9", "h11", "h13", "h14")}
    proc, doc = preflight(sb, tmp_path)
    assert proc.returncode == 0, proc.stderr
    reach = sorted((c["host"], c["message"]) for c in doc["checks"] if c["check"].startswith("reach"))
    assert reach == sorted([
        ("h10", f"reaches dist-init {ip['h9']}:20000 on h9"),
        ("h12", f"reaches dist-init {ip['h11']}:20000 on h11"),
        ("h14", f"reaches dist-init {ip['h13']}:20000 on h13"),
        ("h10", f"reaches bootstrap {ip['h9']}:8998 on h9"),
        ("h13", f"reaches bootstrap {ip['h9']}:8998 on h9"),
        ("h14", f"reaches bootstrap {ip['h9']}:8998 on h9"),
        ("h12", f"reaches bootstrap {ip['h11']}:8998 on h11"),
        ("h13", f"reaches bootstrap {ip['h11']}:8998 on h11"),
        ("h14", f"reaches bootstrap {ip['h11']}:8998 on h11"),
    ])
    assert {c["status"] for c in doc["checks"] if c["check"].startswith("reach")} == {"pass"}

    ns = sb.host("h14").netns
    assert ns, "needs a netns sandbox"
    rule = (f"table inet fleetpfpd {{\n chain output {{\n  type filter hook output priority 0;\n"
            f"  ip daddr {ip['h11']} tcp dport 8998 drop\n }}\n}}\n")
    subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=rule, text=True, check=True)
    try:
        proc, doc = preflight(sb, tmp_path)
    finally:
        subprocess.run(["ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "fleetpfpd"], check=False)
    assert proc.returncode == 1
    fails = [line for line in proc.stderr.splitlines() if line.startswith("fleet: preflight: fail: ")]
    assert fails == [
        f"fleet: preflight: fail: h14/fleet-sb-pd-decode0-r1: reach bootstrap: cannot reach bootstrap {ip['h11']}:8998 "
        f"on h11 (sb-pd/prefill1): timed out after 3s (from {ip['h14']}) (fix: open tcp/8998 from this host's data "
        f"IP to {ip['h11']} (routes, firewall))",
    ]
    for h in ("h9", "h11", "h13", "h15"):
        names = sb.ssh(h, "docker ps -a --format '{{.Names}}'").out.split()
        assert not [n for n in names if n.startswith(("fleet-sb-pd", "fleet-preflight-"))], (h, names)


CLAIM = "/run/fleet/lock/sb-pd.preflight"
PD_HOSTS = ("h9", "h10", "h11", "h12", "h13", "h14", "h15")


def preflight_argv(sb: Sandbox) -> list[str]:
    return ["fleet", "preflight", str(PB), "-q", "-i", sb.inventory, "--known-hosts", sb.known_hosts]


@contextlib.contextmanager
def holding_its_claim(sb: Sandbox, env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A ``fleet preflight`` started and seen holding its claim on h10 (the first host by name,
    claimed alone, first), with the claim's owner line; killed on the way out if still running."""
    run = subprocess.Popen(preflight_argv(sb), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                           env=env)  # fmt: skip
    try:
        owner = ""
        while not owner and run.poll() is None:
            owner = sb.ssh("h10", f"cat {CLAIM}/owner 2>/dev/null").out.strip()
        assert owner, "the preflight ended before its claim was seen"
        yield run, owner
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def claims_left(sb: Sandbox) -> dict[str, str]:
    return {h: sb.ssh(h, f"cat {CLAIM}/owner 2>/dev/null").out.strip() for h in PD_HOSTS}


def test_a_preflight_beside_a_running_one_is_refused_naming_it(sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    """Two preflights of one deployment would bind the same ports and name the same probe
    containers (measured on the real PD sandbox: each failed the other's checks, blaming the
    network).  The first is paused while it holds its claim (SIGSTOP: it is then surely inside
    its rounds); the second is refused before any probe, naming the first, and leaves nothing;
    the first, resumed, passes and gives its claims back."""
    sb = sandbox_fleet
    env = {**os.environ, "FLEET_FACTS_DIR": str(tmp_path)}
    with holding_its_claim(sb, env) as (first, owner):
        os.kill(first.pid, signal.SIGSTOP)
        try:
            second = subprocess.run(preflight_argv(sb), capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
            held = claims_left(sb)
        finally:
            os.kill(first.pid, signal.SIGCONT)
        assert second.returncode == 1, second.stdout + second.stderr
        assert second.stderr.splitlines()[-1] == (
            f"fleet: error: h10: a preflight of deployment 'sb-pd' is running already ({owner}); run this one when "
            "it has ended (one that is gone: --break-lock)")
        assert set(held.values()) <= {owner, ""}, held  # the second took no claim, broke none
        out, err = first.communicate(timeout=300)
    assert first.returncode == 0, out + err
    assert claims_left(sb) == dict.fromkeys(PD_HOSTS, "")


def test_a_preflight_interrupted_while_it_holds_its_claim_leaves_none(sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    """Ctrl-C closes preflight's connections; its claims are given back over new ones, so a
    preflight from another control host is not refused by a claim nobody holds."""
    sb = sandbox_fleet
    with holding_its_claim(sb, {**os.environ, "FLEET_FACTS_DIR": str(tmp_path)}) as (run, _):
        run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=120)
    assert run.returncode == 130, out + err
    assert err.splitlines()[-1] == "fleet: interrupted", err
    assert claims_left(sb) == dict.fromkeys(PD_HOSTS, "")
