"""``fleet completion bash|zsh|fish``: the shell's completion script.

The script calls fleet back (``_FLEET_COMPLETE=<shell>_complete fleet ...``, click's protocol);
what it completes is :mod:`launcher.cli.complete`'s.
"""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

from launcher.cli import cli

SHELLS = ("bash", "zsh", "fish")
ENV_VAR = "_FLEET_COMPLETE"


@cli.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
def completion_command(shell: str) -> None:
    """Print the shell completion script for SHELL (bash, zsh or fish).

    It completes commands, options, recipe ids, playbook files, and host names and groups of
    the -i inventory.  Load it in the current shell with eval "$(fleet completion bash)", or
    install it: bash: fleet completion bash > /etc/bash_completion.d/fleet; zsh: fleet
    completion zsh > "${fpath[1]}/_fleet"; fish: fleet completion fish >
    ~/.config/fish/completions/fleet.fish.
    """
    cls = get_completion_class(shell)
    assert cls is not None  # click ships all three
    click.echo(cls(cli, {}, "fleet", ENV_VAR).source())
