"""The deploy lock's start/cancel ordering scripts (``lock.serial_argv``, ``lock.fence_argv``)
run for real under dash, bash and busybox ``sh`` (with util-linux ``flock`` on PATH), against a
lock directory in a temporary folder: a start runs only while its run holds the lock and its step
is not fenced off; a fence waits for a start that is running, then no start of that step runs."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from launcher.deploy import lock
from launcher.errors import FleetError
from launcher.execute.transport import Result

SHELLS = [s for s in ("dash", "bash", "busybox") if shutil.which(s)]
OWNER = "ops@ctl pid=1 time=2026-11-29T00:00:00Z id=abc"


def _argv(shell: str, script: str, *params: str) -> list[str]:
    head = ["busybox", "sh"] if shell == "busybox" else [shell]
    return [*head, "-c", script, "sh", *params]


@pytest.fixture
def lockdir(tmp_path: Path) -> Path:
    d = tmp_path / "dep"
    d.mkdir()
    (d / "owner").write_text(OWNER + "\n")
    return d


def _serial(shell: str, d: Path, step: str, *argv: str, owner: str = OWNER, wait_s: int = 20) -> list[str]:
    return _argv(shell, lock._SERIAL, str(d), owner, step, str(wait_s), *argv)


def _fence(shell: str, d: Path, step: str, wait_s: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_argv(shell, lock._FENCE, str(d), step, str(wait_s)), capture_output=True, text=True, timeout=30)


def test_argv_builders_pass_the_lock_dir_owner_and_step_as_parameters() -> None:
    assert lock.serial_argv("dep", OWNER, "s1", ("sh", "/etc/fleet/dep/u/run.sh")) == (
        "sh", "-c", lock._SERIAL, "sh", "/run/fleet/lock/dep", OWNER, "s1", "90", "sh", "/etc/fleet/dep/u/run.sh",
    )  # fmt: skip
    assert lock.fence_argv("dep", "s1", 120.0) == ("sh", "-c", lock._FENCE, "sh", "/run/fleet/lock/dep", "s1", "120")


@pytest.mark.parametrize("shell", SHELLS)
def test_a_start_runs_under_its_own_lock_with_its_exit_status(shell: str, lockdir: Path, tmp_path: Path) -> None:
    out = tmp_path / "ran"
    res = subprocess.run(_serial(shell, lockdir, "s1", "sh", "-c", 'printf "%s" "$1" >"$2"; exit 3', "sh", "a b", str(out)),
                         capture_output=True, text=True, timeout=30)  # fmt: skip
    assert (res.returncode, res.stderr) == (3, "")
    assert out.read_text() == "a b"


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("other owner", "not started: this run no longer holds the deploy lock {d}"),
        ("no lock dir", "not started: the deploy lock {d} is gone"),
        ("no owner file", "not started: this run no longer holds the deploy lock {d}"),
        ("fenced", "not started: its start step was cancelled"),
    ],
)
def test_a_start_is_refused_without_running(shell: str, case: str, message: str, lockdir: Path, tmp_path: Path) -> None:
    out = tmp_path / "ran"
    owner = OWNER
    if case == "other owner":
        owner = OWNER.replace("id=abc", "id=def")
    elif case == "no lock dir":
        shutil.rmtree(lockdir)
    elif case == "no owner file":
        (lockdir / "owner").unlink()
    else:
        assert _fence(shell, lockdir, "s1", 5).returncode == 0
    res = subprocess.run(_serial(shell, lockdir, "s1", "touch", str(out), owner=owner), capture_output=True, text=True, timeout=30)
    assert (res.returncode, res.stderr) == (75, message.format(d=lockdir) + "\n")
    assert not out.exists()


def _until_began(proc: subprocess.Popen[bytes], began: Path) -> None:
    """Until the command ``proc`` runs under the lock has touched ``began``."""
    deadline = time.monotonic() + 120  # a bound on a failure: a shell's start on a loaded machine
    while not began.exists():
        assert time.monotonic() < deadline and proc.poll() is None, "the start never began"
        time.sleep(0.02)


@pytest.mark.parametrize("shell", SHELLS)
def test_a_fence_waits_for_the_running_start_then_cancels_the_rest_of_its_step(shell: str, lockdir: Path, tmp_path: Path) -> None:
    began, done = tmp_path / "began", tmp_path / "done"
    slow = subprocess.Popen(_serial(shell, lockdir, "s1", "sh", "-c", 'touch "$1"; sleep 1.5; touch "$2"', "sh", str(began), str(done)))
    try:
        _until_began(slow, began)
        res = _fence(shell, lockdir, "s1", 20)
        assert (res.returncode, res.stderr) == (0, "")
        assert done.exists(), "the fence returned before the running start ended"
    finally:
        slow.wait(20)
    assert slow.returncode == 0
    assert (lockdir / "fence").read_text() == "s1\n"
    late = tmp_path / "late"
    refused = subprocess.run(_serial(shell, lockdir, "s1", "touch", str(late)), capture_output=True, text=True, timeout=30)
    assert refused.returncode == 75 and not late.exists()
    later = subprocess.run(_serial(shell, lockdir, "s2", "touch", str(late)), capture_output=True, text=True, timeout=30)
    assert later.returncode == 0 and late.exists(), "a later start step of the same run is not fenced"


@pytest.mark.parametrize("shell", SHELLS)
def test_a_fence_gives_up_on_a_start_still_running(shell: str, lockdir: Path, tmp_path: Path) -> None:
    began = tmp_path / "began"
    hung = subprocess.Popen(_serial(shell, lockdir, "s1", "sh", "-c", 'touch "$1"; exec sleep 600', "sh", str(began)),
                            start_new_session=True)  # fmt: skip
    try:
        _until_began(hung, began)
        res = _fence(shell, lockdir, "s1", 1)
    finally:
        os.killpg(hung.pid, signal.SIGKILL)  # the shell and its hung start
        hung.wait(10)
    assert (res.returncode, res.stderr) == (1, "a start is still running after 1s; its unit may come up later\n")
    assert not (lockdir / "fence").exists()


@pytest.mark.parametrize("shell", SHELLS)
def test_a_start_behind_a_hung_one_gives_up_and_says_why(shell: str, lockdir: Path, tmp_path: Path) -> None:
    began, late = tmp_path / "began", tmp_path / "late"
    hung = subprocess.Popen(_serial(shell, lockdir, "s0", "sh", "-c", 'touch "$1"; exec sleep 600', "sh", str(began)),
                            start_new_session=True)  # fmt: skip
    try:
        _until_began(hung, began)
        res = subprocess.run(_serial(shell, lockdir, "s1", "touch", str(late), wait_s=1), capture_output=True, text=True, timeout=30)
    finally:
        os.killpg(hung.pid, signal.SIGKILL)  # the shell and its hung start
        hung.wait(10)
    assert (res.returncode, res.stderr) == (75, "not started: another start of this deployment still runs on this host "
                                                "after 1s (left by an interrupted run?)\n")  # fmt: skip
    assert not late.exists()


@pytest.mark.parametrize("shell", SHELLS)
def test_a_fence_without_the_lock_dir_succeeds_at_once(shell: str, tmp_path: Path) -> None:
    res = _fence(shell, tmp_path / "gone", "s1", 5)
    assert (res.returncode, res.stderr) == (0, "")


@pytest.mark.parametrize("shell", SHELLS)
def test_a_host_without_flock_is_named(shell: str, lockdir: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bin"  # PATH with a shell's usual tools but no flock
    bare.mkdir()
    env = {"PATH": str(bare)}
    exe = shutil.which("busybox" if shell == "busybox" else shell)
    assert exe is not None
    argv = _serial(shell, lockdir, "s1", "true")
    res = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=30, env=env)
    assert (res.returncode, res.stderr) == (127, "flock not found (util-linux): fleet needs it to start units\n")
    res = subprocess.run([exe, *_argv(shell, lock._FENCE, str(lockdir), "s1", "5")[1:]], capture_output=True, text=True, timeout=30, env=env)
    assert (res.returncode, res.stderr) == (127, "flock not found (util-linux)\n")
    # The lock is not taken on such a host, so nothing is stopped before a start would fail.
    root = tmp_path / "locks"
    acquire = _argv(shell, lock._ACQUIRE, str(root), str(root / "dep"), OWNER)
    res = subprocess.run([exe, *acquire[1:]], capture_output=True, text=True, timeout=30, env=env)
    assert (res.returncode, res.stderr) == (127, "")
    assert not root.exists()
    with pytest.raises(FleetError) as err:
        lock.acquired(Result(host="h7", command="sh", exit_status=res.returncode, stdout=b"", stderr=b""), "dep")
    assert str(err.value) == "h7: flock not found (util-linux): fleet needs it on every host it deploys to"


@pytest.mark.parametrize("shell", SHELLS)
def test_the_lock_is_taken_once(shell: str, tmp_path: Path) -> None:
    root = tmp_path / "locks"
    first = subprocess.run(_argv(shell, lock._ACQUIRE, str(root), str(root / "dep"), OWNER), capture_output=True, text=True, timeout=30)
    assert (first.returncode, (root / "dep" / "owner").read_text()) == (0, OWNER + "\n")
    second = subprocess.run(_argv(shell, lock._ACQUIRE, str(root), str(root / "dep"), "other"), capture_output=True, text=True, timeout=30)
    assert (second.returncode, second.stdout) == (75, OWNER + "\n")


# -- the acquire script on a shared host (issue 16: /run/lock is world-writable)

NOBODY = 65534


def _acquire(shell: str, root: Path, dep: str = "dep") -> subprocess.CompletedProcess[str]:
    return subprocess.run(_argv(shell, lock._ACQUIRE, str(root), f"{root}/{dep}", OWNER), capture_output=True, text=True,
                          timeout=30)  # fmt: skip


def _judged(res: subprocess.CompletedProcess[str]) -> None:
    lock.acquired(Result(host="h1", command="acquire", exit_status=res.returncode, stdout=res.stdout.encode(),
                         stderr=res.stderr.encode()), "dep")  # fmt: skip


@pytest.mark.parametrize("shell", SHELLS)
def test_acquire_makes_a_private_lock_root_and_takes_the_lock(shell: str, tmp_path: Path) -> None:
    root = tmp_path / "lock" / "fleet"
    res = _acquire(shell, root)
    assert (res.returncode, res.stderr) == (0, "")
    assert (root / "dep" / "owner").read_text() == OWNER + "\n"
    assert oct(root.stat().st_mode & 0o777) == "0o755"
    res = _acquire(shell, root)
    assert (res.returncode, res.stdout) == (75, OWNER + "\n"), "held: the holder is named"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a directory another user owns")
@pytest.mark.parametrize("shell", SHELLS)
def test_acquire_refuses_a_lock_root_another_user_made(shell: str, tmp_path: Path) -> None:
    root = tmp_path / "fleet"
    root.mkdir(mode=0o755)
    os.chown(root, NOBODY, NOBODY)
    res = _acquire(shell, root)
    assert res.returncode == 77
    assert not (root / "dep").exists(), "nothing written into their directory"
    with pytest.raises(FleetError) as err:
        _judged(res)
    assert str(err.value) == (
        f"h1: refusing the deploy lock: {root} is owned by uid {NOBODY}, not by root or the connecting user (uid 0); "
        "remove it as root and run again"
    )


@pytest.mark.parametrize("shell", SHELLS)
def test_acquire_refuses_a_lock_root_others_can_write(shell: str, tmp_path: Path) -> None:
    root = tmp_path / "fleet"
    root.mkdir()
    root.chmod(0o1777)
    res = _acquire(shell, root)
    assert (res.returncode, res.stderr.strip()) == (77, f"{root} is writable by others (mode 1777)")
    assert not (root / "dep").exists()


@pytest.mark.parametrize("shell", SHELLS)
def test_acquire_refuses_a_lock_root_or_lock_reached_through_a_symlink(shell: str, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    root = tmp_path / "fleet"
    root.symlink_to(elsewhere)
    res = _acquire(shell, root)
    assert (res.returncode, res.stderr.strip()) == (77, f"{root} is a symlink")
    assert list(elsewhere.iterdir()) == [], "nothing written through the link"
    root.unlink()
    root.mkdir(mode=0o755)
    (root / "dep").symlink_to(elsewhere)
    res = _acquire(shell, root)
    assert (res.returncode, res.stderr.strip()) == (77, f"{root}/dep is a symlink")
    assert list(elsewhere.iterdir()) == []
