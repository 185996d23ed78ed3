"""The commands the first ``--limit`` round left out (issue #26 items 1, 3, 9): ``metrics
targets`` reads only the limited hosts and leaves the others' targets as they were, ``bench``
refuses a limit with its reason, ``run`` takes one beside its pattern, and ``unlock`` and
``weights stage`` end with a run summary and are recorded in ``fleet history``.

Nothing here connects: the host-reading calls are replaced at the module the CLI calls them
through (the inventories' hosts do not exist).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from unittest import mock

import pytest
from click.testing import CliRunner

from launcher import history
from launcher.cli import cli
from launcher.deploy.session import Target
from launcher.deploy.status import UnitStatus
from launcher.errors import RemoteError
from launcher.sandbox.inventory import preview
from launcher.weights.manifest import Manifest
from launcher.weights.stage import HostResult, Report

REPO = Path(__file__).resolve().parents[2]
ROUTER = str(REPO / "playbooks" / "sandbox" / "rolling-router.yaml")  # one replica on each of h1..h5, a router
PB = str(REPO / "playbooks" / "pd-glm-2p1d-6000d.yaml")
EXAMPLE = str(REPO / "inventories" / "example.yaml")


@pytest.fixture
def inv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FLEET_STATE_DIR", str(tmp_path / "state"))
    path = tmp_path / "inventory.yaml"
    path.write_text(preview(15))
    return str(path)


def fleet(*args: str) -> tuple[int, str, str]:
    with mock.patch.object(sys, "argv", ["fleet", *args]):  # what the history records as the command
        result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_metrics_targets_limit_reads_only_its_hosts_and_keeps_the_others(
        inv: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from launcher.deploy import publish

    asked: list[set[str]] = []

    def status(target: Target, connect: object, forks: int, generation: int = 1) -> tuple[UnitStatus, ...]:
        asked.append({h.name for h in target.hosts})
        return tuple(UnitStatus(host=d.host, unit=d.name, role=d.unit.role, rank=d.unit.rank, group=d.unit.group,
                                state="running", health="ok", generation=generation, drift="none")
                     for d in target.units)  # fmt: skip

    out = str(tmp_path / "fleet.json")
    monkeypatch.setattr(publish, "status", status)
    assert fleet("metrics", "targets", ROUTER, "-i", inv, "-o", out)[0] == 0
    monkeypatch.setattr(publish, "status", lambda t, c, f: status(t, c, f, generation=2))
    code, _, err = fleet("metrics", "targets", ROUTER, "-i", inv, "-o", out, "--limit", "h1:h3")
    assert (code, asked[-1]) == (0, {"h1", "h3"})
    by_host = {g["labels"]["host"]: g["labels"]["generation"] for g in json.loads(Path(out).read_text())}
    assert by_host == {"h1": "2", "h2": "1", "h3": "2", "h4": "1", "h5": "1"}  # outside the limit: as they were
    assert err.endswith(f"sb-rr: 5 targets -> {out}\n"), err


def test_metrics_targets_leaves_a_deployment_the_limit_does_not_touch(
        inv: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from launcher.deploy import publish

    monkeypatch.setattr(publish, "status", lambda t, c, f: ())
    single = str(REPO / "playbooks" / "sandbox" / "single.yaml")
    code, _, err = fleet("metrics", "targets", ROUTER, single, "-i", inv, "-o", str(tmp_path / "f.json"),
                         "--limit", "h5")  # fmt: skip
    assert code == 0
    assert err.splitlines()[0] == "sb-single: left as it is (--limit matches none of its hosts)"


def test_bench_refuses_a_limit_with_the_reason() -> None:
    assert fleet("bench", PB, "-i", EXAMPLE, "--limit", "rtx-01") == (2, "", (
        "fleet: error: --limit: fleet bench measures the whole deployment through its endpoint (every host serves "
        "it) and cannot measure part of it; fleet top --limit shows some hosts' load\n"))  # fmt: skip


def test_run_limit_narrows_the_pattern_with_the_same_errors() -> None:
    assert fleet("run", "-i", EXAMPLE, "rtx-0*", "--limit", "ctl-01", "--", "true") == (2, "", (
        "fleet: error: --limit 'ctl-01' matches none of the hosts of pattern 'rtx-0*' (rtx-01, rtx-02, rtx-03, "
        "rtx-04, rtx-05, rtx-06, rtx-07, rtx-08)\n"))  # fmt: skip
    assert fleet("run", "-i", EXAMPLE, "rtx-0*", "--limit", "rtx-1", "--", "true") == (2, "", (
        f"fleet: error: --limit: pattern 'rtx-1': 'rtx-1' matches no host or group in {EXAMPLE} "
        "(did you mean 'rtx-01'?)\n"))  # fmt: skip


def test_unlock_ends_with_its_recap_and_is_recorded(inv: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.deploy import orchestrate

    monkeypatch.setattr(orchestrate, "unlock", lambda target, connect, forks: {
        "h1": orchestrate.Unlocked(), "h2": orchestrate.Unlocked(lock="ops@ctl:4242", claim="ops@ctl:4240")})
    code, out, err = fleet("unlock", ROUTER, "-i", inv, "--limit", "h1:h2")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "h1: not locked",
        "h2: removed lock of ops@ctl:4242; preflight claim of ops@ctl:4240",
        "RECAP sb-rr: unlock: locks per host",
        "h1 : removed=0  unchanged=1  unknown=0",
        "h2 : removed=1  unchanged=0  unknown=0",
        "exit 0: no host holds a deploy lock or preflight claim of sb-rr any more",
    ]
    (run,) = history.read()
    assert (run.command[1:3], run.deployment, run.hosts, run.exit_code) == (
        ("unlock", ROUTER), "sb-rr", ("h1", "h2"), 0)
    assert [(o.host, o.unit, o.outcome) for o in run.outcomes] == [("h1", "lock", "unchanged"),
                                                                   ("h2", "lock", "removed")]  # fmt: skip


def test_a_failed_unlock_counts_every_host_unknown_and_is_recorded(inv: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.deploy import orchestrate

    def refused(target: Target, connect: object, forks: int) -> dict[str, orchestrate.Unlocked]:
        raise RemoteError("h2", "unlock", 1, "the deploy holding the lock is alive")

    monkeypatch.setattr(orchestrate, "unlock", refused)
    code, out, err = fleet("unlock", ROUTER, "-i", inv, "--limit", "h1:h2")
    assert code == 1 and err.startswith("fleet: error: h2") and len(err.splitlines()) == 1, err
    assert out.splitlines() == [
        "RECAP sb-rr: unlock: locks per host",
        "h1 : removed=0  unchanged=0  unknown=1",
        "h2 : removed=0  unchanged=0  unknown=1",
        "exit 1: a host refused or did not answer (error below); the others' locks may be gone: run it again",
    ]
    assert [(r.command[1], r.exit_code, len(r.outcomes)) for r in history.read()] == [("unlock", 1, 2)]


def test_weights_stage_ends_with_its_recap_and_is_recorded(
        inv: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from launcher.cli import weights

    report = Report(models=(Manifest(model="m", revision="r1", files=()),), hosts=(
        HostResult(host="h1", status="ok", files=3, bytes=300), HostResult(host="h2", status="ok"),
        HostResult(host="h3", status="failed", error="rsync: exit 23"),
        HostResult(host="h4", status="unreachable", error="unreachable: no answer"),
    ))  # fmt: skip
    monkeypatch.setattr(weights, "stage", lambda *a, **k: report)
    code, out, _ = fleet("weights", "stage", ROUTER, "-i", inv, "--source", str(tmp_path), "-q")
    assert code == 1
    assert out.splitlines()[-6:] == [
        "RECAP sb-rr: weights stage: copies per host",
        "h1 : staged=1  unchanged=0  failed=0  unreachable=0",
        "h2 : staged=0  unchanged=1  failed=0  unreachable=0",
        "h3 : staged=0  unchanged=0  failed=1  unreachable=0",
        "h4 : staged=0  unchanged=0  failed=0  unreachable=1",
        "exit 1: some hosts have no matching copy (errors above); the others' copies are complete",
    ]
    (run,) = history.read()
    assert (run.command[1:3], run.deployment, run.exit_code) == (("weights", "stage"), "sb-rr", 1)
    assert [(o.host, o.unit, o.outcome) for o in run.outcomes] == [
        ("h1", "weights", "staged"), ("h2", "weights", "unchanged"), ("h3", "weights", "failed"),
        ("h4", "weights", "unreachable")]  # fmt: skip
    code, out, _ = fleet("weights", "stage", ROUTER, "-i", inv, "--source", str(tmp_path), "--json")
    assert json.loads(out)["recap"]["counts"]["h1"] == {"staged": 1, "unchanged": 0, "failed": 0, "unreachable": 0}


def test_unlock_names_what_it_removed_on_a_host() -> None:
    from launcher.cli.deploy import unlocked_text
    from launcher.deploy.orchestrate import Unlocked

    assert [unlocked_text(u) for u in (Unlocked(), Unlocked(lock="a@c pid=1"), Unlocked(claim="b@c pid=2"))] == [
        "not locked", "removed lock of a@c pid=1", "removed preflight claim of b@c pid=2"]  # fmt: skip
