"""The real ``fleet`` CLI run as an operator's terminal runs it, for tests that interrupt it: in
its own process group (SIGINT reaches it as Ctrl-C does; whatever it starts is in that group),
stdout and stderr in files; and its TCP connections, as seen here and from a sandbox host, so a
test can tell that none is left open after it exits."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import IO, Callable, Sequence

from launcher.sandbox.client import Sandbox

REPO = Path(__file__).resolve().parents[1]
SETTLE_S = 90.0  # safety bound: fleet must have settled and exited within this after Ctrl-C
WAIT_S = 240.0  # safety bound for reaching a moment



class CliProcess:
    """``argv`` started in its own session, SIGINT at its default disposition (a shell running
    pytest in the background ignores SIGINT, and the child would inherit that)."""

    def __init__(self, argv: Sequence[str], out_dir: Path, name: str) -> None:
        self.out_path, self.err_path = out_dir / f"{name}.out", out_dir / f"{name}.err"
        self._out: IO[bytes] = self.out_path.open("wb")
        self._err: IO[bytes] = self.err_path.open("wb")
        self.proc = subprocess.Popen(
            list(argv), stdout=self._out, stderr=self._err, cwd=REPO, start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip

    @property
    def stdout(self) -> str:
        return self.out_path.read_text()

    @property
    def stderr(self) -> str:
        return self.err_path.read_text()

    def sigint(self, sig: signal.Signals = signal.SIGINT) -> None:
        """SIGINT, as Ctrl-C sends it (or ``sig``), without waiting."""
        assert self.proc.poll() is None, f"fleet ended before Ctrl-C:\n{self.stdout}\n{self.stderr}"
        self.proc.send_signal(sig)

    def group_gone(self) -> bool:
        """Whether nothing of the process group is left (fleet and anything it started)."""
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return True
        return False

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._out.close()
        self._err.close()


def local_conns(pid: int) -> set[tuple[str, str]]:
    """``(this end, far end)`` ``ip:port`` pairs of process ``pid``'s established TCP connections
    (pairs: another process may use the same local port towards another address)."""
    out = subprocess.run(["ss", "-tnpH", "state", "established"], capture_output=True, text=True, check=True).stdout
    return {(line.split()[2], line.split()[3]) for line in out.splitlines() if f"pid={pid}," in line}


def peers(sb: Sandbox, host: str) -> set[tuple[str, str]]:
    """``host``'s established TCP connections as ``(far end, its end)``: the order
    :func:`local_conns` sees the same connections in."""
    res = sb.ssh(host, "ss -tnH state established")
    assert res.rc == 0, res.err
    return {(line.split()[3], line.split()[2]) for line in res.out.splitlines()}


class Cli(CliProcess):
    """``fleet ARGS`` against a sandbox inventory, in its own process group, interrupted at a
    moment read from its progress lines."""

    def __init__(self, sb: Sandbox, inventory: str, tmp: Path, name: str, *args: str) -> None:
        super().__init__(["fleet", *args, "-i", inventory, "--known-hosts", sb.known_hosts], tmp, name)
        self.sb = sb
        self.conns: set[tuple[str, str]] = set()
        self.seen_at_interrupt = ""

    def wait_line(self, pattern: str) -> None:
        """Until a progress line matches ``pattern`` (read every 20 ms)."""
        rx = re.compile(pattern, re.M)
        deadline = time.monotonic() + WAIT_S
        while not rx.search(self.stderr):
            assert self.proc.poll() is None, f"fleet exited {self.proc.returncode} before /{pattern}/:\n{self.stderr}"
            assert time.monotonic() < deadline, f"no /{pattern}/ within {WAIT_S:g}s:\n{self.stderr}"
            time.sleep(0.02)

    def interrupt(self) -> int:
        return self.interrupt_and(lambda: None)

    def kill(self) -> None:
        """SIGKILL to fleet's process group: a crash, nothing cleans up."""
        assert self.proc.poll() is None, f"fleet ended before the kill:\n{self.stderr}"
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def interrupt_and(self, then: Callable[[], None]) -> int:
        """SIGINT, then ``then()``; the exit status once fleet has settled.  Remembers fleet's
        connections (those open at the interrupt -- fleet may exit before the first look after
        it -- and those it opens while settling) and what it had printed before."""
        self.seen_at_interrupt = self.stderr
        self.conns |= local_conns(self.proc.pid)
        self.sigint()
        then()
        deadline = time.monotonic() + SETTLE_S
        while self.proc.poll() is None:
            self.conns |= local_conns(self.proc.pid)
            assert time.monotonic() < deadline, f"fleet still running {SETTLE_S:g}s after SIGINT:\n{self.stderr}"
            time.sleep(0.2)
        assert self.group_gone(), "something fleet started (in its process group) outlived it"
        return self.proc.returncode


def until(what: str, cond: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"no {what} within {timeout:g}s"
        time.sleep(0.2)
