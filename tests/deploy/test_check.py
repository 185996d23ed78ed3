"""``--check`` as ``ansible-playbook -C`` does it: every host that answers is read (nothing
written anywhere), each one that does not is one error line, groups that cannot be judged are
``unknown``, and the run ends with a per-host summary (issue #26 items 2 and 3)."""

from __future__ import annotations

from dataclasses import replace

from launcher.deploy.orchestrate import Options, down, up
from launcher.errors import ExitCode, UnreachableError
from launcher.model import Host
from launcher.recap import column, lines, recap
from launcher.rolling.check import check_roll
from launcher.rolling.roll import RollOptions
from tests.deploy.conftest import SimFleet
from tests.deploy.factory import pp_plan, target
from tests.deploy.simhost import SimHost

FAST = Options(forks=4, timeout_s=5.0)


def dropping(sim: SimFleet, *down_hosts: str):  # type: ignore[no-untyped-def]
    """``sim.connect`` with ``down_hosts`` not answering on their SSH port."""

    def connect(host: Host) -> SimHost:
        if host.name in down_hosts:
            raise UnreachableError(host.name, f"no answer from {host.name}:22 within 10s")
        return sim.connect(host)
    return connect


def writes(sim: SimFleet) -> list[tuple[str, ...]]:
    return [e for h in ("h1", "h2", "h3") for e in sim[h].log if e[0] == "put" or "docker rm" in " ".join(e)]


def test_check_reads_every_host_that_answers_and_names_each_that_does_not(sim: SimFleet) -> None:
    report = up(target(pp_plan()), dropping(sim, "h1", "h3"), Options(check=True))
    assert [(u.host, u.unit, u.action, u.outcome, u.reason) for u in report.units] == [
        ("h1", "fleet-demo-rank-r0", "unknown", "unreachable", "unreachable: no answer from h1:22 within 10s"),
        ("h2", "fleet-demo-rank-r1", "unknown", "unknown", "its group also runs on a host that did not answer"),
        ("h3", "fleet-demo-router", "unknown", "unreachable", "unreachable: no answer from h3:22 within 10s"),
    ]
    assert report.errors == ("h1: unreachable: no answer from h1:22 within 10s",
                             "h3: unreachable: no answer from h3:22 within 10s")  # fmt: skip
    assert report.exit_code == ExitCode.FAILED
    assert writes(sim) == []


def test_check_with_one_host_down_judges_the_others_and_is_partial(sim: SimFleet) -> None:
    report = up(target(pp_plan()), dropping(sim, "h3"), Options(check=True))
    assert {u.unit: (u.action, u.outcome) for u in report.units} == {
        "fleet-demo-rank-r0": ("start", "planned"), "fleet-demo-rank-r1": ("start", "planned"),
        "fleet-demo-router": ("unknown", "unreachable"),
    }  # fmt: skip
    assert report.exit_code == ExitCode.PARTIAL
    summary = recap("demo: up --check", [(u.host, column(u.outcome, u.action)) for u in report.units],
                    int(report.exit_code), check=True)  # fmt: skip
    assert lines(summary) == [
        "RECAP demo: up --check (nothing was changed): units per host",
        "h1 : started=1  unchanged=0  stopped=0  failed=0  skipped=0  unreachable=0  unknown=0",
        "h2 : started=1  unchanged=0  stopped=0  failed=0  skipped=0  unreachable=0  unknown=0",
        "h3 : started=0  unchanged=0  stopped=0  failed=0  skipped=0  unreachable=1  unknown=0",
        "exit 3: some hosts could not be read (errors above); the counts are what the command would do on the "
        "others (nothing was changed)",
    ]


def test_check_with_a_secret_it_cannot_read_says_unknown_instead_of_stopping(sim: SimFleet) -> None:
    up(target(pp_plan(secret=True), {"HF_TOKEN": "tok"}), sim.connect, FAST)
    why = "secret HF_TOKEN: environment variable HF_TOKEN is not set"
    report = up(target(pp_plan(secret=True)), sim.connect, Options(check=True, diff=True,
                                                                  unknown_secrets={"HF_TOKEN": why}))  # fmt: skip
    assert {u.unit: (u.outcome, u.reason) for u in report.units} == {
        "fleet-demo-rank-r0": ("unknown", f"would change: unknown ({why})"),
        "fleet-demo-rank-r1": ("unknown", f"would change: unknown ({why})"),
        "fleet-demo-router": ("unchanged", ""),
    }
    assert report.exit_code == ExitCode.OK and report.diff == ""


