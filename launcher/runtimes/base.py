"""The runtime protocol: everything runtime-specific about running a unit on a host.

Contract: a runtime is one module under ``launcher/runtimes/`` with a subclass of
:class:`Runtime` and an instance named ``RUNTIME``; :mod:`launcher.runtimes.registry` finds it by
the name a unit, an inventory host or a playbook gives (``Unit.runtime``).  Render asks the
runtime for a unit's files and commands (start, the runtime's own stop, remove, hold); deploy,
preflight and rolling ask it for liveness, logs and the failure log, and read its answers through
it.  Nothing outside ``launcher/runtimes/`` compares runtime names.  Builders are pure (argv out,
no I/O); parsers read one answer.

A renderer that is not a host runtime (``launcher/export/k8s``: a whole plan as Kubernetes
objects) needs none of this: it reads the plan, as render does, and sits beside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Mapping, Sequence

from launcher.errors import RemoteError
from launcher.model import Plan, Unit
from launcher.remote import STEP_TIMEOUT_S, failure

if TYPE_CHECKING:  # the planner imports the runtimes: no SSH stack on its path
    from launcher.execute.transport import Result, Transport

State = Literal["running", "starting", "restarting", "exited", "missing"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Liveness:
    state: State
    exit_code: int | None = None
    restarts: int = 0


MISSING = Liveness(state="missing")


@dataclass(frozen=True, slots=True, kw_only=True)
class RenderedFile:
    path: str  # absolute path on the host
    content: str
    mode: int


@dataclass(frozen=True, slots=True, kw_only=True)
class UnitCommands:
    """Every command the executor runs for one unit, as argv lists (``Runtime.commands``)."""

    name: str
    runtime: str
    start: tuple[tuple[str, ...], ...]  # run in order on the host
    stop: tuple[tuple[str, ...], ...]  # the runtime's own stop (what an operator would type)
    removal: tuple[str, ...]  # remove without a drain grace (see remove)
    drained_removal: tuple[str, ...]  # remove, the grace in seconds appended; () = same as removal

    def remove(self, grace_s: int | None = None) -> tuple[str, ...]:
        """Stops and removes the unit (SIGTERM and ``grace_s`` to drain first, where the runtime
        takes one); succeeds if it is already gone."""
        if grace_s is None or not self.drained_removal:
            return self.removal
        return (*self.drained_removal, str(grace_s))


@dataclass(frozen=True, slots=True, kw_only=True)
class UnitRender:
    """What render hands a runtime to write one unit's files."""

    plan: Plan
    unit: Unit
    unit_dir: str
    env_path: str
    secrets_path: str
    render_hash: str
    context: Mapping[str, object]  # the templates' shared values (render._context)


