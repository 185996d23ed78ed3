"""``fleet weights warm``'s reading and reporting with the real vmtouch, on this machine's own
filesystem and page cache: hosts are stood in for by :class:`LocalTransport` (the same argv an
SSH host runs, run here -- a sandbox or real host shares its kernel's page cache the same way).

Proves: after ``warm`` every page of the model dirs is resident (per util-linux ``fincore``, not
vmtouch's own word) and the report says what was resident before (nothing, after ``vmtouch -e``)
and after (all); a host without vmtouch, or without the staged dir, is named in one line and no
host is read; ``fleet up --warm`` refuses --check and --limit (exit 2)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from launcher.errors import FleetError
from launcher.execute.local import LocalTransport
from launcher.model import Host
from launcher.weights.needs import ModelNeed
from launcher.weights.warm import WarmRefused, parse_resident, vmtouch_argv, warm
from tests.preflight.factory import host, inventory

REPO = Path(__file__).resolve().parents[2]
INV = inventory(host("h1", "10.0.0.1"), host("h2", "10.0.0.2"))
MB = 1024 * 1024
PAGE = os.sysconf("SC_PAGE_SIZE")


class _Local:
    """Stands in for SshConnector: every host's commands run here (vmtouch on this kernel)."""

    def connect(self, h: Host) -> LocalTransport:
        return LocalTransport(host=h.name)

    def close(self) -> None:
        pass


@pytest.fixture
def models() -> Iterator[Path]:
    # Not tmp_path: that may be a tmpfs, whose pages cannot be evicted.
    root = Path("/var/tmp") / f"fleet-test-warm-{os.getpid()}"
    try:
        for d, n in (("a", 3), ("b", 1)):
            (root / d).mkdir(parents=True)
            for i in range(n):
                (root / d / f"shard-{i}.safetensors").write_bytes(os.urandom(3 * MB + 5))
        files = [str(p) for p in root.rglob("*") if p.is_file()]
        # Only clean pages can be evicted: write these files back, then drop their pages (no other file's).
        subprocess.run(["sync", "--", *files], check=True)
        subprocess.run(["vmtouch", "-q", "-e", str(root)], check=True)
        yield root
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=True)


def _resident_bytes(root: Path) -> int:
    files = [str(p) for p in root.rglob("*") if p.is_file()]
    out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", *files], check=True, capture_output=True, text=True)
    return sum(int(x) for x in out.stdout.split())


def _needs(root: Path) -> tuple[ModelNeed, ...]:
    return (ModelNeed(model="org/a", what="weights", rel="org/a", paths=(("h1", str(root / "a")), ("h2", str(root / "a")))),
            ModelNeed(model="org/b", what="draft weights", rel="org/b", paths=(("h2", str(root / "b")),)))


def test_warm_reads_every_page_in_and_reports_before_and_after(models: Path) -> None:
    assert _resident_bytes(models) == 0
    warmed = warm(INV, _needs(models), _Local())  # type: ignore[arg-type]
    total_a = 3 * (3 * MB + PAGE)  # 3 MiB + 5 bytes is 769 pages
    total_b = 3 * MB + PAGE
    # Every host is measured before any reads (h1 and h2 share this one page cache).
    assert [(w.host, w.total, w.before, w.after) for w in warmed] == [
        ("h1", total_a, 0, total_a), ("h2", total_a + total_b, 0, total_a + total_b)]
    assert _resident_bytes(models) == 4 * (3 * MB + PAGE)  # fincore counts whole pages


def test_a_host_without_vmtouch_is_named_and_nothing_is_read(models: Path, monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no vmtouch on "the hosts"
    with pytest.raises(WarmRefused) as err:
        warm(INV, _needs(models), _Local())  # type: ignore[arg-type]
    assert str(err.value) == ("nothing was warmed: h1: vmtouch not found (install the Debian package vmtouch there); "
                              "h2: vmtouch not found (install the Debian package vmtouch there)")


def test_a_dir_not_staged_is_named_and_nothing_is_read(models: Path) -> None:
    needs = _needs(models)
    gone = str(models / "c")
    needs = (needs[0], ModelNeed(model="org/c", what="draft weights", rel="org/c", paths=(("h2", gone),)))
    with pytest.raises(WarmRefused) as err:
        warm(INV, needs, _Local())  # type: ignore[arg-type]
    assert str(err.value) == f"nothing was warmed: h2: {gone}: no such directory (fleet weights stage puts it there)"
    assert _resident_bytes(models) == 0


def test_the_vmtouch_command_and_report() -> None:
    assert vmtouch_argv(["/m/a"], touch=True) == ("vmtouch", "-t", "-m", str(1 << 50), "--", "/m/a")
    assert parse_resident("           Files: 1\n  Resident Pages: 12/4883  48K/19M  0.246%\n") == (12, 4883)
    with pytest.raises(ValueError):
        parse_resident("vmtouch: FATAL: x")
    assert issubclass(WarmRefused, FleetError)


def test_up_warm_refuses_check() -> None:
    """(--warm with --limit warms the limited hosts: tests/pipeline/test_limit.py checks the limit.)"""
    proc = subprocess.run(["fleet", "up", "playbooks/multinode-deepseek-pp2-6000d.yaml", "-i", "inventories/example.yaml",
                           "--warm", "--check"], capture_output=True, text=True, cwd=REPO, timeout=60)  # fmt: skip
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2, "", "fleet: error: --warm reads the weights into the hosts' page caches: not with --check\n")