def test_down_check_lists_what_it_would_remove_and_touches_nothing(sim: SimFleet) -> None:
    up(target(pp_plan()), sim.connect, FAST)
    before = {h: dict(sim[h].files) for h in ("h1", "h2", "h3")}
    report = down(target(pp_plan()), dropping(sim, "h2"), Options(check=True))
    assert [(u.host, u.unit, u.action, u.outcome) for u in report.units] == [
        ("h1", "fleet-demo-rank-r0", "remove", "planned"),
        ("h3", "fleet-demo-router", "remove", "planned"),
        ("h2", "fleet-demo-rank-r1", "unknown", "unreachable"),
    ]
    assert report.errors == ("h2: unreachable: no answer from h2:22 within 10s",)
    assert {h: sim[h].files for h in ("h1", "h2", "h3")} == before
    assert all(c.state == "running" for h in ("h1", "h2", "h3") for c in sim[h].containers.values())


def test_restart_and_rollback_check(sim: SimFleet) -> None:
    plan = pp_plan()
    up(target(plan), sim.connect, FAST)
    written = len(writes(sim))
    restart = check_roll(target(plan), sim.connect, RollOptions(force=True), action="restart")
    assert [(g.group, g.batch, g.outcome, g.generation_before, g.generation_after, g.detail)
            for g in restart.groups] == [
        ("g0", 1, "planned", 1, 1, "would restart"),
        ("router", 0, "skipped", None, None, "infrastructure: not rolled (fleet up restarts it)"),
    ]  # fmt: skip
    rollback = check_roll(target(plan), dropping(sim, "h3"), RollOptions(force=True), action="rollback")
    assert [(g.group, g.outcome, g.detail) for g in rollback.groups][:1] == [
        ("g0", "skipped", "no previous generation kept in prev/")]
    assert rollback.errors == ("h3: unreachable: no answer from h3:22 within 10s",)
    assert len(writes(sim)) == written  # read only
    changed = pp_plan(args=("--x", "1"))
    up(target(changed), sim.connect, FAST)  # generation 2; generation 1 kept in prev/
    written = len(writes(sim))
    rollback = check_roll(target(changed), sim.connect, RollOptions(force=True), action="rollback")
    assert [(g.group, g.outcome, g.generation_before, g.generation_after) for g in rollback.groups][:1] == [
        ("g0", "planned", 2, 1)]
    assert len(writes(sim)) == written


def test_recap_of_a_real_run(sim: SimFleet) -> None:
    report = up(target(pp_plan()), sim.connect, FAST)
    again = up(target(pp_plan(args=("--y", "2"))), sim.connect, replace(FAST))
    summary = recap("demo: up", [(u.host, column(u.outcome, u.action)) for u in again.units], int(again.exit_code))
    assert report.exit_code == ExitCode.OK and lines(summary) == [
        "RECAP demo: up: units per host",
        "h1 : started=1  unchanged=0  stopped=0  failed=0  skipped=0  unreachable=0  unknown=0",
        "h2 : started=1  unchanged=0  stopped=0  failed=0  skipped=0  unreachable=0  unknown=0",
        "h3 : started=0  unchanged=1  stopped=0  failed=0  skipped=0  unreachable=0  unknown=0",
        "exit 0: every unit is as planned",
    ]


def test_recap_lists_every_host_worked_on() -> None:
    """As Ansible's PLAY RECAP: a host the command touched with nothing to count is listed, all zero."""
    summary = recap("demo: down", [("h2", "stopped")], 0, hosts=["h1", "h2"])
    assert lines(summary)[1:3] == [
        "h1 : started=0  unchanged=0  stopped=0  failed=0  skipped=0  unreachable=0  unknown=0",
        "h2 : started=0  unchanged=0  stopped=1  failed=0  skipped=0  unreachable=0  unknown=0",
    ]
