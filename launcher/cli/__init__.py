"""The ``fleet`` command line: the only place that imports click, prints errors and picks exit
codes.  Each subcommand family lives in its own module and registers itself on :data:`cli`."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from launcher.errors import ExitCode, FleetError


# Command name -> the module that defines it (and registers it on ``cli`` when imported).
# Imported on demand so `fleet up` does not pay for the sandbox, rolling or recipe commands.
_COMMANDS: dict[str, str] = {
    "recipes": "recipes", "inventory": "inventory", "plan": "plan", "render": "render", "run": "run",
    "sandbox": "sandbox", "up": "deploy", "down": "deploy", "unlock": "deploy", "status": "deploy",
    "logs": "deploy", "demo": "deploy", "facts": "preflight", "preflight": "preflight",
    "collect": "preflight", "restart": "rolling", "rollback": "rolling",
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
            click.echo("fleet: interrupted", err=True)
            sys.exit(int(ExitCode.INTERRUPTED))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Bring SGLang and vLLM deployments up across bare-metal hosts over SSH."""


def main() -> None:
    cli(prog_name="fleet")
