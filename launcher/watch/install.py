"""``fleet watch --install``: the systemd service that runs the watch on the control host.

Contract: pure.  The service runs the same ``fleet watch`` command line (absolute paths, no
``--install``) as the given user, is restarted by systemd when it fails (after
``RESTART_SEC``), and gets SIGTERM on stop -- on which the watch finishes or rolls back the
action under way (``TIMEOUT_STOP_S`` covers a recreation's health gate) and exits 143, which
counts as a clean stop.
"""

from __future__ import annotations

from typing import Sequence

from launcher.quoting import systemd_exec, systemd_value

RESTART_SEC = 10
TIMEOUT_STOP_S = 900  # a recreation under way: stop grace of its ranks + health gate


def unit_name(deployments: Sequence[str]) -> str:
    return f"fleet-watch-{'+'.join(deployments)}.service"


def unit_text(argv: Sequence[str], *, user: str, deployments: Sequence[str], home: str) -> str:
    """The ``.service`` file; ``argv``: the watch's command line, argv[0] absolute."""
    return (
        "# fleet watch: keeps deployments alive (docs/watch.md).  Written by fleet watch --install.\n"
        "[Unit]\n"
        f"Description={systemd_value('fleet watch ' + ', '.join(deployments))}\n"
        "After=network-online.target\n"
        "Wants=network-online.target\n"
        "\n"
        "[Service]\n"
        "Type=exec\n"
        f"User={systemd_value(user)}\n"
        # ~/.ssh (keys, known_hosts, config) is the user's: the watch connects as the operator does.
        f"Environment={systemd_exec_env('HOME', home)}\n"
        f"ExecStart={systemd_exec(argv)}\n"
        "Restart=on-failure\n"
        f"RestartSec={RESTART_SEC}\n"
        "KillMode=mixed\n"
        "SuccessExitStatus=143\n"
        f"TimeoutStopSec={TIMEOUT_STOP_S}\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def systemd_exec_env(name: str, value: str) -> str:
    """One ``Environment=`` assignment, quoted as systemd reads it."""
    return '"' + f"{name}={value}".replace("%", "%%").replace("\\", "\\\\").replace('"', '\\"') + '"'
