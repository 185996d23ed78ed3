"""The ``fleet`` command line: the only place that imports click, prints errors and picks exit
codes.  Each subcommand family lives in its own module and registers itself on :data:`cli`."""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
from types import FrameType
from typing import Any, Sequence

import click

from launcher.errors import ExitCode, FleetError


# Command name -> the module that defines it (and registers it on ``cli`` when imported).
# Imported on demand so `fleet up` does not pay for the sandbox, rolling or recipe commands.
_COMMANDS: dict[str, str] = {
    "recipes": "recipes", "inventory": "inventory", "plan": "plan", "render": "render", "run": "run",
    "sandbox": "sandbox", "up": "deploy", "down": "deploy", "unlock": "deploy", "status": "deploy",
    "logs": "deploy", "demo": "deploy", "facts": "preflight", "preflight": "preflight",
    "collect": "preflight", "restart": "rolling", "rollback": "rolling", "weights": "weights",
    "metrics": "metrics", "top": "top", "bench": "bench", "export": "export", "watch": "watch",
    "completion": "completion", "history": "history",
}  # fmt: skip


# `fleet --help` lists the commands by what an operator is doing; a command in no section is
# listed under "Other" (tests/unit/test_cli_help.py fails then).
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Catalog", ("recipes", "inventory")),
    ("Plan", ("plan", "render", "facts", "preflight")),
    ("Deploy", ("up", "down", "weights", "unlock", "export")),
    ("Operate", ("restart", "rollback", "run", "watch")),
    ("Observe", ("status", "logs", "top", "metrics", "collect", "bench", "history")),
    ("Sandbox", ("sandbox", "demo")),
    ("Shell", ("completion",)),
)

EXIT_CODES = (
    (0, "success"),
    (1, "a step on a host failed"),
    (2, "bad input: an inventory, recipe, playbook, config file, flag or argument"),
    (3, "partial: some hosts or groups failed, the others succeeded"),
    (129, "SIGHUP (the terminal went away; cleaned up as for Ctrl-C)"),
    (130, "interrupted (Ctrl-C): what was not healthy yet was torn down"),
    (143, "SIGTERM (a job runner cancelled; cleaned up as for Ctrl-C)"),
)


class _Group(click.Group):
    """Turns library errors and usage errors into one line on stderr (``fleet: error: ...``)
    and the right exit code; never a traceback."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(_COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = _COMMANDS.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            importlib.import_module(f"launcher.cli.{module}")
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None:
            from launcher.cli.helptext import attach

            attach(cmd, cmd_name)
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        placed = {n for _, members in SECTIONS for n in members}
        for title, members in (*SECTIONS, ("Other", tuple(n for n in names if n not in placed))):
            rows = []
            for name in members:
                cmd = self.get_command(ctx, name) if name in names else None
                if cmd is not None and not cmd.hidden:
                    rows.append((name, cmd.short_help or ""))
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Exit codes"):
            formatter.write_dl([(str(code), what) for code, what in EXIT_CODES])
        formatter.write_paragraph()
        formatter.write_text("Defaults: -i, --known-hosts, --forks, --recipes and --vault-password-file come from the "
                             "command line, else FLEET_INVENTORY, FLEET_KNOWN_HOSTS, FLEET_FORKS, FLEET_RECIPES, "
                             "FLEET_VAULT_PASSWORD_FILE, else the fleet.cfg in force (docs/configuration.md).")

    def main(
        self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
        standalone_mode: bool = True, **extra: Any,
    ) -> Any:  # fmt: skip
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as err:
            below = err.ctx.command_path.split(" ")[1:] if err.ctx is not None else []
            where = " ".join(("fleet", *below))
            message = _lower(err.format_message()).rstrip(".")
            click.echo(f"fleet: error: {message} (see '{where} --help')", err=True)
            sys.exit(int(ExitCode.BAD_INPUT))
        except click.ClickException as err:
            click.echo(f"fleet: error: {_lower(err.format_message())}", err=True)
            sys.exit(err.exit_code)
        except click.exceptions.Abort:
            click.echo("fleet: interrupted", err=True)
            sys.exit(int(ExitCode.INTERRUPTED))
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except FleetError as err:
            click.echo(f"fleet: error: {err}", err=True)
            if err.debug and debug_enabled():
                click.echo(err.debug, err=True)
            sys.exit(int(err.exit_code))
        except KeyboardInterrupt:
            if _ended_by is None:
                click.echo("fleet: interrupted", err=True)
                sys.exit(int(ExitCode.INTERRUPTED))
            click.echo(f"fleet: terminated by {signal.Signals(_ended_by).name}", err=True)
            sys.exit(128 + _ended_by)


def _lower(message: str) -> str:
    """Click's messages start with a capital ("No such option"); fleet's lines do not."""
    return message[:1].lower() + message[1:] if message[:2] != message[:2].upper() else message


def debug_enabled() -> bool:
    """``--debug`` was given (it sets ``FLEET_DEBUG=1``) or ``FLEET_DEBUG`` is set (not "0"):
    errors then show what their one line leaves out (:attr:`FleetError.debug`)."""
    return os.environ.get("FLEET_DEBUG", "") not in ("", "0")


# SIGTERM (a job runner cancelling, `timeout`, systemd) and SIGHUP (the operator's SSH session
# to the control host dropped) end fleet the way Ctrl-C does -- locks released, what is not
# healthy torn down, a rolling batch put back in service -- instead of killing it mid-step.
# A second signal of any of the three abandons that clean-up, as a second Ctrl-C does.
_ended_by: int | None = None


def _end(signum: int, frame: FrameType | None) -> None:
    global _ended_by
    _ended_by = signum
    if signum == signal.SIGHUP:
        # The terminal is gone: writing progress there would fail the clean-up.
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)
    raise KeyboardInterrupt


class _Verbosity(logging.Handler):
    """``-v``: SSH connections and commands with their durations; ``--debug``: also each
    command's whole text and what an error's one line leaves out."""

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(f"fleet: {record.levelname.lower()}: {record.getMessage()}", err=True)


class _Warnings(logging.Handler):
    """The plan's warnings (logger ``fleet.plan``), each printed once per command."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.said: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message not in self.said:
            self.said.add(message)
            click.echo(f"fleet: warning: {message}", err=True)


