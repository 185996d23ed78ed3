"""The step hook (``FLEET_STEP_HOOK``, launcher/stephook.py) against simulated hosts: it runs
before each step with the step and its hosts in its environment, in the order the steps run,
and fleet waits for it; a failing or missing hook is one line and the command goes on."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from launcher import stephook
from launcher.deploy.orchestrate import Options, down, unlock, up
from tests.deploy.conftest import SimFleet
from tests.deploy.factory import pp_plan, target

FAST = Options(forks=4, timeout_s=5.0)


@pytest.fixture
def seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A hook that appends ``STEP HOSTS`` to a file, then sleeps a moment: the next step must
    not have begun meanwhile (it appends its own line only after this one returns)."""
    log = tmp_path / "steps"
    script = tmp_path / "hook.sh"
    script.write_text(f'echo "$FLEET_STEP $FLEET_STEP_HOSTS" >> {log}; sleep 0.05\n')
    monkeypatch.setenv(stephook.ENV, f"sh {script}")
    return log


def test_up_down_and_unlock_announce_each_step_in_order(sim: SimFleet, seen: Path) -> None:
    assert up(target(pp_plan()), sim.connect, FAST).errors == ()
    # ranks (start step 1) on h1 and h2, the router (step 2) on h3; nothing to hold on a fresh up;
    # down: the router first, then each stop wave (serving rank 0 before the others)
    assert seen.read_text().splitlines() == [
        "connect h1 h2 h3", "lock h1 h2 h3", "record h1 h2 h3", "pull h1 h2 h3",
        "install h1 h2", "start h1 h2", "health h1 h2",
        "install h3", "start h3", "health h3", "release h1 h2 h3",
    ]
    seen.unlink()
    assert down(target(pp_plan()), sim.connect, FAST).errors == ()
    assert seen.read_text().splitlines() == [
        "connect h1 h2 h3", "lock h1 h2 h3", "record h1 h2 h3", "hold h1 h2 h3", "remove h3", "remove h1", "remove h2",
        "release h1 h2 h3",
    ]
    seen.unlink()
    unlock(target(pp_plan()), sim.connect)
    assert seen.read_text().splitlines() == ["connect h1 h2 h3", "unlock h1 h2 h3"]


def test_a_failing_or_missing_hook_is_one_line_and_the_step_goes_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(stephook.ENV, f"{sys.executable} -c 'raise SystemExit(3)'")
    stephook.reached("install", ["h1"])
    monkeypatch.setenv(stephook.ENV, "/nonexistent/hook --x")
    stephook.reached("start", ["h1"])
    monkeypatch.setenv(stephook.ENV, "'unclosed")
    stephook.reached("health", ["h1"])
    assert capsys.readouterr().err.splitlines() == [
        "fleet: FLEET_STEP_HOOK for step install: exit 3 (the step goes ahead)",
        "fleet: FLEET_STEP_HOOK for step start: [Errno 2] No such file or directory: '/nonexistent/hook'",
        "fleet: FLEET_STEP_HOOK for step health: No closing quotation",
    ]
