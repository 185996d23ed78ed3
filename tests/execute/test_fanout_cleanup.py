"""``each(cleanup=True)``: the fan-out of a clean-up (releasing locks) is not cut short by the
first interrupt -- every key finishes, then :class:`Interrupted` carries all of them -- while a
second interrupt abandons it as it does any other step.  In-process: the interrupt is a real
SIGINT delivered to the main thread, which is waiting in :func:`each`."""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Sequence, overload

import pytest

from launcher.execute.fanout import Interrupted, each


def interrupt_main(inside: str = "each") -> None:
    """SIGINT once the main thread is blocked waiting for the keys in ``inside`` (:func:`each`,
    or the clean-up's second wait after a first interrupt, ``_outwaited``): seen on its stack and
    in its kernel state, not guessed from a pause, so a main thread slow to get there on a loaded
    machine is waited for.  (Blocked, not only inside the call: a signal that lands just before the
    thread blocks on its lock is not seen until the lock is released.)"""
    until(f"the main thread blocked waiting in {inside}", lambda: _main_blocked_in(inside))
    os.kill(os.getpid(), signal.SIGINT)


def _main_blocked_in(caller: str) -> bool:
    """Whether the main thread sleeps in the lock of ``concurrent.futures.wait`` called by
    ``caller`` (its innermost frame ``Condition.wait``, its task state S)."""
    main = threading.main_thread()
    frame = sys._current_frames().get(main.ident or 0)  # noqa: SLF001 - a stack read
    if frame is None or frame.f_code is not threading.Condition.wait.__code__:
        return False
    while frame is not None and frame.f_code is not cf.wait.__code__:
        frame = frame.f_back
    if frame is None or frame.f_back is None or frame.f_back.f_code.co_name != caller:
        return False
    stat = Path(f"/proc/self/task/{main.native_id}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "S"


def until(what: str, ok: object) -> None:
    deadline = time.monotonic() + 30
    while not ok():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_cleanups_first_interrupt_lets_every_key_finish(interrupts: list[float]) -> None:
    cut = threading.Event()  # set when each() has let its keys go

    def release(key: str) -> str:
        if key == "h2":
            interrupt_main()
            until("the main thread took the interrupt", lambda: interrupts)
            time.sleep(0.5)  # past the abandon grace: an abandoned key would be cut here
            if cut.is_set():
                raise AssertionError("released after each() gave up on it")
        return f"{key} released"

    with pytest.raises(Interrupted) as info:
        try:
            each(["h1", "h2", "h3"], release, 4, cleanup=True)
        finally:
            cut.set()
    assert dict(info.value.done) == {"h1": "h1 released", "h2": "h2 released", "h3": "h3 released"}
    assert len(interrupts) == 1


def test_a_second_interrupt_abandons_the_cleanup(interrupts: list[float]) -> None:
    let_go = threading.Event()
    h1_released = threading.Event()  # h1 is done before the interrupts, however late its thread ran

    def release(key: str) -> str:
        if key == "h1":
            h1_released.set()
        if key == "h2":
            until("h1 released", h1_released.is_set)
            for n, inside in ((1, "each"), (2, "_outwaited")):
                interrupt_main(inside)
                until(f"the main thread took interrupt {n}", lambda n=n: len(interrupts) >= n)  # type: ignore[misc]
            let_go.wait(30)
        return f"{key} released"

    try:
        with pytest.raises(Interrupted) as info:
            each(["h1", "h2"], release, 4, cleanup=True)
    finally:
        let_go.set()
    assert dict(info.value.done) == {"h1": "h1 released"}, "h2 was still releasing: not waited for"


def test_without_cleanup_the_first_interrupt_abandons_what_runs(interrupts: list[float]) -> None:
    let_go = threading.Event()

    def step(key: str) -> str:
        if key == "h2":
            interrupt_main()
            let_go.wait(30)
        return key

    try:
        with pytest.raises(Interrupted) as info:
            each(["h1", "h2"], step, 4)
    finally:
        let_go.set()
    assert "h2" not in info.value.done


class CutWhileHandedOut(Sequence[str]):
    """Keys whose third read raises KeyboardInterrupt once: a Ctrl-C that arrives while
    :func:`each` is still handing keys out (the main thread is then not waiting in it yet)."""

    def __init__(self, *keys: str) -> None:
        self.keys, self.cut = keys, False

    def __len__(self) -> int:
        return len(self.keys)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...
    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        if isinstance(i, int) and i == 2 and not self.cut:
            self.cut = True
            raise KeyboardInterrupt
        return self.keys[i]


@pytest.mark.parametrize("cleanup", [False, True], ids=["step", "cleanup"])
def test_a_ctrl_c_while_keys_are_handed_out_is_an_interrupt(cleanup: bool) -> None:
    """Before, the bare KeyboardInterrupt left the keys handed out running unseen and skipped
    ``on_interrupt`` (a preflight's claims were left so); a clean-up's keys all run still."""
    closed: list[bool] = []
    ran: list[str] = []

    def step(key: str) -> str:
        ran.append(key)
        return key

    with pytest.raises(Interrupted) as info:
        each(CutWhileHandedOut("h1", "h2", "h3", "h4"), step, 4, on_interrupt=lambda: closed.append(True),
             cleanup=cleanup)  # fmt: skip
    if cleanup:
        assert dict(info.value.done) == {k: k for k in ("h1", "h2", "h3", "h4")}
        assert not closed
    else:
        assert set(info.value.done) <= set(ran) <= {"h1", "h2"}, "nothing started after the Ctrl-C"
        assert closed == [True]
