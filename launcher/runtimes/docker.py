"""The docker runtime: each unit is a container docker restarts itself (``--restart``), started by
the unit's ``run.sh``; liveness from ``docker inspect``, logs from ``docker logs``.

What a host needs: ``docker`` (and ``sh``/coreutils/``flock``, as every runtime).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from launcher import hostscripts, quoting
from launcher.errors import RemoteError
from launcher.model import STOP_TIMEOUT_S
from launcher.remote import sh
from launcher.runtimes.base import Liveness, MISSING, RenderedFile, Runtime, State, UnitCommands, UnitRender, state_int
from launcher.runtimes.container import docker_run_args
from launcher.runtimes.templates import template

if TYPE_CHECKING:
    from launcher.execute.transport import Result

MODE_SCRIPT = 0o755
DOCKER_FORMAT = "{{.Name}}|{{.State.Status}}|{{.State.ExitCode}}|{{.RestartCount}}"
# Missing names make docker exit 1 after printing the others: the answer is judged by parsing
# (a dead daemon still shows, as its error text), so the exit status is ignored.
_INSPECT = 'f=$1; shift; docker inspect --type container -f "$f" "$@" 2>&1; true'
_DAEMON_DOWN = "Cannot connect to the Docker daemon"
# Removing a unit, gone already or not (stop with a drain grace, remove); holding a multi-node
# group's ranks before any is stopped.  The scripts' headers say why and how.
_REMOVE = hostscripts.text("docker-remove.sh")
_HOLD = hostscripts.text("docker-hold.sh")
_WAIT_SECTION = hostscripts.text("wait-docker.sh")  # its section of the health wait
_LOGS = 'exec "$@" 2>&1'
_FAILED_RUN_LOGS = (
    'docker inspect --type container -f "{{.State.StartedAt}}" "$1" 2>&1; '
    'exec docker logs --timestamps --tail "$2" "$1" 2>&1'
)


class Docker(Runtime):
    name = "docker"
    containers = True
    holds = True  # --restart: a rank whose peer stopped first would come back
    liveness_label = "docker inspect"

    def unit_files(self, r: UnitRender) -> list[RenderedFile]:
        unit = r.unit
        ctx = dict(r.context)
        ctx["run_args"] = quoting.shell_join(docker_run_args(unit, detached=True, render_hash=r.render_hash))
        ctx["stop_args"] = quoting.shell_join(("stop", "-t", str(STOP_TIMEOUT_S), unit.name))
        ctx["rm_args"] = quoting.shell_join(("rm", "-f", unit.name))
        ctx["env_path_q"] = quoting.shell_join((r.env_path,))
        ctx["secrets_path_q"] = quoting.shell_join((r.secrets_path,))
        return [RenderedFile(path=f"{r.unit_dir}/run.sh", content=template("docker-run.sh.j2", ctx), mode=MODE_SCRIPT)]

    def commands(self, name: str, unit_dir: str) -> UnitCommands:
        """``sh run.sh`` / ``docker stop``; removal with SIGTERM and a drain grace, if given."""
        removal = ("sh", "-c", _REMOVE, "sh", name)
        return UnitCommands(
            name=name, runtime=self.name, start=(("sh", f"{unit_dir}/run.sh"),),
            stop=(("docker", "stop", "-t", str(STOP_TIMEOUT_S), name),),
            removal=(*removal, ""), drained_removal=removal,
        )  # fmt: skip

    def hold_argv(self, names: Sequence[str]) -> tuple[str, ...] | None:
        return ("sh", "-c", _HOLD, "sh", *names) if names else None

    def wait_args(self) -> tuple[str, ...]:
        return (DOCKER_FORMAT,)

    def wait_section(self) -> str:
        return _WAIT_SECTION

    def liveness_argv(self, names: Sequence[str]) -> tuple[str, ...]:
        return sh(_INSPECT, DOCKER_FORMAT, *names)

    def parse_liveness(self, names: Sequence[str], out: str) -> dict[str, Liveness]:
        found: dict[str, Liveness] = {}
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) != 4 or not parts[0].startswith("/"):
                continue
            name, status, code, restarts = parts[0][1:], parts[1], parts[2], parts[3]
            found[name] = Liveness(state=_state(status), exit_code=state_int(code), restarts=state_int(restarts) or 0)
        return {n: found.get(n, MISSING) for n in names}

    def answer_problem(self, result: Result, out: str) -> RemoteError | None:
        # docker inspect's own exit status says nothing (see _INSPECT): a dead daemon shows in the text.
        if _DAEMON_DOWN in out:
            return RemoteError(result.host, self.liveness_label, result.exit_status, out.strip().splitlines()[-1])
        return None

    def logs_argv(self, name: str, lines: int, *, since: str | None = None) -> tuple[str, ...]:
        """``since``: docker's timestamp of the last line already shown."""
        args = ["docker", "logs", "--timestamps"]
        args += ["--since", since] if since else ["--tail", str(lines)]
        return sh(_LOGS, *args, name)

    def parse_log(self, out: str) -> list[tuple[str, str]]:
        """``(docker's timestamp, text)`` per line."""
        lines: list[tuple[str, str]] = []
        for line in out.splitlines():
            stamp, sep, text = line.partition(" ")
            lines.append((stamp, text) if sep and stamp[:1].isdigit() else ("", line))
        return lines

    log_start = "1970-01-01T00:00:00Z"  # an empty log is followed from its beginning

    def after(self, lines: list[tuple[str, str]], last: str) -> list[tuple[str, str]]:
        # docker's --since is inclusive: drop what was already shown
        return [(p, x) for p, x in lines if p > last]

    def failure_logs_argv(self, name: str, lines: int) -> tuple[str, ...]:
        """The last log lines, preceded by the start time of the container's current run."""
        return sh(_FAILED_RUN_LOGS, name, str(lines))

    def died(self, out: str, restarted: bool) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """The run that died: the whole log, or, when docker restarted the unit (its log then
        also holds the new run's first lines), the lines stamped before the current run started."""
        first, _, rest = out.partition("\n")
        started = first.strip() if first[:1].isdigit() else ""
        entries = self.parse_log(rest if started else first + "\n" + rest)
        if restarted and started:
            return entries, [(stamp, text) for stamp, text in entries if stamp and _ns(stamp) < _ns(started)] or entries
        return entries, entries


def _state(status: str) -> State:
    if status == "running":
        return "running"
    if status == "restarting":
        return "restarting"
    if status == "created":
        return "starting"
    return "exited"  # exited, dead, paused, removing


def _ns(stamp: str) -> str:
    """An RFC 3339 UTC timestamp with its fraction padded to nanoseconds: docker trims trailing
    zeros, so raw strings do not sort by time."""
    head, _, frac = stamp.rstrip("Z").partition(".")
    return f"{head}.{frac.ljust(9, '0')[:9]}"


RUNTIME = Docker()
