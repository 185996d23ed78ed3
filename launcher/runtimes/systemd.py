"""The systemd runtime: each unit is a service, ``/etc/systemd/system/<unit>.service``, that runs
the unit's container in the foreground (``docker run --rm``, systemd restarts it) or, for a unit
without a container, the engine itself; liveness from ``systemctl show``, logs from the journal.

What a host needs: ``systemctl``/``journalctl`` (and ``docker`` for units with a container).
"""

from __future__ import annotations

from typing import Sequence

from launcher import hostscripts, quoting
from launcher.errors import PlanError
from launcher.model import STOP_TIMEOUT_S
from launcher.runtimes.base import Liveness, MISSING, RenderedFile, Runtime, State, UnitCommands, UnitRender, state_int
from launcher.runtimes.container import docker_run_args
from launcher.runtimes.templates import template

SYSTEMD_DIR = "/etc/systemd/system"
SYSTEMD_DOCKER = "/usr/bin/docker"  # where docker-ce and docker.io install the client
ENV_PROGRAM = "/usr/bin/env"  # resolves a native unit's relative program on the unit's PATH
MODE_FILE = 0o644
# Removing a unit, gone already or not: stop, and disable, so a reboot does not bring it back.
# (Nothing to hold: `systemctl stop` cancels a pending automatic restart.)
_REMOVE = hostscripts.text("systemd-remove.sh")
_WAIT_SECTION = hostscripts.text("wait-systemd.sh")  # its section of the health wait
_EXITED = "Main process exited"  # systemd's own journal line when a service's process ends


def service(name: str) -> str:
    return f"{name}.service"


def service_path(unit: str) -> str:
    return f"{SYSTEMD_DIR}/{service(unit)}"


class Systemd(Runtime):
    name = "systemd"
    containers = False
    native = True
    liveness_label = "systemctl show"

    def unit_files(self, r: UnitRender) -> list[RenderedFile]:
        unit = r.unit
        ctx = dict(r.context)
        if unit.container is None:
            program = unit.argv[0] if unit.argv else ""
            if not program or program.startswith("-") or "=" in program:
                raise PlanError(None, f"unit {unit.name!r}: a native unit needs a program as argv[0], got {program!r}")
            argv = unit.argv if program.startswith("/") else (ENV_PROGRAM, *unit.argv)
            ctx["exec_start"] = quoting.systemd_exec(argv)
            name = "native.service.j2"
        else:
            run = docker_run_args(unit, detached=False, render_hash=r.render_hash)
            ctx["exec_start"] = quoting.systemd_exec((SYSTEMD_DOCKER, *run))
            ctx["exec_start_pre"] = quoting.systemd_exec((SYSTEMD_DOCKER, "rm", "-f", unit.name))
            ctx["exec_stop"] = quoting.systemd_exec((SYSTEMD_DOCKER, "stop", "-t", str(STOP_TIMEOUT_S), unit.name))
            name = "docker.service.j2"
        return [RenderedFile(path=service_path(unit.name), content=template(name, ctx), mode=MODE_FILE)]

    def commands(self, name: str, unit_dir: str) -> UnitCommands:
        svc = service(name)
        return UnitCommands(
            name=name, runtime=self.name, start=(("systemctl", "daemon-reload"), ("systemctl", "enable", "--now", svc)),
            stop=(("systemctl", "stop", svc),), removal=("sh", "-c", _REMOVE, "sh", svc), drained_removal=(),
        )  # fmt: skip

    def wait_section(self) -> str:
        return _WAIT_SECTION

    def wait_name(self, name: str) -> str:
        return service(name)

    def liveness_argv(self, names: Sequence[str]) -> tuple[str, ...]:
        return (
            "systemctl",
            "show",
            "--property=Id,ActiveState,SubState,ExecMainStatus,NRestarts,LoadState",
            *(service(n) for n in names),
        )

    def parse_liveness(self, names: Sequence[str], out: str) -> dict[str, Liveness]:
        found: dict[str, Liveness] = {}
        for block in out.split("\n\n"):
            props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
            name = props.get("Id", "").removesuffix(".service")
            if not name or props.get("LoadState") == "not-found":
                continue
            found[name] = Liveness(
                state=_state(props.get("ActiveState", ""), props.get("SubState", "")),
                exit_code=state_int(props.get("ExecMainStatus", "")),
                restarts=state_int(props.get("NRestarts", "")) or 0,
            )
        return {n: found.get(n, MISSING) for n in names}

    def logs_argv(self, name: str, lines: int, *, since: str | None = None) -> tuple[str, ...]:
        """``since``: the journal cursor of the last line already shown."""
        args = ["journalctl", "--no-pager", "--output=short-iso", "--show-cursor", "-u", service(name)]
        args += [f"--after-cursor={since}"] if since else ["-n", str(lines)]
        return tuple(args)

    def parse_log(self, out: str) -> list[tuple[str, str]]:
        """``("", text)`` per line, the journal cursor (journalctl's trailer) on the last one."""
        lines: list[tuple[str, str]] = []
        cursor = ""
        for line in out.splitlines():
            if line.startswith("-- cursor: "):
                cursor = line.removeprefix("-- cursor: ").strip()
            elif line != "-- No entries --":
                lines.append(("", line))
        if lines and cursor:
            lines[-1] = (cursor, lines[-1][1])
        return lines

    def died(self, out: str, restarted: bool) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """The lines before systemd's last "Main process exited" line, restarted or not: a real
        journal ends every dead run with systemd's own lines ("Main process exited", "Failed
        with result 'exit-code'"), which name no cause."""
        entries = self.parse_log(out)
        ends = [i for i, (_, text) in enumerate(entries) if _EXITED in text]
        return entries, entries[: ends[-1]] if ends and ends[-1] > 0 else entries


def _state(active: str, sub: str) -> State:
    if active == "active":
        return "running"
    if active == "activating":
        return "restarting" if sub == "auto-restart" else "starting"
    return "exited"


RUNTIME = Systemd()
