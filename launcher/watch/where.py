"""Where a deployment lives now, as its hosts' manifests say: the playbook's plan, with spare
hosts (``placement.<role>.spares``) standing in wherever ``fleet watch`` placed a group on one.

The commands that act on a deployment read it here (``status``, ``logs``; ``restart`` and
``rollback`` refuse a moved group; ``down`` and ``collect`` need no plan: they take whatever
the deployment's hosts hold, spares included, see :func:`launcher.pipeline.claimed_hosts`).
The hosts are the source of truth -- the watch keeps no state: a unit of the deployment found
on a spare belongs to it and stands there for its planned host, unless that host holds a newer
deployment of it (:func:`launcher.watch.spares.placed`, the watch's own rule).

One round trip per planned host and spare (manifests only), and none for a playbook without
spares.  A host that does not answer is read as holding nothing, as the watch reads it: a
spare's copy counts when its planned host is away; a spare that is away moves nothing (its
units, if any, are unknown: :attr:`Where.unanswered` names it, for the command to say so).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

from launcher.deploy.manifest import Manifest, parse
from launcher.deploy.session import Connect, Connections, Target
from launcher.deploy.steps import read_manifests_argv
from launcher.deploy.survey import deployment_dir
from launcher.errors import FleetError, UsageError
from launcher.execute.transport import Transport
from launcher.pipeline import Inputs
from launcher.remote import check
from launcher.watch.spares import Spares, placed


@dataclass(frozen=True, slots=True, kw_only=True)
class Where:
    """A deployment as placed now."""

    target: Target  # its units where they run; its hosts: every host it claims
    subst: Mapping[str, str] = field(default_factory=dict)  # planned host -> the spare standing in for it
    unanswered: Mapping[str, str] = field(default_factory=dict)  # spare host -> why it was not read

    def moved(self) -> tuple[tuple[str, str, str], ...]:
        """``(group, spare, planned host)`` of every rank standing on a spare, in plan order."""
        back = {spare: host for host, spare in self.subst.items()}
        return tuple(dict.fromkeys((d.unit.group, d.host, back[d.host]) for d in self.target.units if d.host in back))


def located(target: Target, spares: Spares, found: Mapping[str, Mapping[str, Manifest]],
            failed: Mapping[str, str]) -> Where:  # fmt: skip
    """Pure: ``target`` (the playbook's, every claimed host) as ``found`` (host -> this
    deployment's manifests there; ``failed``: host -> why it was not read) shows it placed.
    Raises a one-line :class:`FleetError` when the spares' units no longer plan."""
    spare_names = {h.name for h in spares.hosts}
    planned = {d.name: d.host for d in target.units}
    home = {h: found.get(h) for h in set(planned.values())}
    subst = placed(planned, {h: m for h, m in found.items() if h in spare_names}, home)
    unanswered = {h: why for h, why in sorted(failed.items()) if h in spare_names}
    if not subst:
        return Where(target=target, unanswered=unanswered)
    try:
        moved = spares.target(subst)
    except FleetError as err:
        shown = ", ".join(f"{h} -> {s}" for h, s in sorted(subst.items()))
        raise FleetError(f"deployment {target.deployment}: the units fleet watch placed on spares ({shown}) do not "
                         f"plan: {err}") from None  # fmt: skip
    # Every claimed host stays: a lost host that answers again may still hold a stale copy.
    return Where(target=replace(moved, hosts=target.hosts), subst=subst, unanswered=unanswered)


def _manifests(t: Transport, host: str, deployment: str) -> dict[str, Manifest]:
    out = check(t, read_manifests_argv(deployment_dir(deployment)), label="read the unit manifests")
    found = (parse(line) for line in out.splitlines() if line.strip())
    return {m.unit: m for m in found if m is not None and m.host == host and m.deployment == deployment}


def where(inputs: Inputs, plan_target: Callable[[Inputs], Target], connect: Connect, forks: int = 8) -> Where:
    """The deployment of ``inputs`` as placed now; ``plan_target``: how the command makes its
    :class:`Target` of inputs (the unlimited one: every claimed host).  Unknown or changed host
    keys refuse; a host that does not answer is read as holding nothing (see the module)."""
    target = plan_target(inputs)
    spares = Spares.of(inputs, plan_target)
    if spares is None:
        return Where(target=target)
    ask = {d.host for d in target.units} | {h.name for h in spares.hosts}
    with Connections([h for h in target.hosts if h.name in ask], connect, forks) as session:
        session.refuse_bad_keys()
        read = session.run(sorted(session.transports), lambda h, t: _manifests(t, h, target.deployment))
    found = {h: m for h, m in read.items() if isinstance(m, dict)}
    failed = {h: str(e) for h, e in (*session.errors.items(), *read.items()) if isinstance(e, FleetError)}
    return located(target, spares, found, failed)


def refuse_moved(here: Where, command: str, playbook: str) -> None:
    """``command`` (restart, rollback) acts on the playbook's placement only: a group standing on
    a spare refuses it, one line naming the group, the spare and what to do."""
    moved = here.moved()
    if not moved:
        return
    group, spare, host = moved[0]
    more = f" (and {len(moved) - 1} more)" if len(moved) > 1 else ""
    raise UsageError(f"group {group} runs on spare host {spare}, where fleet watch placed it for {host}{more}: "
                     f"fleet {command} acts on the playbook's placement only; put it back with "
                     f"`fleet down {playbook}` then `fleet up {playbook}`")
