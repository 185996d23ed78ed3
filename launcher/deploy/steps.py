"""Remote steps as argv lists, per runtime: liveness, health probe, image pull, logs, and
installing a unit's files with the previous generation kept in ``<unit dir>/prev/``.

Contract: builders are pure (argv out, no I/O); the ``run_*`` helpers do one round trip each
through a :class:`Shell` and parse the answer.  What a host needs: a POSIX ``sh`` with coreutils,
``flock`` (util-linux; see :mod:`launcher.deploy.lock`), ``docker`` (docker runtime) or
``systemctl``/``journalctl`` (systemd runtime), and one of ``curl``, ``wget`` or ``python3`` for
health probes.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Literal, Sequence

from launcher import hostscripts
from launcher.deploy.manifest import MANIFEST
from launcher.deploy.remote import STEP_TIMEOUT_S, check, failure, sh
from launcher.errors import RemoteError
from launcher.execute.transport import Result, Transport
from launcher.model import Runtime
from launcher.render import SECRETS_FILE

State = Literal["running", "starting", "restarting", "exited", "missing"]

PREV = "prev"

NO_PROBE_TOOL = 127  # probe exit status when the host has none of curl/wget/python3


@dataclass(frozen=True, slots=True, kw_only=True)
class Liveness:
    state: State
    exit_code: int | None = None
    restarts: int = 0


MISSING = Liveness(state="missing")


def service(name: str) -> str:
    return f"{name}.service"


# ---------------------------------------------------------------------------------------------
# liveness

DOCKER_FORMAT = "{{.Name}}|{{.State.Status}}|{{.State.ExitCode}}|{{.RestartCount}}"
# Missing names make docker exit 1 after printing the others: the answer is judged by parsing
# (a dead daemon still shows, as its error text), so the exit status is ignored.
_INSPECT = 'f=$1; shift; docker inspect --type container -f "$f" "$@" 2>&1; true'


def liveness_argv(runtime: Runtime, names: Sequence[str]) -> tuple[str, ...]:
    if runtime == "docker":
        return sh(_INSPECT, DOCKER_FORMAT, *names)
    return (
        "systemctl",
        "show",
        "--property=Id,ActiveState,SubState,ExecMainStatus,NRestarts,LoadState",
        *(service(n) for n in names),
    )


def parse_liveness(runtime: Runtime, names: Sequence[str], out: str) -> dict[str, Liveness]:
    found: dict[str, Liveness] = {}
    if runtime == "docker":
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) != 4 or not parts[0].startswith("/"):
                continue
            name, status, code, restarts = parts[0][1:], parts[1], parts[2], parts[3]
            found[name] = Liveness(state=_docker_state(status), exit_code=_int(code), restarts=_int(restarts) or 0)
    else:
        for block in out.split("\n\n"):
            props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
            name = props.get("Id", "").removesuffix(".service")
            if not name or props.get("LoadState") == "not-found":
                continue
            found[name] = Liveness(
                state=_systemd_state(props.get("ActiveState", ""), props.get("SubState", "")),
                exit_code=_int(props.get("ExecMainStatus", "")),
                restarts=_int(props.get("NRestarts", "")) or 0,
            )
    return {n: found.get(n, MISSING) for n in names}


def _docker_state(status: str) -> State:
    if status == "running":
        return "running"
    if status == "restarting":
        return "restarting"
    if status == "created":
        return "starting"
    return "exited"  # exited, dead, paused, removing


def _systemd_state(active: str, sub: str) -> State:
    if active == "active":
        return "running"
    if active == "activating":
        return "restarting" if sub == "auto-restart" else "starting"
    return "exited"


def _int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def run_liveness(shell: Transport, runtime: Runtime, names: Sequence[str]) -> dict[str, Liveness]:
    if not names:
        return {}
    return liveness_from(shell.run(liveness_argv(runtime, names), timeout=STEP_TIMEOUT_S), runtime, names)


def liveness_from(result: Result, runtime: Runtime, names: Sequence[str]) -> dict[str, Liveness]:
    """Judges the answer to :func:`liveness_argv` (a dead docker daemon or a failing
    ``systemctl show`` raises)."""
    out = result.stdout_text
    if runtime == "docker" and "Cannot connect to the Docker daemon" in out:
        raise RemoteError(result.host, "docker inspect", result.exit_status, out.strip().splitlines()[-1])
    if runtime == "systemd" and not result.ok:
        raise failure(result, "systemctl show")
    return parse_liveness(runtime, names, out)


# ---------------------------------------------------------------------------------------------
# health

_PROBE = hostscripts.text("http-probe.sh")


def probe_argv(url: str, timeout_s: int = 5) -> tuple[str, ...]:
    """An HTTP GET from the host itself; exit 0 on a 2xx answer."""
    return sh(_PROBE, url, str(timeout_s))


# ---------------------------------------------------------------------------------------------
# images

_PULL = 'if docker image inspect "$1" >/dev/null 2>&1; then echo present; else docker pull -q "$1" >/dev/null && echo pulled; fi'


PULL_TIMEOUT_S = 3600.0  # multi-GB engine images on a slow registry mirror


_IMAGES = 'for i in "$@"; do if docker image inspect "$i" >/dev/null 2>&1; then echo "present $i"; else echo "absent $i"; fi; done'


def images_argv(images: Sequence[str]) -> tuple[str, ...]:
    """Which of ``images`` the host has (read only; a dead daemon counts as absent, so the
    pull that follows reports it)."""
    return sh(_IMAGES, *images)


def parse_images(out: str) -> dict[str, bool]:
    found: dict[str, bool] = {}
    for line in out.splitlines():
        state, _, image = line.partition(" ")
        if image and state in ("present", "absent"):
            found[image] = state == "present"
    return found


def ensure_image(shell: Transport, image: str) -> str:
    """``present`` or ``pulled``; a failed pull raises."""
    return check(shell, sh(_PULL, image), label=f"docker pull {image}", timeout=PULL_TIMEOUT_S).strip()


# ---------------------------------------------------------------------------------------------
# start / stop / logs

_LOGS = 'exec "$@" 2>&1'


def logs_argv(runtime: Runtime, name: str, lines: int, *, since: str | None = None) -> tuple[str, ...]:
    """Recent log lines (stdout and stderr merged).  ``since``: docker timestamp / journal cursor
    of the last line already shown (for ``-f`` by polling)."""
    if runtime == "docker":
        args = ["docker", "logs", "--timestamps"]
        args += ["--since", since] if since else ["--tail", str(lines)]
        return sh(_LOGS, *args, name)
    args = ["journalctl", "--no-pager", "--output=short-iso", "--show-cursor", "-u", service(name)]
    args += [f"--after-cursor={since}"] if since else ["-n", str(lines)]
    return tuple(args)


def parse_log(runtime: Runtime, out: str) -> list[tuple[str, str]]:
    """``(position, text)`` per line: docker's timestamp, or the journal cursor on the last
    line (journalctl prints it as a trailer); the position is what ``since`` takes next time."""
    lines: list[tuple[str, str]] = []
    if runtime == "docker":
        for line in out.splitlines():
            stamp, sep, text = line.partition(" ")
            lines.append((stamp, text) if sep and stamp[:1].isdigit() else ("", line))
        return lines
    cursor = ""
    for line in out.splitlines():
        if line.startswith("-- cursor: "):
            cursor = line.removeprefix("-- cursor: ").strip()
        elif line != "-- No entries --":
            lines.append(("", line))
    if lines and cursor:
        lines[-1] = (cursor, lines[-1][1])
    return lines


_FAILED_RUN_LOGS = (
    'docker inspect --type container -f "{{.State.StartedAt}}" "$1" 2>&1; '
    'exec docker logs --timestamps --tail "$2" "$1" 2>&1'
)
_SYSTEMD_EXITED = "Main process exited"  # systemd's own journal line when a service's process ends


def failure_logs_argv(runtime: Runtime, name: str, lines: int) -> tuple[str, ...]:
    """The last log lines of a unit that failed; for docker preceded by the start time of the
    container's current run (see :func:`failure_lines`)."""
    if runtime == "docker":
        return sh(_FAILED_RUN_LOGS, name, str(lines))
    return logs_argv(runtime, name, lines)


