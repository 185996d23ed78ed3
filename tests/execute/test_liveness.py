"""The SSH liveness bound and a control host that is behind (launcher/execute/ssh.py _Liveness):
bytes from the host waiting unread in this end's socket earn the host more windows (it did send;
this process has not read), up to UNREAD_WINDOWS, and a cut-off after that says this end was
behind; with nothing unread the bound cuts at once, as before.  A stand-in for paramiko's
Transport whose keepalive request is never answered, over a real socket pair."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from typing import Iterator

import pytest

from launcher.execute import ssh
from launcher.execute.ssh import SshOptions, _Liveness, unread

OPTIONS = dataclasses.replace(SshOptions(), keepalive_s=0.05, dead_after_s=0.3)


class Transport:
    """What _Liveness uses of paramiko.Transport: its socket, is_active, close, and a
    global_request that waits until closed (the host never answers) -- or until ``answer`` is
    set."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.closed = threading.Event()
        self.answer = threading.Event()

    def is_active(self) -> bool:
        return not self.closed.is_set()

    def close(self) -> None:
        self.closed.set()

    def global_request(self, kind: str, wait: bool) -> None:
        while not self.closed.is_set() and not self.answer.wait(0.01):
            pass
        if self.closed.is_set():
            raise EOFError


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    here, host = socket.socketpair()
    yield here, host
    here.close()
    host.close()


def watched(pair: tuple[socket.socket, socket.socket], options: SshOptions = OPTIONS, *,
            unread_bytes: bool) -> tuple[Transport, _Liveness]:
    """A liveness watch over this end of ``pair`` (with bytes from the other end waiting unread
    in it, if ``unread_bytes``)."""
    here, host = pair
    if unread_bytes:
        host.sendall(b"an answer this process has not read")
    t = Transport(here)
    return t, _Liveness(t, options)  # type: ignore[arg-type]


def lost_after(t: Transport, live: _Liveness) -> float:
    began = time.monotonic()
    assert t.closed.wait(30), "never cut off"
    live.stop()
    return time.monotonic() - began


def test_unread_tells_pending_bytes(pair: tuple[socket.socket, socket.socket]) -> None:
    here, host = pair
    assert not unread(here)
    host.sendall(b"x")
    deadline = time.monotonic() + 5
    while not unread(here):
        assert time.monotonic() < deadline
    here.recv(1)
    assert not unread(here)
    assert not unread(object())  # no socket to ask: nothing can be told


def test_nothing_unread_is_cut_at_the_bound(pair: tuple[socket.socket, socket.socket]) -> None:
    t, live = watched(pair, unread_bytes=False)
    lost_after(t, live)
    assert live.lost == "no answer to SSH keepalives within 0.3s"


def test_bytes_unread_here_earn_more_windows_then_say_this_end_was_behind(
    pair: tuple[socket.socket, socket.socket],
) -> None:  # fmt: skip
    t, live = watched(pair, unread_bytes=True)
    lost_after(t, live)
    windows = ssh.UNREAD_WINDOWS
    assert live.lost == (f"no answer to SSH keepalives within {0.3 * (windows + 1):g}s ({0.3 * windows:g}s of it with "
                         "bytes from the host unread on this control host: this end may be overloaded)")  # fmt: skip


def test_an_answer_read_late_within_the_extra_windows_keeps_the_connection(
    pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    extra = threading.Event()  # the first bound passed with bytes unread: the host got more windows
    counted = ssh.unread

    def unread_seen(sock: object) -> bool:
        pending = counted(sock)
        if pending:
            extra.set()
        return pending

    monkeypatch.setattr(ssh, "unread", unread_seen)
    t, live = watched(pair, dataclasses.replace(OPTIONS, dead_after_s=2.0), unread_bytes=True)
    # Past the first bound (2 s), inside the extra windows (8 s in all: 6 s of them left), however
    # late this thread is woken on a loaded machine.
    assert extra.wait(60), "the first bound never passed with the host's bytes unread"
    t.answer.set()  # this end reads the answer at last
    time.sleep(2.0)
    live.stop()
    assert not t.closed.is_set() and live.lost is None
