"""The observability inputs are checked before any host is touched: a playbook's ``metrics``
section is decoded strictly, a targets file that is not file_sd stops up/down/restart/rollback/
``metrics targets`` with one line naming it (exit 2).  The inventory's hosts (198.18.0.x) do not
exist: a command that tried to reach one would fail differently."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from launcher.model import Playbook
from launcher.deploy.publish import targets_path
from launcher.sandbox.inventory import preview

ROOT = Path(__file__).resolve().parents[2]
SINGLE = ROOT / "playbooks" / "sandbox" / "single.yaml"


@pytest.fixture
def inventory(tmp_path: Path) -> str:
    path = tmp_path / "inventory.yaml"
    path.write_text(preview(15))
    return str(path)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["fleet", *args], capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_a_misspelt_metrics_key_is_refused_at_its_line(tmp_path: Path, inventory: str) -> None:
    pb = tmp_path / "pb.yaml"
    text = SINGLE.read_text() + "metrics:\n  targetsfile: x.json\n"
    pb.write_text(text)
    line = len(text.splitlines())
    proc = run("down", str(pb), "-i", inventory)
    assert proc.returncode == 2
    assert proc.stderr == f"fleet: error: {pb}:{line}:3: metrics: unknown key 'targetsfile' (did you mean 'targets_file'?)\n"


@pytest.mark.parametrize("command", [("up", "--skip-preflight"), ("down",), ("restart", "--rolling"), ("rollback",)])
def test_a_targets_file_that_is_not_file_sd_stops_the_command_before_any_host(
    tmp_path: Path, inventory: str, command: tuple[str, ...]
) -> None:
    bad = tmp_path / "targets.json"
    bad.write_text('{"not": "a list"}\n')
    proc = run(command[0], str(SINGLE), "-i", inventory, *command[1:], "--targets-file", str(bad))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        f"fleet: error: {bad}:1:1: not a Prometheus file_sd targets file (a JSON list of {{targets, labels}} groups)"
    )
    assert bad.read_text() == '{"not": "a list"}\n'


def test_metrics_targets_refuses_a_file_that_is_not_json(tmp_path: Path, inventory: str) -> None:
    bad = tmp_path / "targets.json"
    bad.write_text("targets: [a]\n")
    proc = run("metrics", "targets", str(SINGLE), "-i", inventory, "-o", str(bad))
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"fleet: error: {bad}:1:1: not a Prometheus file_sd targets file (JSON: ")
    assert len(proc.stderr.splitlines()) == 1


def test_targets_path_flag_first_then_the_playbook_relative_to_its_directory(tmp_path: Path) -> None:
    from dataclasses import replace

    from launcher.model import Metrics, Placement

    pb = Playbook(path=str(tmp_path / "pbs" / "x.yaml"), name="x", recipe="r", placement={"single": Placement(hosts="h1")})
    assert targets_path(pb, None) is None
    with_file = replace(pb, metrics=Metrics(targets_file="sd/fleet.json"))
    assert targets_path(with_file, None) == tmp_path / "pbs" / "sd" / "fleet.json"
    assert targets_path(replace(pb, metrics=Metrics(targets_file="/srv/sd.json")), None) == Path("/srv/sd.json")
    assert targets_path(with_file, "other.json") == Path("other.json")


def test_top_json_needs_once(inventory: str) -> None:
    proc = run("top", str(SINGLE), "-i", inventory, "--json")
    assert (proc.returncode, proc.stderr) == (2, "fleet: error: fleet top: --json prints one reading: use it with --once\n")


def test_metrics_targets_names_unreachable_hosts_and_keeps_the_file(tmp_path: Path) -> None:
    """Issue 25 item 14: h1 refuses connections (a closed port on loopback): ``metrics targets``
    names it, exits 1, and leaves the previous targets file as it was -- not emptied to ``[]``,
    and not created when there was none."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: connections are refused
    key = tmp_path / "client_key"
    key.write_text("")  # never read: the connection is refused first
    inv = tmp_path / "inventory.yaml"
    inv.write_text(preview(2).replace("ansible_host: 198.18.0.11", f"ansible_host: 127.0.0.1\n          ansible_port: {port}")
                   .replace("/var/lib/fleet-sandbox/preview/client_key", str(key)))
    out = tmp_path / "targets.json"
    proc = run("metrics", "targets", str(SINGLE), "-i", str(inv), "-o", str(out))
    assert proc.returncode == 1, proc.stderr
    assert f"fleet: error: sb-single: unreachable: h1 (their previous targets in {out} are kept)" in proc.stderr.splitlines()
    assert not out.exists()
    previous = '[{"labels": {"deployment": "sb-single", "host": "h1"}, "targets": ["198.18.0.11:30000"]}]\n'
    out.write_text(previous)
    proc = run("metrics", "targets", str(SINGLE), "-i", str(inv), "-o", str(out))
    assert proc.returncode == 1, proc.stderr
    assert out.read_text() == previous