def failure_lines(runtime: Runtime, out: str, restarted: bool) -> tuple[list[str], str]:
    """``(log lines, the line naming the failure)`` from :func:`failure_logs_argv`'s answer.

    The failure line is the last non-empty line of the run that died.  docker: the last line,
    or, when docker restarted the unit (its log then also holds the new run's first lines), the
    last line stamped before the current run started.  systemd: the last line before systemd's
    last "Main process exited" line, restarted or not -- a real journal ends every dead run with
    systemd's own lines ("Main process exited", "Failed with result 'exit-code'"), which name no
    cause.  When that run logged Python exceptions, the first one wins, without its logger
    prefix: the real vLLM ends a failed start with "Exception: WorkerProc initialization failed
    ... See stack trace for root cause." after the worker's own traceback, whose exception
    ("RuntimeError: ... Unable to find address for: ens9") names the cause.
    """
    started = ""
    if runtime == "docker":
        first, _, out = out.partition("\n")
        started = first.strip() if first[:1].isdigit() else ""
        out = out if started else first + "\n" + out
    entries = parse_log(runtime, out)
    lines = [text for _, text in entries]
    died = entries
    if restarted and runtime == "docker" and started:
        died = [(stamp, text) for stamp, text in entries if stamp and _ns(stamp) < _ns(started)] or entries
    elif runtime == "systemd":
        ends = [i for i, (_, text) in enumerate(entries) if _SYSTEMD_EXITED in text]
        died = entries[: ends[-1]] if ends and ends[-1] > 0 else entries
    cause = next((m.group(1) for _, text in died if (m := _EXCEPTION.match(text))), "")
    last = cause or next((text.strip() for _, text in reversed(died) if text.strip()), "")
    return lines[-FAILURE_LINES_SHOWN:], last


