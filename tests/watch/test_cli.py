"""``fleet watch``'s command line without hosts: ``--install`` (the service file, checked by
``systemd-analyze verify``) and the refusals that stop it before any host is asked."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PB = "playbooks/router/single-qwen-h100.yaml"
INV = "inventories/example.yaml"


def fleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["fleet", *args], capture_output=True, text=True, cwd=REPO, timeout=120)


def test_install_writes_a_service_that_systemd_accepts(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is needed (apt: systemd)")
    kh = tmp_path / "known hosts"
    kh.write_text("")
    unit = tmp_path / "fleet-watch.service"
    proc = fleet("watch", PB, "-i", INV, "--known-hosts", str(kh), "--install", "-o", str(unit), "--interval", "5",
                 "--metrics-port", "9464", "--on-event", "logger -t fleet 100% $USER", "--crash-limit", "4")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"wrote {unit}",
        "enable and start it: systemctl daemon-reload && systemctl enable --now fleet-watch.service",
        "its events: journalctl -u fleet-watch.service -f",
    ]
    text = unit.read_text()
    exec_start = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    assert exec_start.endswith(
        f" watch {REPO / PB} -i {REPO / INV} --known-hosts \"{kh}\" --interval 5 --on-event "
        '"logger -t fleet 100%% $$USER" --metrics-port 9464 --crash-limit 4'
    ), exec_start
    assert "\nRestart=on-failure\n" in text and "\nSuccessExitStatus=143\n" in text and "\nUser=" in text
    verify = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stderr
    assert os.stat(unit).st_mode & 0o022 == 0


def test_install_refuses_to_trust_new_hosts(tmp_path: Path) -> None:
    proc = fleet("watch", PB, "-i", INV, "--install", "-o", str(tmp_path / "x.service"), "--trust-new-hosts")
    assert proc.returncode == 2
    assert proc.stderr == ("fleet: error: --install: a service must not trust new host keys; record them first "
                           "(fleet facts)\n")
    assert not (tmp_path / "x.service").exists()


def test_a_deployment_given_twice_is_refused() -> None:
    proc = fleet("watch", PB, PB, "-i", INV, "--once")
    assert (proc.returncode, proc.stderr) == (2, "fleet: error: deployment qwen-router is given twice\n")


def test_a_bad_playbook_names_its_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nrecipe: qwen/sglang-tp2-h100-tuned\nplacement:\n  single:\n    hostz: h1\n")
    proc = fleet("watch", str(bad), "-i", INV, "--once")
    assert proc.returncode == 2 and proc.stderr.startswith(f"fleet: error: {bad}:5:"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_metrics_port_in_use_is_refused_before_any_host_is_asked() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(["fleet", "watch", PB, "-i", INV, "--once", "--metrics-port", str(port)],
                              capture_output=True, text=True, cwd=REPO, timeout=120, env={**os.environ, "HF_TOKEN": "x"})
    assert (proc.returncode, proc.stderr) == (2, f"fleet: error: --metrics-port {port}: Address already in use\n")
