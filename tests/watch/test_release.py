"""The watch's claim release when it stops is a clean-up: an interrupt that arrives while it runs
(a watch stopped twice in a row) lets it finish on every host and every deployment, then ends the
command; the connections are closed either way.  Simulated hosts (tests/deploy/simhost.py) whose
transports, like SSH's, refuse once closed; the interrupt is a real SIGINT to the main thread."""

from __future__ import annotations

from dataclasses import replace

import pytest

from launcher.deploy import lock
from launcher.watch.loop import Options, Watch, Watched
from tests.deploy import simhost
from tests.deploy.conftest import SimFleet
from tests.deploy.factory import pp_plan, target

HOSTS = ("h1", "h2", "h3")


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
    simhost.interrupt_first_release(monkeypatch, interrupts)
    with pytest.raises(KeyboardInterrupt):
        w.release()
    assert len(interrupts) == 1
    assert claims(sim, "demo") == [] and claims(sim, "other") == [], "a claim was left behind"
    assert w.conns == {} and all(sim[h].closed for h in HOSTS)