FAILURE_LINES_SHOWN = 20  # of the FAILURE_LINES_READ the failure's detail shows
FAILURE_LINES_READ = 400  # an engine's root-cause traceback can sit far above its last line
# A Python exception's closing line, after an optional logger prefix such as vLLM's
# "(Worker pid=20) ERROR 12-01 15:42:16 [file.py:123] ".
_EXCEPTION = re.compile(r"^(?:\(\w+ pid=\d+\) \w+ [\d-]+ [\d:.]+ \[[^\]]*\] )?"
                        r"((?:[A-Za-z_]\w*\.)*(?:[A-Za-z_]\w*(?:Error|Exception)|Exception): .+)$")  # fmt: skip


# Failure lines that only say a peer rank went away: the rank that logs one died of another's
# failure.  The stand-in's two lines (rank 0 losing a rank, a rank losing rank 0); Gloo's pair.cc
# "Connection closed by peer [ip]:port" / "Read error [ip]:port: Connection reset by peer"; NCCL's
# ncclRemoteError ("... a remote process exiting prematurely"); torch's TCPStore ("Connection was
# likely closed. Did the remote server shutdown or crash?").
_PEER_LOST = re.compile(
    r"process group is broken|transport/tcp/pair\.cc:\d+\].*(?:closed|reset) by peer|ncclRemoteError"
    r"|remote process exit|Did the remote server shutdown or crash"
)


def peer_lost(line: str) -> bool:
    """Whether a failure line (see :func:`failure_lines`) only reports a lost peer rank."""
    return _PEER_LOST.search(line) is not None


def _ns(stamp: str) -> str:
    """An RFC 3339 UTC timestamp with its fraction padded to nanoseconds: docker trims trailing
    zeros, so raw strings do not sort by time."""
    head, _, frac = stamp.rstrip("Z").partition(".")
    return f"{head}.{frac.ljust(9, '0')[:9]}"


# ---------------------------------------------------------------------------------------------
# files

_ROTATE = hostscripts.text("rotate-prev.sh")
_REMOVE = 'for f in "$@"; do rm -f "$f" || exit 1; done'


def rotate_argv(unit_dir: str, old_files: Sequence[str]) -> tuple[str, ...]:
    """Copies the current generation's files (never the secrets file) and manifest into
    ``<unit dir>/prev/<absolute path>``, replacing the generation kept there before."""
    keep = [f for f in old_files if not f.endswith("/" + SECRETS_FILE)]
    return sh(_ROTATE, unit_dir, *keep)


def remove_argv(paths: Sequence[str]) -> tuple[str, ...]:
    return sh(_REMOVE, *paths)


def manifest_path(unit_dir: str) -> str:
    return f"{unit_dir}/{MANIFEST}"


_READ_MANIFESTS = 'for f in "$1"/*/manifest.json; do [ -f "$f" ] && { printf "\\n"; cat "$f"; }; done; true'


def read_manifests_argv(deployment_dir: str) -> tuple[str, ...]:
    """Every unit manifest of one deployment on the host, one JSON document per line."""
    return sh(_READ_MANIFESTS, deployment_dir)


_HASHES = 'for f in "$@"; do if [ -f "$f" ]; then sha256sum "$f"; else echo "- $f"; fi; done'


def hashes_argv(paths: Sequence[str]) -> tuple[str, ...]:
    """``sha256  path`` per existing file, ``- path`` per missing one."""
    return sh(_HASHES, *paths)


def parse_hashes(out: str) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for line in out.splitlines():
        digest, _, path = line.partition(" ")
        if path:
            found[path.lstrip(" *")] = None if digest == "-" else digest
    return found


_READ = 'for f in "$@"; do if [ -f "$f" ]; then printf "%s " "$(base64 -w0 < "$f")"; else printf "- "; fi; printf "%s\\n" "$f"; done'


def read_files_argv(paths: Sequence[str]) -> tuple[str, ...]:
    """Each file's content as ``<base64> <path>`` (``- <path>`` when absent), one per line."""
    return sh(_READ, *paths)


def parse_files(out: str) -> dict[str, bytes | None]:
    found: dict[str, bytes | None] = {}
    for line in out.splitlines():
        data, _, path = line.partition(" ")
        if path:
            found[path] = None if data == "-" else base64.b64decode(data)
    return found
