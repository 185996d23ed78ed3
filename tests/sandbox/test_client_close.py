"""``Sandbox.close`` never hangs a teardown: a connection whose close blocks gets its socket shut
under it after ``CLOSE_TIMEOUT_S``; connections that close normally are left alone."""

from __future__ import annotations

import threading
from typing import Any, cast

import pytest

from launcher.sandbox import client as sandbox_client
from launcher.sandbox.client import Sandbox


class _Sock:
    def __init__(self) -> None:
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()


class _Transport:
    def __init__(self) -> None:
        self.sock = _Sock()


class _Client:
    """An SSHClient stand-in: ``stuck`` ones block in close() until their socket is closed."""

    def __init__(self, stuck: bool) -> None:
        self.stuck = stuck
        self.transport = _Transport()
        self.closed = False

    def get_transport(self) -> _Transport:
        return self.transport

    def close(self) -> None:
        if self.stuck:
            self.transport.sock.closed.wait(60)
        self.closed = True


def test_a_blocked_close_is_cut_short_and_the_others_close(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox_client, "CLOSE_TIMEOUT_S", 0.2)
    sb = Sandbox(cast(Any, None))
    stuck, fine = _Client(stuck=True), _Client(stuck=False)
    sb._clients = cast(Any, {"h1": stuck, "h2": fine})
    done = threading.Thread(target=sb.close, daemon=True)
    done.start()
    done.join(30)
    assert not done.is_alive(), "Sandbox.close hung on a blocked connection"
    assert stuck.transport.sock.closed.is_set(), "the blocked connection's socket was not shut"
    assert fine.closed and not fine.transport.sock.closed.is_set()
    assert sb._clients == {}
