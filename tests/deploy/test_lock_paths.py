"""The lock scripts' path checks (issue 25 item 2), run for real under ``sh`` on this machine
against a stand-in ``/run`` in a temporary directory: what ``fleet unlock`` (lock-break.sh),
``release`` and ``acquire`` do when a path on the way was planted by another user.  Ownership
needs root (as the sandbox tier does); the sandbox tier runs the same scripts on real hosts
(tests/deploy/test_sandbox_lock.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from launcher.deploy import lock
from launcher.remote import sh

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the checks are about who owns what")
NOBODY = 65534


def _run(argv: tuple[str, ...]) -> tuple[int, str, str]:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return res.returncode, res.stdout, res.stderr.strip()


def _run_dir(tmp_path: Path, mode: int = 0o755) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(mode)
    return run


def test_acquire_makes_the_root_0755_and_takes_the_lock(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    root, d = run / "fleet" / "lock", run / "fleet" / "lock" / "dep"
    assert _run(sh(lock._ACQUIRE, str(root), str(d), "me@ctl pid=1")) == (0, "", "")
    assert [oct(p.stat().st_mode & 0o7777) for p in (run / "fleet", root, d)] == ["0o755"] * 3
    assert (d / "owner").read_text() == "me@ctl pid=1\n"
    assert _run(sh(lock._ACQUIRE, str(root), str(d), "other"))[:2] == (75, "me@ctl pid=1\n")


def test_break_never_removes_through_a_symlinked_root(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, 0o1777)
    victim = tmp_path / "victim"
    (victim / "lock" / "dep").mkdir(parents=True)
    (victim / "lock" / "dep" / "keep").touch()
    (run / "fleet").symlink_to(victim)
    os.lchown(run / "fleet", NOBODY, NOBODY)
    d = run / "fleet" / "lock" / "dep"
    assert _run(sh(lock._BREAK, str(d))) == (77, "", f"{run}/fleet is a symlink")
    assert (victim / "lock" / "dep" / "keep").exists()
    for script in (lock._RELEASE, lock._FENCE, lock._SERIAL):
        assert _run(sh(script, str(d), "x", "x", "1", "true"))[0] == 77
    assert (victim / "lock" / "dep" / "keep").exists()


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (lambda r: (r / "fleet").mkdir(mode=0o755) or os.chown(r / "fleet", NOBODY, NOBODY),
         "{r}/fleet is owned by uid 65534, not by root or the connecting user (uid 0)"),
        (lambda r: (r / "fleet").mkdir() or (r / "fleet").chmod(0o777), "{r}/fleet is writable by others (mode 777)"),
        (lambda r: (r / "fleet" / "lock" / "dep").mkdir(parents=True) or os.chown(r / "fleet" / "lock" / "dep", NOBODY, 0),
         "{r}/fleet/lock/dep is owned by uid 65534, not by root or the connecting user (uid 0)"),
        (lambda r: r.chmod(0o777), "{r} is not owned by root, or others may replace what is in it (mode 777)"),
    ],
)
def test_a_path_another_user_could_change_is_refused_before_anything_is_written(
    tmp_path: Path, setup: object, reason: str
) -> None:
    run = _run_dir(tmp_path, 0o1777)
    setup(run)  # type: ignore[operator]
    root, d = run / "fleet" / "lock", run / "fleet" / "lock" / "dep"
    before = sorted(str(p) for p in run.rglob("*"))
    assert _run(sh(lock._ACQUIRE, str(root), str(d), "me")) == (77, "", reason.format(r=run))
    assert _run(sh(lock._BREAK, str(d))) == (77, "", reason.format(r=run))
    assert sorted(str(p) for p in run.rglob("*")) == before


def test_a_lock_root_that_cannot_be_made_says_what_to_do() -> None:
    """A connecting user other than root: /run takes entries from root only."""
    top = Path(tempfile.mkdtemp(prefix="fleet-lock-test-", dir="/tmp"))  # pytest's tmp_path is 0700: nobody cannot reach it
    try:
        top.chmod(0o755)
        run = _run_dir(top)
        root, d = run / "fleet" / "lock", run / "fleet" / "lock" / "dep"
        argv = ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *sh(lock._ACQUIRE, str(root), str(d), "me"))
        assert _run(argv) == (73, "", f"cannot create {run}/fleet: fleet keeps its host state there; connect as root, or "
                                      f"have root make it (mode 0755) for uid {NOBODY}")  # fmt: skip
    finally:
        shutil.rmtree(top)
