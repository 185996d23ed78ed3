"""The CLI explains itself: grouped help with exit codes, an example per command that parses,
short help never cut, no literal markup, usage errors in fleet's one-line format, and shell
completion of recipe ids, playbook files, hosts and groups."""

from __future__ import annotations

import importlib
import os
import pkgutil
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import click
import pytest
from click.testing import CliRunner

import launcher.cli
from launcher.cli import SECTIONS, cli
from launcher.cli.helptext import EXAMPLES

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "cli" / "help.txt"
MAIN = "from launcher.cli import main; main()"  # the fleet entry point, run as a terminal runs it


def _all_commands() -> Iterator[tuple[str, click.Command]]:
    for mod in pkgutil.iter_modules(launcher.cli.__path__):
        importlib.import_module(f"launcher.cli.{mod.name}")
    ctx = click.Context(cli, info_name="fleet")

    def walk(group: click.Group, prefix: str) -> Iterator[tuple[str, click.Command]]:
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            assert cmd is not None, name
            path = f"{prefix} {name}".strip()
            yield path, cmd
            if isinstance(cmd, click.Group):
                yield from walk(cmd, path)

    yield from walk(cli, "")


def _help(*args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_root_help_is_grouped_with_exit_codes() -> None:
    """The whole of `fleet --help` (tests/golden/cli/help.txt; UPDATE_GOLDEN=1 rewrites it)."""
    text = _help().replace("Usage: cli ", "Usage: fleet ")
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_every_command_is_in_a_section() -> None:
    placed = {n for _, members in SECTIONS for n in members}
    assert [n for n in cli.list_commands(click.Context(cli)) if n not in placed] == []
    assert "\nOther:" not in _help()


def test_every_command_has_an_example_that_parses() -> None:
    paths = dict(_all_commands())
    assert sorted(set(EXAMPLES) - set(paths)) == []  # no example for a command that is gone
    for path, cmd in paths.items():
        assert f"Example:\n    {EXAMPLES[path]}" in _help(*path.split()), path
        if isinstance(cmd, click.Group):
            continue
        example = shlex.split(EXAMPLES[path].split(" && ")[0].removeprefix("eval \"$(").removesuffix(")\""))
        assert example[: 1 + len(path.split())] == ["fleet", *path.split()], path
        with cmd.make_context(path, example[1 + len(path.split()) :], parent=click.Context(cli)) as ctx:
            assert ctx.command is cmd


def test_no_literal_markup_and_no_cut_short_help() -> None:
    for path, cmd in _all_commands():
        text = _help(*path.split())
        assert "``" not in text, path
        assert "..." not in (cmd.short_help or ""), path
        assert not (cmd.short_help or "").endswith(("(", ",", ";", ":")), path


@pytest.mark.parametrize(
    "args, message",
    [
        (["bogus"], "fleet: error: no such command 'bogus' (see 'fleet --help')"),
        (["up"], "fleet: error: missing argument 'PLAYBOOK' (see 'fleet up --help')"),
        (["up", "x.yaml", "-i", "inv", "--nope"], "fleet: error: no such option '--nope' (see 'fleet up --help')"),
        (["recipes", "show"], "fleet: error: missing argument 'RECIPE_ID' (see 'fleet recipes show --help')"),
        (["up", "x.yaml", "-i", "inv", "--forks", "0"],
         "fleet: error: invalid value for '--forks': 0 is not in the range 1<=x<=1024 (see 'fleet up --help')"),
        (["completion", "tcsh"],
         "fleet: error: invalid value for '{bash|zsh|fish}': 'tcsh' is not one of 'bash', 'zsh', 'fish' "
         "(see 'fleet completion --help')"),
        (["plan", "nope.yaml", "-i", "inventories/example.yaml"], "fleet: error: nope.yaml: no such file"),
    ],
)
def test_usage_errors_and_fleet_errors_share_one_format(args: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, "-c", MAIN, *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "FLEET_CONFIG": "", "FLEET_INVENTORY": ""}, check=False)  # fmt: skip
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, message + "\n", "")


# ------------------------------------------------------------------------------ completion


