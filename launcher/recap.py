"""The run summary that ends every command that changes hosts, as Ansible's PLAY RECAP does:
per host, how many units (rolling commands: restart groups) were started, left unchanged,
stopped, failed, skipped, could not be read (unreachable) or judged (unknown), and one line that
explains the exit status.

Commands that change something other than units count in columns of their own (``columns``)
and say what their exit status means (``explained``): ``unlock`` (locks removed / unchanged),
``weights stage`` (copies staged / unchanged / failed / unreachable).

Pure: the commands build a :class:`Recap` from their reports and print :func:`lines` (or
:func:`to_json` under ``--json``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from launcher.errors import ExitCode

COLUMNS = ("started", "unchanged", "stopped", "failed", "skipped", "unreachable", "unknown")

# A unit's or group's outcome -> its column.  `planned` (--check) is split by the action.
_COLUMN = {
    "healthy": "started", "restarted": "started", "rolled-back": "started", "unchanged": "unchanged",
    "removed": "stopped", "retired": "stopped", "failed": "failed", "restored": "failed",
    "skipped": "skipped", "not-reached": "skipped", "unreachable": "unreachable", "unknown": "unknown",
}  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class Recap:
    title: str  # "glm-pd: up", "glm-pd: up --check"
    counts: Mapping[str, Mapping[str, int]]  # host -> column -> count, hosts in first-seen order
    exit_code: int
    check: bool = False
    what: str = "units"  # what is counted: units, or restart groups for rolling commands
    columns: tuple[str, ...] = COLUMNS
    explained: str | None = None  # the exit status's meaning, when the command says it itself


def column(outcome: str, action: str = "") -> str:
    """The column an outcome counts in; ``planned`` (what ``--check`` would do) by its action."""
    if outcome == "planned":
        return "stopped" if action == "remove" else "started"
    return _COLUMN[outcome]


def recap(title: str, rows: Iterable[tuple[str, str]], exit_code: int, *, check: bool = False,
          what: str = "units", hosts: Iterable[str] = (), columns: tuple[str, ...] = COLUMNS,
          explained: str | None = None) -> Recap:  # fmt: skip
    """``rows``: (host, column) per unit (a group on several hosts: one row per host);
    ``hosts``: every host the command worked on, listed first and in this order (all zero when
    nothing of theirs was counted), as Ansible's recap lists every host it ran on."""
    counts: dict[str, dict[str, int]] = {h: dict.fromkeys(columns, 0) for h in hosts}
    for host, col in rows:
        per = counts.setdefault(host, dict.fromkeys(columns, 0))
        per[col] += 1
    return Recap(title=title, counts=counts, exit_code=exit_code, check=check, what=what, columns=columns,
                 explained=explained)  # fmt: skip


def explain(r: Recap) -> str:
    """One line: what the exit status means for this run."""
    code = r.exit_code
    if r.explained is not None:
        return f"exit {code}: {r.explained}"
    if r.check:
        if code == ExitCode.OK:
            return "exit 0: nothing failed; the counts are what the command would do (nothing was changed)"
        return (f"exit {code}: some hosts could not be read (errors above); the counts are what the command would do "
                "on the others (nothing was changed)")  # fmt: skip
    if code == ExitCode.OK:
        return f"exit 0: every {r.what[:-1]} is as planned"
    if code == ExitCode.PARTIAL:
        return f"exit 3: partial: some {r.what} are as planned, others failed (errors above)"
    if code == ExitCode.FAILED:
        return "exit 1: a step failed; nothing after it was started (errors above)"
    return f"exit {code}"


def lines(r: Recap) -> list[str]:
    """``RECAP <title>``, then per host ``host : started=N unchanged=N ...`` (aligned), then
    :func:`explain`."""
    width = max((len(h) for h in r.counts), default=0)
    note = " (nothing was changed)" if r.check else ""
    out = [f"RECAP {r.title}{note}: {r.what} per host"]
    for host, per in r.counts.items():
        out.append(f"{host:<{width}} : " + "  ".join(f"{c}={per[c]}" for c in r.columns))
    out.append(explain(r))
    return out


def to_json(r: Recap) -> dict[str, object]:
    return {"title": r.title, "check": r.check, "counts": {h: dict(per) for h, per in r.counts.items()},
            "what": r.what, "exit_code": r.exit_code, "explained": explain(r)}  # fmt: skip
