"""A sandbox process is named by PID and creation time: the reference stays alive while that
process runs, goes dead once it exits, and a reference whose creation time differs (what a
recycled PID looks like) is never taken for alive nor signalled."""

from __future__ import annotations

import dataclasses
import signal
import subprocess

import pytest

from launcher.sandbox import procs


def test_a_process_is_its_pid_and_creation_time() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        ref = procs.ref(child.pid)
        assert ref.alive()
        other = dataclasses.replace(ref, created=ref.created - 1.0)  # the same PID, another process
        assert not other.alive()
        assert not other.signal(signal.SIGTERM)
        assert child.poll() is None, "a reference to another process signalled this one"
        assert ref.signal(signal.SIGTERM)
        child.wait(timeout=10)
        assert not ref.alive()
        assert procs.wait_gone((ref,), 1.0) == ()
    finally:
        child.kill()
        child.wait()
    with pytest.raises(ProcessLookupError):
        procs.ref(child.pid)
