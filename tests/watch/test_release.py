"""The watch's claim release when it stops is a clean-up: an interrupt that arrives while it runs
(a watch stopped twice in a row) lets it finish on every host and every deployment, then ends the
command; the connections are closed either way.  Simulated hosts (tests/deploy/simhost.py) whose
transports, like SSH's, refuse once closed; the interrupt is a real SIGINT to the main thread."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import replace
from types import FrameType
from typing import Iterator, Sequence

import pytest

from launcher.deploy import lock
from launcher.execute import fanout
from launcher.watch.loop import Options, Watch, Watched
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

    monkeypatch.setattr(fanout, "INTERRUPT_GRACE_S", 0.05)  # an abandoned release would be cut at once
    before = signal.signal(signal.SIGINT, handler)
    try:
        yield taken
    finally:
        signal.signal(signal.SIGINT, before)


def claims(sim: SimFleet, deployment: str) -> list[str]:
    owner = lock.lock_dir(lock.claim_name(deployment, "watch")) + "/owner"
    return [h for h in HOSTS if owner in sim[h].files]


def test_an_interrupt_during_the_release_lets_it_finish_everywhere(monkeypatch: pytest.MonkeyPatch,
                                                                   interrupts: list[float]) -> None:  # fmt: skip
    sim = SimFleet()
    demo = target(pp_plan(), hosts=HOSTS)
    deployments = [demo, replace(demo, deployment="other")]
    w = Watch([Watched(target=t) for t in deployments], sim.connect, Options(forks=2), lambda e: None)  # type: ignore[arg-type]
    w.claim()
    assert claims(sim, "demo") == list(HOSTS) and claims(sim, "other") == list(HOSTS)
    plain = simhost.SimHost.lock_release

    def release(self: simhost.SimHost, p: Sequence[str]) -> tuple[int, str, str]:
        """h2's first release sends a SIGINT, taken by the main thread, and finishes half a
        second later -- unless its connection was closed meanwhile (it then fails, as SSH does)."""
        if self.name == "h2" and not interrupts:
            os.kill(os.getpid(), signal.SIGINT)
            deadline = time.monotonic() + 30
            while not interrupts:
                assert time.monotonic() < deadline, "the interrupt was not taken"
                time.sleep(0.01)
            time.sleep(0.5)
            if self.closed:
                return 255, "", "connection closed"
        return plain(self, p)

    monkeypatch.setitem(simhost._SCRIPTS, lock._RELEASE, release)
    with pytest.raises(KeyboardInterrupt):
        w.release()
    assert len(interrupts) == 1
    assert claims(sim, "demo") == [] and claims(sim, "other") == [], "a claim was left behind"
    assert w.conns == {} and all(sim[h].closed for h in HOSTS)