class Runtime:
    """One runtime.  Subclasses set the class attributes and implement the methods."""

    name: str
    containers: bool  # units run in containers (images, docker flags, GPUs by --gpus)
    native: bool = False  # runs units that have no container (the engine as a host process)
    holds: bool = False  # restarts units itself, so a stop must hold them first (hold_argv)
    liveness_label: str  # how a failed liveness read is named ("docker inspect")

    def unit_files(self, r: UnitRender) -> list["RenderedFile"]:
        """The unit's files besides its env file, manifest and plan files."""
        raise NotImplementedError

    def commands(self, name: str, unit_dir: str) -> UnitCommands:
        raise NotImplementedError

    def hold_argv(self, names: Sequence[str]) -> tuple[str, ...] | None:
        """Keeps the runtime from restarting ``names`` while they are being stopped (None:
        nothing to do).  Never fails: a missing unit is simply not held."""
        return None

    def wait_name(self, name: str) -> str:
        """How the host's health wait (``hostscripts/wait.sh``) names the unit."""
        return name

    def wait_section(self) -> str:
        """This runtime's section of the host's health wait (``hostscripts/wait-<name>.sh``),
        which takes :meth:`wait_args` off the script's arguments and defines ``live_<name>
        NAME...`` (its liveness answer in ``$out``, its units counted into ``up``/``seen``/``bad``;
        a failed read that must end the wait prints ``<liveness_label>: <answer>`` on stderr and
        exits with the read's status)."""
        raise NotImplementedError

    def wait_args(self) -> tuple[str, ...]:
        """The arguments :meth:`wait_section` takes (constants of the runtime, not values)."""
        return ()

    def liveness_argv(self, names: Sequence[str]) -> tuple[str, ...]:
        raise NotImplementedError

    def parse_liveness(self, names: Sequence[str], out: str) -> dict[str, Liveness]:
        """Liveness of each of ``names`` (``MISSING`` where the answer has none)."""
        raise NotImplementedError

    def answer_problem(self, result: Result, out: str) -> RemoteError | None:
        """The error a liveness answer ``out`` (of ``result``) carries instead of liveness."""
        return None if result.ok else failure(result, self.liveness_label)

    def liveness_from(self, result: Result, names: Sequence[str], out: str | None = None) -> dict[str, Liveness]:
        """Judges the answer to :meth:`liveness_argv` (``out``: the answer's text when it came
        inside another one); raises what :meth:`answer_problem` finds."""
        text = result.stdout_text if out is None else out
        problem = self.answer_problem(result, text)
        if problem is not None:
            raise problem
        return self.parse_liveness(names, text)

    def run_liveness(self, shell: Transport, names: Sequence[str]) -> dict[str, Liveness]:
        """:meth:`liveness_argv` run on ``shell``'s host and judged (one round trip; none for no names)."""
        if not names:
            return {}
        return self.liveness_from(shell.run(self.liveness_argv(names), timeout=STEP_TIMEOUT_S), names)

    def logs_argv(self, name: str, lines: int, *, since: str | None = None) -> tuple[str, ...]:
        """Recent log lines (stdout and stderr merged).  ``since``: the position of the last
        line already shown (for ``-f`` by polling)."""
        raise NotImplementedError

    def parse_log(self, out: str) -> list[tuple[str, str]]:
        """``(position, text)`` per line; the position is what ``since`` takes next time."""
        raise NotImplementedError

    # Where following an empty log starts from (None: the next read's own position, if any).
    log_start: str | None = None

    def after(self, lines: list[tuple[str, str]], last: str) -> list[tuple[str, str]]:
        """The lines of a read ``since=last`` that were not shown before."""
        return lines

    def failure_logs_argv(self, name: str, lines: int) -> tuple[str, ...]:
        """The last log lines of a unit that failed (see :meth:`failure_lines`)."""
        return self.logs_argv(name, lines)

    def died(self, out: str, restarted: bool) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """(every log entry, the entries of the run that died) of a failure log."""
        entries = self.parse_log(out)
        return entries, entries

    def failure_lines(self, out: str, restarted: bool) -> tuple[list[str], str]:
        """``(log lines, the line naming the failure)`` from :meth:`failure_logs_argv`'s answer.

        The failure line is the last non-empty line of the run that died (:meth:`died`).  When
        that run logged Python exceptions, the first one wins, without its logger prefix: the
        real vLLM ends a failed start with "Exception: WorkerProc initialization failed ... See
        stack trace for root cause." after the worker's own traceback, whose exception
        ("RuntimeError: ... Unable to find address for: ens9") names the cause.
        """
        entries, died = self.died(out, restarted)
        lines = [text for _, text in entries]
        cause = next((m.group(1) for _, text in died if (m := _EXCEPTION.match(text))), "")
        last = cause or next((text.strip() for _, text in reversed(died) if text.strip()), "")
        return lines[-FAILURE_LINES_SHOWN:], last


FAILURE_LINES_SHOWN = 20  # of the FAILURE_LINES_READ the failure's detail shows
FAILURE_LINES_READ = 400  # an engine's root-cause traceback can sit far above its last line
# A Python exception's closing line, after an optional logger prefix such as vLLM's
# "(Worker pid=20) ERROR 12-01 15:42:16 [file.py:123] ".
_EXCEPTION = re.compile(r"^(?:\(\w+ pid=\d+\) \w+ [\d-]+ [\d:.]+ \[[^\]]*\] )?"
                        r"((?:[A-Za-z_]\w*\.)*(?:[A-Za-z_]\w*(?:Error|Exception)|Exception): .+)$")  # fmt: skip


def state_int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None