def _attach(ctx: click.Context, name: str, handler: logging.Handler, level: int | None = None) -> None:
    """``handler`` on logger ``name`` (alone: not passed up) for this command; put back when it
    ends (tests run many commands in one process)."""
    log = logging.getLogger(name)
    before = log.level, log.propagate
    log.addHandler(handler)
    log.propagate = False
    if level is not None:
        log.setLevel(level)

    def restore() -> None:
        log.removeHandler(handler)
        log.level, log.propagate = before

    ctx.call_on_close(restore)


def _verbosity(ctx: click.Context, verbose: int, debug: bool) -> None:
    if debug or verbose > 1:
        _set_env(ctx, "FLEET_DEBUG", "1")  # debug_enabled(), for errors' debug text
    if debug or verbose:
        _attach(ctx, "fleet.ssh", _Verbosity(), logging.DEBUG if debug or verbose > 1 else logging.INFO)


def _set_env(ctx: click.Context, name: str, value: str) -> None:
    """``os.environ[name] = value`` for this command (put back when it ends: tests run many)."""
    before = os.environ.get(name)
    os.environ[name] = value

    def restore() -> None:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before

    ctx.call_on_close(restore)


def _recipes(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> None:
    # The command line over FLEET_RECIPES over the config file: launcher/config/recipes.py reads
    # the environment, so the command line's value goes there for this command.
    if value:
        _set_env(ctx, "FLEET_RECIPES", ",".join(value))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="fleet", prog_name="fleet", message="%(prog)s %(version)s")
@click.option("-v", "--verbose", count=True,
              help="Show each SSH connection and command with its duration (-vv: as --debug).")
@click.option("--debug", is_flag=True,
              help="As -v, plus each command's whole script and what an error's one line leaves out.")
@click.option("--recipes", "recipe_dirs", multiple=True, metavar="DIR", expose_value=False, callback=_recipes,
              is_eager=True, type=click.Path(exists=True, file_okay=False),
              help="A recipe directory of your own (<family>/<variant>.yaml), layered over the built-in "
                   "catalog; repeatable, later over earlier [env FLEET_RECIPES].")  # fmt: skip
@click.pass_context
def cli(ctx: click.Context, verbose: int, debug: bool) -> None:
    """Bring SGLang and vLLM deployments up across bare-metal hosts over SSH.

    Every command takes -h; each command's help ends with an example.  Commands that read
    hosts take -i INV (an Ansible inventory), --json where they print a result, and
    --limit PATTERN where they act on hosts.
    """
    _attach(ctx, "fleet.plan", _Warnings())
    _verbosity(ctx, verbose, debug)


def main() -> None:
    signal.signal(signal.SIGTERM, _end)
    signal.signal(signal.SIGHUP, _end)
    cli(prog_name="fleet")
