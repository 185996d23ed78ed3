"""Keeping a deployment's scrape targets current: read which generation of each unit runs where
(the manifests on the hosts, as ``fleet status`` does), label the plan's endpoints with it and
write them into the ``file_sd`` file.

Contract: :func:`publish` reads only (no lock, nothing written on a host) and replaces this
deployment's groups in ``path`` atomically (:mod:`launcher.observe.sdfile`); units not deployed have no target.
A host that cannot be read keeps the groups it had (Prometheus then shows them down, which is
what they are to it) rather than losing them; when no host can be read the file is left as it
was (not created, not emptied).  It returns the deployment's groups as written and the hosts it
could not read, in inventory order.  ``left_out`` (``metrics targets --limit``: the deployment's
hosts outside the limit, ``target`` narrowed to the others) keep their groups as an unread
host does, without being asked.  :class:`TargetsHook` is what up/down/restart/rollback call
after the change and after each rolling batch.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Callable, Collection

from launcher.deploy.session import Connect, Target
from launcher.deploy.status import status
from launcher.errors import ExitCode, FleetError
from launcher.execute.fanout import Connector
from launcher.model import Playbook
from launcher.observe import sdfile
from launcher.observe.targets import WATCH_KIND, scrape_endpoints, target_groups


def publish(path: Path, target: Target, connect: Connect, forks: int = 8,
            left_out: Collection[str] = ()) -> tuple[list[dict[str, Any]], tuple[str, ...]]:  # fmt: skip
    rows = status(target, connect, forks)
    generations = {(r.host, r.unit): r.generation for r in rows}
    unread = {r.host for r in rows if r.state == "unreachable"} | set(left_out)
    missed = tuple(h.name for h in target.hosts if h.name in unread)
    if rows and all(r.state == "unreachable" for r in rows):
        return [], missed
    groups = target_groups(target.deployment, target.recipe, scrape_endpoints(d.unit for d in target.units), generations)
    # A host that cannot be read keeps its groups; so does the watch's own endpoint (fleet watch writes it).
    merged = sdfile.update(path, {target.deployment}, groups,
                           keep=lambda g: g["labels"].get("host") in unread or g["labels"].get("kind") == WATCH_KIND)
    return [g for g in merged if g["labels"].get("deployment") == target.deployment], missed


def targets_path(playbook: Playbook, flag: str | None) -> Path | None:
    """Where this deployment's targets are kept: ``flag`` (``--targets-file``), else the
    playbook's ``metrics.targets_file`` relative to the playbook's directory, else None."""
    if flag is not None:
        return Path(flag)
    given = playbook.metrics.targets_file
    return None if given is None else Path(playbook.path).parent / Path(given).expanduser()


def checked_targets_path(playbook: Playbook, flag: str | None) -> Path | None:
    """Where the playbook or ``--targets-file`` asks for targets to be kept (None: nowhere); a
    FILE that is not a targets file stops the command here, before any host is touched."""
    path = targets_path(playbook, flag)
    if path is not None:
        sdfile.check(path)
    return path


class TargetsHook:
    """Rewrites a deployment's targets in FILE when called: after ``up``/``down`` and after each
    rolling batch, so Prometheus follows the rollout.  Each call reads the hosts over connections
    of its own (``connector()``: the command's own stay with it).  A failure is handed to
    ``report`` as one line, not raised: it must not stop a rollout; :meth:`exit_code` then turns
    a success into exit 1."""

    def __init__(self, path: Path, target: Target, connector: Callable[[], AbstractContextManager[Connector]],
                 forks: int, report: Callable[[str], None]) -> None:  # fmt: skip
        self.path, self.target, self.connector, self.forks, self.report = path, target, connector, forks, report
        self.failed = False

    def __call__(self) -> None:
        try:
            with self.connector() as conn:
                publish(self.path, self.target, conn.connect, self.forks)  # unreachable hosts: up/down name them
        except FleetError as err:
            self.failed = True
            self.report(f"fleet: error: scrape targets {self.path} not updated: {err}")

    def exit_code(self, code: int) -> int:
        return int(ExitCode.FAILED) if self.failed and code == ExitCode.OK else code


def after_change(hook: TargetsHook | None, code: int) -> int:
    """Rewrites the scrape targets (when asked) after a change; the command's exit code."""
    if hook is None:
        return code
    hook()
    return hook.exit_code(code)
