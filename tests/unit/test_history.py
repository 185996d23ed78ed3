"""The local record of runs that changed hosts and ``fleet history`` (issue #26 item 9)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher import history
from launcher.cli import cli
from launcher.cli.history import remember
from launcher.errors import InputError
from tests.config.conftest import REPO

PB = REPO / "playbooks" / "pd-glm-2p1d-6000d.yaml"


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FLEET_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def test_a_run_is_one_line_0600_with_the_playbook_digest(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["fleet", "up", str(PB), "-i", "inv.yaml"])
    remember(("2026-12-02T06:00:00Z", 0.0), str(PB), "glm-pd", ["rtx-01", "rtx-02"],
             [("rtx-01", "fleet-glm-pd-prefill0-r0", "healthy"), ("rtx-02", "fleet-glm-pd-prefill0-r1", "failed")], 3)
    remember(("2026-12-02T06:05:00Z", 0.0), "qwen/vllm-single-a100", "qwen", ["gpu-01"], [], 0)
    path = state / "history.jsonl"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    assert first["command"] == ["fleet", "up", str(PB), "-i", "inv.yaml"] and first["exit_code"] == 3
    assert first["playbook_sha256"] == __import__("hashlib").sha256(PB.read_bytes()).hexdigest()
    assert second["playbook_sha256"] is None  # a recipe id has no file
    runs = history.read()
    assert [r.deployment for r in runs] == ["glm-pd", "qwen"]
    assert history.counts(runs[0]) == {"healthy": 1, "failed": 1}


def test_fleet_history_lists_the_newest_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["fleet", "down", "x.yaml"])
    for n, dep in enumerate(("a", "b", "a")):
        remember((f"2026-12-02T06:0{n}:00Z", 0.0), "x.yaml", dep, ["h1"], [("h1", "u", "removed")], 0)
    result = CliRunner().invoke(cli, ["history", "--deployment", "a", "-n", "1", "--json"])
    assert result.exit_code == 0
    assert [r["started"] for r in json.loads(result.stdout)] == ["2026-12-02T06:02:00Z"]
    table = CliRunner().invoke(cli, ["history"]).stdout.splitlines()
    assert table[0].split() == ["started", "deployment", "command", "hosts", "outcomes", "took", "exit", "playbook",
                                "sha256"]  # fmt: skip
    assert len(table) == 4 and "fleet down x.yaml" in table[1] and "removed 1" in table[1]


def test_nothing_recorded_yet(state: Path) -> None:
    result = CliRunner().invoke(cli, ["history"])
    assert (result.exit_code, result.stdout, result.stderr) == (
        0, "", f"fleet: history: no runs recorded in {state / 'history.jsonl'}\n")


def test_a_line_that_is_not_a_record_names_file_and_line(state: Path) -> None:
    state.mkdir()
    (state / "history.jsonl").write_text('{"started": "x"}\n')
    with pytest.raises(InputError) as caught:
        history.read()
    assert str(caught.value) == f"{state / 'history.jsonl'}:1:1: not a fleet history record (no 'command')"
    (state / "history.jsonl").write_text("{not json\n")
    with pytest.raises(InputError) as caught:
        history.read()
    assert str(caught.value) == (f"{state / 'history.jsonl'}:1:1: not a fleet history record (Expecting property "
                                 "name enclosed in double quotes: line 1 column 2 (char 1))")


def test_diff_without_check_is_refused() -> None:
    result = CliRunner().invoke(cli, ["up", str(PB), "-i", str(REPO / "inventories" / "example.yaml"), "--diff"])
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", (
        "fleet: error: --diff shows what --check would change: give --check too (fleet up never deploys and diffs in "
        "one run)\n"))  # fmt: skip
