"""The ``fleet`` command line: the only place that imports click, prints errors and picks exit
codes.  Each subcommand family lives in its own module and registers itself on :data:`cli`."""

from __future__ import annotations

import sys
from typing import Any

import click

from launcher.errors import ExitCode, FleetError


class _Group(click.Group):
    """Turns library errors into one line on stderr and the right exit code; never a traceback."""

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


def _register() -> None:
    # Imported for their side effect of adding commands to `cli`; kept in one list so the
    # command set is visible in one place.
    import importlib

    for mod in ("recipes", "inventory", "plan", "render", "run", "sandbox", "deploy", "preflight", "rolling"):
        try:
            importlib.import_module(f"launcher.cli.{mod}")
        except ModuleNotFoundError as err:
            if err.name != f"launcher.cli.{mod}":
                raise


_register()


def main() -> None:
    cli(prog_name="fleet")
