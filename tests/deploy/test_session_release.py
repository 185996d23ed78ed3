"""The deploy lock's release when a session ends is a clean-up: an interrupt that arrives while
it runs (``fleet watch`` stopped by SIGTERM just as an action ends -- the sandbox watch test
caught a lock left on h2 that way in CI) lets it finish on every host, then ends the command; an
interrupt that ended the session already makes one arriving during the release the second,
which abandons it.  Simulated hosts (tests/deploy/simhost.py) whose transports, like SSH's,
refuse once closed; the interrupts are real SIGINTs to the main thread."""

from __future__ import annotations

import os
import signal
import threading
import time
from types import FrameType
from typing import Iterator, Sequence

import pytest

from launcher.deploy import lock
from launcher.deploy.session import DeploySession
from launcher.execute import fanout
from tests.deploy import simhost
from tests.deploy.conftest import SimFleet
from tests.deploy.factory import pp_plan, target

HOSTS = ("h1", "h2", "h3")


@pytest.fixture
def interrupts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    taken: list[float] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        taken.append(time.monotonic())
        raise KeyboardInterrupt

    monkeypatch.setattr(fanout, "INTERRUPT_GRACE_S", 0.05)  # an abandoned release is cut at once
    before = signal.signal(signal.SIGINT, handler)
    try:
        yield taken
    finally:
        signal.signal(signal.SIGINT, before)


def interrupted_release(monkeypatch: pytest.MonkeyPatch, interrupts: list[float]) -> None:
    """h2's release sends a SIGINT, taken by the main thread, and finishes half a second later --
    unless its connection was closed meanwhile (it then fails, as SSH does)."""
    plain = simhost.SimHost.lock_release

    def release(self: simhost.SimHost, p: Sequence[str]) -> tuple[int, str, str]:
        if self.name == "h2":
            taken = len(interrupts)
            time.sleep(0.2)  # the main thread is waiting on the release by now
            os.kill(os.getpid(), signal.SIGINT)
            deadline = time.monotonic() + 30
            while len(interrupts) == taken:
                assert time.monotonic() < deadline, "the interrupt was not taken"
                time.sleep(0.01)
            time.sleep(0.5)
            if self.closed:
                return 255, "", "connection closed"
        return plain(self, p)

    monkeypatch.setitem(simhost._SCRIPTS, lock._RELEASE, release)


def held(sim: SimFleet) -> list[str]:
    return [h for h in HOSTS if lock.lock_dir("demo") + "/owner" in sim[h].files]


def ended(sim: SimFleet, monkeypatch: pytest.MonkeyPatch, interrupts: list[float], *, by_interrupt: bool) -> DeploySession:
    """A session that took the lock on every host and ended -- as its block finished, or
    (``by_interrupt``) by an interrupt of its own -- while h2's release is interrupted."""
    s = DeploySession(target(pp_plan(), hosts=HOSTS), sim.connect, forks=4)
    with pytest.raises(KeyboardInterrupt):
        with s:
            s.lock_and_survey(force=False, images=False)
            assert held(sim) == list(HOSTS)
            interrupted_release(monkeypatch, interrupts)
            if by_interrupt:
                raise KeyboardInterrupt
    return s


def test_an_interrupt_during_the_release_lets_it_finish_everywhere(
    sim: SimFleet, monkeypatch: pytest.MonkeyPatch, interrupts: list[float],
) -> None:  # fmt: skip
    s = ended(sim, monkeypatch, interrupts, by_interrupt=False)
    assert held(sim) == [], "a lock was left behind"
    assert s.unreleased == ()


def test_a_second_interrupt_during_the_release_abandons_it_and_says_where(
    sim: SimFleet, monkeypatch: pytest.MonkeyPatch, interrupts: list[float],
) -> None:  # fmt: skip
    s = ended(sim, monkeypatch, interrupts, by_interrupt=True)
    assert held(sim) == ["h2"]
    assert s.unreleased == (
        f"h2: the deploy lock {lock.lock_dir('demo')} was not released (interrupted); once h2 answers, clear it "
        f"with: {s.target.unlock_command}",
    )
