"""A sandbox process is named by PID and creation time: the reference stays alive while that
process runs, goes dead once it exits, and a reference whose creation time differs (what a
recycled PID looks like) is never taken for alive nor signalled."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import time

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


def test_descendants_only_of_the_very_process() -> None:
    """A root whose start time differs (a recycled PID) has no descendants to end; the real
    one's are its whole tree."""
    parent = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    try:
        root = procs.ref(parent.pid)
        assert procs.child_of(root, 10.0) is not None
        deadline = time.monotonic() + 10
        while len(procs.descendants(root)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(procs.descendants(root)) == 2
        assert procs.descendants(dataclasses.replace(root, created=root.created - 1.0)) == ()
        procs.end_tree_leaves_first(root, 2.0)
        assert parent.wait(timeout=10) is not None and procs.descendants(root) == ()
    finally:
        parent.kill()
        parent.wait()
