"""Locks left behind (issue 16 item 10), on simulated hosts: a lock whose holder is a fleet run of
this control host that is gone is taken over (psutil tells: its pid ended, or now belongs to a
process started at another time); a live holder, or one on another control host, still refuses;
a lock that could not be released at the end of ``up``/``down`` is an error line naming the host
and the command that clears it, and the exit status is not 0."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from typing import Sequence

import psutil
import pytest

from launcher.deploy import lock
from launcher.deploy.lock import LockedError, holder_state, lock_dir
from launcher.deploy.orchestrate import Options, down, up
from launcher.errors import ExitCode, UnreachableError
from launcher.execute.command import Command
from launcher.execute.transport import Result

from launcher.output import Event
from tests.deploy.conftest import SimFleet
from tests.deploy.factory import pp_plan, target
from tests.deploy.simhost import SimHost

FAST = Options(forks=4, timeout_s=5.0)
HERE = socket.gethostname()


class Notes:
    """A :class:`launcher.output.Progress` that keeps the notes."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._lock = threading.Lock()

    def update(self, event: Event) -> None:
        pass

    def note(self, line: str) -> None:
        with self._lock:
            self.lines.append(line)


def _gone_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_holder_is_dead_only_when_provably_so() -> None:
    me = psutil.Process()
    assert holder_state(lock.owner_line()) == "running", "this process runs"
    assert holder_state(f"ops@{HERE} pid={_gone_pid()} start=1.00 time=T id=x") == "dead", "its pid is gone"
    assert holder_state(f"ops@{HERE} pid={me.pid} start={me.create_time() - 60:.2f} time=T id=x") == "dead", "reused"
    assert holder_state(f"ops@{HERE}-other pid={_gone_pid()} start=1.00 time=T id=x") == "unknown", "elsewhere"
    assert holder_state(f"ops@{HERE} pid={_gone_pid()} time=T id=x") == "unknown", "a line without a start time"


def test_a_lock_left_by_a_fleet_run_that_is_gone_is_taken_over(sim: SimFleet) -> None:
    left = f"alice@{HERE} pid={_gone_pid()} start=1.00 time=T id=x"
    sim["h2"].files[lock_dir("demo") + "/owner"] = (left.encode() + b"\n", 0o644)
    notes = Notes()
    report = up(target(pp_plan()), sim.connect, FAST, notes)
    assert report.exit_code == ExitCode.OK, report.errors
    assert notes.lines == [f"h2: took over the deploy lock of a fleet run that is gone ({left})"]
    assert not any(k.endswith("/owner") for h in ("h1", "h2") for k in sim[h].files), "released at the end"


def test_a_lock_of_a_live_fleet_run_of_this_host_refuses(sim: SimFleet) -> None:
    me = psutil.Process()
    held = f"alice@{HERE} pid={me.pid} start={me.create_time():.2f} time=T id=x"
    sim["h2"].files[lock_dir("demo") + "/owner"] = (held.encode() + b"\n", 0o644)
    with pytest.raises(LockedError) as err:
        up(target(pp_plan()), sim.connect, FAST)
    assert str(err.value) == (
        f"h2: deployment 'demo' is locked by {held}; a fleet run still going on this control host; wait for it to end"
    )
    assert sim["h2"].files[lock_dir("demo") + "/owner"][0].decode().strip() == held


class _LostAtRelease(SimHost):
    """A host whose connection is lost when the deploy lock is released."""

    def run(self, argv: Sequence[str] | Command, *, timeout: float, stdin: bytes | None = None,
            env: object = None, check: bool = False) -> Result:  # fmt: skip
        if tuple(Command.of(argv).reveal())[2:3] == (lock._RELEASE,):
            raise UnreachableError(self.name, "connection lost during rm -rf /run/fleet/lock/demo")
        return super().run(argv, timeout=timeout, stdin=stdin, check=check)


def _lose_h2_at_release(sim: SimFleet) -> None:
    lost = _LostAtRelease("h2")
    lost.journal, lost.events, lost.health_urls = sim.journal, sim.events, sim["h2"].health_urls
    sim.hosts["h2"] = lost


def test_a_lock_not_released_at_the_end_of_up_is_reported(sim: SimFleet) -> None:
    _lose_h2_at_release(sim)
    t = target(pp_plan())
    report = up(t, sim.connect, FAST)
    assert all(u.outcome == "healthy" for u in report.units)
    assert report.errors == (
        f"h2: the deploy lock {lock_dir('demo')} was not released (unreachable: connection lost during rm -rf "
        f"/run/fleet/lock/demo); once h2 answers, clear it with: {t.unlock_command}",
    )
    assert report.exit_code != ExitCode.OK
    assert any(k.endswith("/owner") for k in sim["h2"].files), "still there"
    assert not any(k.endswith("/owner") for k in sim["h1"].files)


def test_a_lock_not_released_at_the_end_of_down_is_reported(sim: SimFleet) -> None:
    assert up(target(pp_plan()), sim.connect, FAST).exit_code == ExitCode.OK
    _lose_h2_at_release(sim)
    report = down(target(pp_plan()), sim.connect, FAST)
    assert [e.split(" was not released")[0] for e in report.errors] == [f"h2: the deploy lock {lock_dir('demo')}"]
    assert report.exit_code != ExitCode.OK


