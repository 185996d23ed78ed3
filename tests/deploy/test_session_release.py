"""The deploy lock's release when a session ends is a clean-up: an interrupt that arrives while
it runs (``fleet watch`` stopped by SIGTERM just as an action ends -- the sandbox watch test
caught a lock left on h2 that way in CI) lets it finish on every host, then ends the command; an
interrupt that ended the session already makes one arriving during the release the second,
which abandons it.  Simulated hosts (tests/deploy/simhost.py) whose transports, like SSH's,
refuse once closed; the interrupts are real SIGINTs to the main thread."""

from __future__ import annotations


import pytest

from launcher.deploy import lock
from launcher.deploy.session import DeploySession
from tests.deploy import simhost
from tests.deploy.conftest import SimFleet
from tests.deploy.factory import pp_plan, target

HOSTS = ("h1", "h2", "h3")


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
            simhost.interrupt_first_release(monkeypatch, interrupts, abandoned=by_interrupt)
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
