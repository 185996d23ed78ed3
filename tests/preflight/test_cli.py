"""The CLI layer of facts/preflight/collect without hosts: exact errors for bad input, what is
printed where for a report, and the gate ``fleet up`` calls."""

from __future__ import annotations

from types import SimpleNamespace

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from launcher.cli import cli
from launcher.cli import preflight as cli_preflight
from launcher.pipeline import Inputs
from launcher.preflight.rules.base import Check
from launcher.preflight.run import PreflightReport

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = str(REPO / "inventories" / "example.yaml")


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["preflight", "nosuch.yaml", "-i", EXAMPLE], "fleet: error: nosuch.yaml: no such file\n"),
        (["facts", "-i", EXAMPLE, "--limit", "nosuch*"],
         f"fleet: error: --limit: pattern 'nosuch*': 'nosuch*' matches no host or group in {EXAMPLE}\n"),
        (["collect", "nosuch.yaml", "-i", EXAMPLE, "-o", "x.tar.gz"], "fleet: error: nosuch.yaml: no such file\n"),
        (["facts", "-i", "/nonexistent.yaml"], "fleet: error: /nonexistent.yaml: no such inventory file or directory\n"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], error: str) -> None:
    result = run(*args)
    assert (result.exit_code, result.stderr) == (2, error)


def test_collect_needs_an_output() -> None:
    result = run("collect", "x.yaml", "-i", EXAMPLE)
    assert (result.exit_code, result.stderr) == (2, "fleet: error: missing option '-o' / '--output' (see 'fleet collect --help')\n")


CHECKS = (
    Check(host="h1", unit="", name="driver", status="pass", message="driver 550.54.15"),
    Check(host="h2", unit="u1", name="weights", status="fail", message="weights missing: /m", fix="stage them"),
    Check(host="h2", unit="u1", name="rdma-in-container", status="warn", message="dropped", fix="keep --device"),
)


def report(checks: tuple[Check, ...] = CHECKS) -> PreflightReport:
    return PreflightReport(deployment="x", recipe="fam/v", plan=None, facts={}, checks=checks)


def test_print_table_then_problems_failures_first(capsys: pytest.CaptureFixture[str]) -> None:
    cli_preflight.print_preflight(report())
    out, err = capsys.readouterr()
    assert "preflight x (fam/v)" in out and "weights missing: /m" in out and "driver 550.54.15" in out
    assert err.splitlines() == [
        "fleet: preflight: fail: h2/u1: weights: weights missing: /m (fix: stage them)",
        "fleet: preflight: warn: h2/u1: rdma-in-container: dropped (fix: keep --device)",
        "fleet: preflight x: 1 pass, 1 warn, 1 fail",
    ]


def test_print_json(capsys: pytest.CaptureFixture[str]) -> None:
    cli_preflight.print_preflight(report(), as_json=True)
    doc = json.loads(capsys.readouterr().out)
    assert doc["counts"] == {"pass": 1, "warn": 1, "fail": 1} and doc["exit_code"] == 1 and doc["units"] == []
    assert doc["checks"][1] == {"status": "fail", "host": "h2", "unit": "u1", "check": "weights",
                                "message": "weights missing: /m", "fix": "stage them"}


def test_gate_exits_1_before_anything_and_passes_otherwise(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[dict[str, Any]] = []
    inputs = Inputs(inventory=SimpleNamespace(path="inv dir/prod.yaml"), catalog=object(),  # type: ignore[arg-type]
                    playbook=SimpleNamespace(path="pb.yaml"))

    def fake(inventory: object, catalog: object, playbook: object, connector: object, **kw: Any) -> PreflightReport:
        calls.append({"inputs": (inventory, catalog, playbook), **kw})
        return current

    monkeypatch.setattr(cli_preflight, "run_preflight", fake)
    current = report()
    with pytest.raises(SystemExit) as stop:
        cli_preflight.gate(inputs, object(), forks=4, quiet=True)  # type: ignore[arg-type]
    assert stop.value.code == 1
    out, err = capsys.readouterr()
    assert out == ""  # problems only: no table on stdout (fleet up --json stays clean)
    assert err.splitlines()[-1] == ("fleet: preflight failed: nothing was started (fleet preflight pb.yaml -i "
                                    "'inv dir/prod.yaml' shows every check; --skip-preflight overrides)")
    assert calls[0]["level"] == "cheap" and calls[0]["forks"] == 4
    assert calls[0]["inputs"] == (inputs.inventory, inputs.catalog, inputs.playbook)
    current = report(CHECKS[:1] + CHECKS[2:])
    assert cli_preflight.gate(inputs, object(), quiet=True) is current  # type: ignore[arg-type]


def test_a_warning_identical_on_many_hosts_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """The demo printed the same two warnings for six hosts (twelve lines): one line each now."""
    shm = "/dev/shm is 23.5 GiB, units want 32.0 GiB"
    same = tuple(Check(host=f"h{n}", unit="", name="/dev/shm", status="warn", message=shm, fix="remount it")
                 for n in range(9, 19))  # fmt: skip
    other = Check(host="h9", unit="", name="/dev/shm", status="warn", message="/dev/shm is 1 GiB, units want 32.0 GiB")
    cli_preflight.print_preflight(report((*same, other, *CHECKS)), problems_only=True)
    assert capsys.readouterr().err.splitlines() == [
        "fleet: preflight: fail: h2/u1: weights: weights missing: /m (fix: stage them)",
        f"fleet: preflight: warn: h9, h10, h11, h12, h13, h14, h15, h16 and 2 more: /dev/shm: {shm} (fix: remount it)",
        "fleet: preflight: warn: h9: /dev/shm: /dev/shm is 1 GiB, units want 32.0 GiB",
        "fleet: preflight: warn: h2/u1: rdma-in-container: dropped (fix: keep --device)",
        "fleet: preflight x: 1 pass, 12 warn, 1 fail",
    ]
