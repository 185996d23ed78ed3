"""The line fleet's start error quotes from a unit that died (``Runtime.failure_lines``), and which
such lines only report a lost peer rank (``steps.peer_lost``)."""

from __future__ import annotations

import pytest

from launcher.deploy.steps import peer_lost
from launcher.runtimes import registry
from launcher.runtimes.base import FAILURE_LINES_SHOWN


def failure_lines(runtime: str, out: str, restarted: bool) -> tuple[list[str], str]:
    return registry.get(runtime).failure_lines(out, restarted)

STARTED = "2026-12-01T15:42:30.000000000Z"


def _log(*texts: str) -> str:
    return STARTED + "\n" + "".join(f"2026-12-01T15:42:{10 + i:02d}.5Z {t}\n" for i, t in enumerate(texts))


def test_the_first_exception_of_the_run_names_the_cause() -> None:
    """The real vLLM's failed multi-node start (seen with a wrong GLOO_SOCKET_IFNAME): the worker's
    traceback ends with the cause, the engine's later one only says where to look."""
    out = _log(
        "(Worker pid=20) ERROR 12-01 15:42:16 [multiproc_executor.py:1063] Traceback (most recent call last):",
        "(Worker pid=20) ERROR 12-01 15:42:16 [multiproc_executor.py:1063] RuntimeError: [enforce fail at "
        "../gloo/transport/tcp/device.cc:84] ifa != nullptr. Unable to find address for: ens9",
        "Traceback (most recent call last):",
        "Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace for root cause.",
    )  # fmt: skip
    lines, cause = failure_lines("docker", out, restarted=False)
    assert cause == "RuntimeError: [enforce fail at ../gloo/transport/tcp/device.cc:84] ifa != nullptr. Unable to find address for: ens9"
    assert lines[-1].startswith("Exception: WorkerProc")


def test_without_an_exception_the_last_line_and_only_the_tail_is_shown() -> None:
    out = _log(*(f"line {i}" for i in range(30)), "Error: No such container: x", "FATAL: rendezvous with rank 0 failed")
    lines, cause = failure_lines("docker", out, restarted=False)
    assert cause == "FATAL: rendezvous with rank 0 failed"
    assert len(lines) == FAILURE_LINES_SHOWN


@pytest.mark.parametrize(("line", "lost"), [
    ("FATAL: rank 1 (h10) disconnected: process group is broken", True),  # the stand-in's rank 0
    ("FATAL: rank 1: lost the connection to rank 0: process group is broken", True),  # its other ranks
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:10895", True),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:589] Read error [10.0.0.2]:25266: Connection reset by peer", True),
    ("RuntimeError: NCCL error: remote process exited or there was a network error", True),
    ("torch.distributed.DistBackendError: ncclRemoteError: A call failed possibly due to a network error or a remote "
     "process exiting prematurely.", True),
    ("torch.distributed.DistNetworkError: failed to recv, got 0 bytes. Connection was likely closed. Did the remote "
     "server shutdown or crash?", True),
    ("RuntimeError: [enforce fail at ../gloo/transport/tcp/device.cc:84] ifa != nullptr. Unable to find address for: ens9", False),
    ("FATAL: Failed to setup Mooncake store, error code: -900 (master 198.18.0.15:50051: Connection reset by peer)", False),
    ("RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)", False),
    ("", False),
])  # fmt: skip
def test_a_line_that_only_reports_a_lost_peer(line: str, lost: bool) -> None:
    assert peer_lost(line) is lost
