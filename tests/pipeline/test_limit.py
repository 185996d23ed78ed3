"""``--limit`` on every command that touches hosts: one pattern grammar, one error for a pattern
that matches nothing (with did-you-mean), one for a pattern that matches none of the command's
hosts, and a refused split group where groups restart whole -- all before any host is asked
(the example inventory's hosts do not exist: a command that connected would fail otherwise)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from launcher.cli import cli
from launcher.limit import limit_hosts, refuse_split
from launcher.config.inventory import load_inventory
from launcher.errors import UsageError
from tests.config.conftest import REPO

PB = str(REPO / "playbooks" / "pd-glm-2p1d-6000d.yaml")
INV = str(REPO / "inventories" / "example.yaml")

# Every command that talks to a deployment's hosts, with what it needs besides PLAYBOOK -i INV.
COMMANDS = {
    "up": (), "down": (), "status": (), "logs": (), "unlock": (), "preflight": (), "restart": (), "rollback": (),
    "top": ("--once",), "collect": ("-o", "/nonexistent/x.tar.gz"), "weights stage": ("--source", "/nonexistent"),
    "weights verify": (), "weights warm": (), "metrics targets": ("-o", "/nonexistent/x.json"), "watch": ("--once",),
}  # fmt: skip


def run(command: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [*command.split(), PB, "-i", INV, *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_pattern_matching_nothing_is_one_line_with_did_you_mean(command: str) -> None:
    assert run(command, *COMMANDS[command], "--limit", "rtx-1") == (2, "", (
        f"fleet: error: --limit: pattern 'rtx-1': 'rtx-1' matches no host or group in {INV} "
        "(did you mean 'rtx-01'?)\n"))  # fmt: skip


@pytest.mark.parametrize("command", ["up", "status", "logs", "preflight", "collect", "metrics targets", "watch"])
def test_pattern_matching_none_of_the_deployments_hosts(command: str) -> None:
    assert run(command, *COMMANDS[command], "--limit", "rtx-07") == (2, "", (
        "fleet: error: --limit 'rtx-07' matches none of the hosts of deployment glm-pd (ctl-01, rtx-01, rtx-02, "
        "rtx-03, rtx-04, rtx-05, rtx-06)\n"))  # fmt: skip


@pytest.mark.parametrize("command", ["up", "down", "preflight", "restart", "watch"])
def test_split_group_is_refused_where_groups_restart_whole(command: str) -> None:
    assert run(command, "--limit", "rtx-01") == (2, "", (
        "fleet: error: --limit splits group 'glm-pd/prefill0': it also runs on rtx-02; include those hosts\n"))


def test_limit_hosts_keeps_inventory_order_and_the_grammar() -> None:
    inv = load_inventory(INV)
    claimed = [h for h in inv.hosts if h.name in ("rtx-05", "rtx-01", "rtx-02", "ctl-01")]
    kept = limit_hosts(inv, claimed, "rtx6000d:!rtx-02", what="x")
    assert [h.name for h in kept] == ["rtx-01", "rtx-05"]


def test_refuse_split_allows_whole_groups() -> None:
    refuse_split([("g1", "a"), ("g1", "b"), ("g2", "c")], {"a", "b"})
    with pytest.raises(UsageError):
        refuse_split([("g1", "a"), ("g1", "b")], {"a"})
