"""The ``fleet`` command line: the only place that imports click, prints errors and picks exit
codes.  Each subcommand family lives in its own module and registers itself on :data:`cli`."""

from __future__ import annotations

import importlib
import os
import signal
import sys
from types import FrameType
from typing import Any

import click

from launcher.errors import ExitCode, FleetError


# Command name -> the module that defines it (and registers it on ``cli`` when imported).
# Imported on demand so `fleet up` does not pay for the sandbox, rolling or recipe commands.
_COMMANDS: dict[str, str] = {
    "recipes": "recipes", "inventory": "inventory", "plan": "plan", "render": "render", "run": "run",
    "sandbox": "sandbox", "up": "deploy", "down": "deploy", "unlock": "deploy", "status": "deploy",
    "logs": "deploy", "demo": "deploy", "facts": "preflight", "preflight": "preflight",
    "collect": "preflight", "restart": "rolling", "rollback": "rolling", "weights": "weights",
    "metrics": "metrics", "top": "top", "bench": "bench",
}  # fmt: skip


class _Group(click.Group):
    """Turns library errors into one line on stderr and the right exit code; never a traceback."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(_COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = _COMMANDS.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            importlib.import_module(f"launcher.cli.{module}")
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except FleetError as err:
            click.echo(f"fleet: error: {err}", err=True)
            sys.exit(int(err.exit_code))
        except KeyboardInterrupt:
            if _ended_by is None:
                click.echo("fleet: interrupted", err=True)
                sys.exit(int(ExitCode.INTERRUPTED))
            click.echo(f"fleet: terminated by {signal.Signals(_ended_by).name}", err=True)
            sys.exit(128 + _ended_by)


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


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="fleet", prog_name="fleet", message="%(prog)s %(version)s")
def cli() -> None:
    """Bring SGLang and vLLM deployments up across bare-metal hosts over SSH."""


def main() -> None:
    signal.signal(signal.SIGTERM, _end)
    signal.signal(signal.SIGHUP, _end)
    cli(prog_name="fleet")