def _complete(words: str) -> list[str]:
    env = {**os.environ, "_FLEET_COMPLETE": "bash_complete", "COMP_WORDS": words,
           "COMP_CWORD": str(len(shlex.split(words)) - (0 if words.endswith(" ") else 1))}  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", MAIN], capture_output=True, text=True, cwd=REPO,
                          env=env, check=True)  # fmt: skip
    return [line.split(",", 1)[1] for line in proc.stdout.splitlines() if line]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_the_shells_script(shell: str) -> None:
    result = CliRunner().invoke(cli, ["completion", shell])
    assert result.exit_code == 0
    assert "_FLEET_COMPLETE" in result.stdout and f"{shell}_complete" in result.stdout


def test_completion_script_loads_in_bash() -> None:
    script = CliRunner().invoke(cli, ["completion", "bash"]).stdout
    proc = subprocess.run(["bash", "-c", f"{script}\ncomplete -p fleet"], capture_output=True, text=True, check=False)
    assert proc.stdout.strip() == "complete -o nosort -F _fleet_completion fleet", proc.stderr


def test_completes_recipe_ids_and_playbooks() -> None:
    assert _complete("fleet recipes show glm/sglang-pd-tp8pp2ep8") == [
        "glm/sglang-pd-tp8pp2ep8-6000d-hicache", "glm/sglang-pd-tp8pp2ep8-6000d",
    ]  # fmt: skip
    assert "playbooks/sandbox/" in _complete("fleet up playbooks/")
    assert _complete("fleet plan playbooks/sandbox/pd-2p1d") == ["playbooks/sandbox/pd-2p1d.yaml"]
    assert "qwen/" not in " ".join(_complete("fleet up playbooks/sandbox/pd"))  # a playbook, not a recipe id


def test_completes_hosts_and_groups_from_the_inventory() -> None:
    assert _complete("fleet status pb.yaml -i inventories/example.yaml --limit rtx6000d_") == [
        "rtx6000d_rack1", "rtx6000d_rack2",
    ]  # fmt: skip
    assert _complete("fleet run -i inventories/example.yaml rtx6000d:!rtx-0")[:2] == [
        "rtx6000d:!rtx-01", "rtx6000d:!rtx-02",
    ]  # fmt: skip
    assert _complete("fleet run rtx") == []  # no inventory named anywhere: nothing to offer, no error


# Commands that only read and print a result: each takes --json.
READ_COMMANDS = ("status", "logs", "facts", "plan", "preflight", "inventory list", "recipes list", "recipes show",
                 "recipes fit", "top", "bench list", "bench compare", "sandbox status", "weights verify",
                 "history")  # fmt: skip


# Commands whose progress output is long: each takes -q.
LONG_OUTPUT = ("up", "down", "restart", "rollback", "preflight", "weights stage")


def test_flags_mean_the_same_on_every_command() -> None:
    commands = dict(_all_commands())
    for path, cmd in commands.items():
        for p in cmd.params:
            if not isinstance(p, click.Option):
                continue
            if "-i" in p.opts:
                assert (p.name, p.metavar) == ("inventory_path", "INV"), path
            if "-o" in p.opts:
                assert "--output" in p.opts, path
            if "-q" in p.opts:
                assert "--quiet" in p.opts, path
            if "--json" in p.opts:
                assert p.is_flag, path
    for paths, flag in ((READ_COMMANDS, "--json"), (LONG_OUTPUT, "-q")):
        for path in paths:
            assert any(flag in p.opts for p in commands[path].params if isinstance(p, click.Option)), (path, flag)


def test_every_command_that_connects_takes_limit() -> None:
    """Issue #26 item 1: a command that talks to hosts (it takes --known-hosts) takes --limit; bench's
    is hidden and refused with its reason (tests/unit/test_cli_scope.py)."""
    without = [path for path, cmd in _all_commands()
               if any("--known-hosts" in p.opts for p in cmd.params if isinstance(p, click.Option))
               and not any("--limit" in p.opts for p in cmd.params if isinstance(p, click.Option))]  # fmt: skip
    assert without == []
