"""Pure batch planning for rolling restarts: which restart groups go out together, in what order.

Contract: no I/O.  The restart unit is the GROUP (every rank of a multi-node instance; a
single-node replica is its own group).  A vLLM-on-Ray instance's Ray group (``<group>-ray``)
and its ``vllm serve`` group are one restart unit.  Infrastructure groups (router, Mooncake
master, gateway) are never rolled in batches.

Regular deployments: batches of at most ``max_unavailable`` serving groups (``N`` or ``N%`` of
the deployment's serving groups, rounded down, at least 1), in plan order.  A budget covering
every replica is capped so one keeps serving, unless forced; a deployment with a single
replica is refused unless forced.

PD deployments (any prefill/decode group): a single router pairs any registered prefill with
any registered decode, so workers of two generations must never be registered in one router.
They roll as a whole cohort (every prefill, decode and the router) switched to surge hosts
behind a front router; without ``surge`` they are refused.  ``--role`` and ``--limit`` are
refused for PD (they would roll one side only).  Every refusal is a :class:`UsageError` whose
exact text the tests pin.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import AbstractSet, Literal, Sequence

from launcher.errors import UsageError
from launcher.model import Unit

ENGINE_ROLES = ("single", "rank", "prefill", "decode")
INFRA_ROLES = ("router", "mooncake-master", "gateway")
RAY_SUFFIX = "-ray"

_BUDGET = re.compile(r"(\d+)(%?)")


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """``--max-unavailable``: a count, or a percentage of the serving groups."""

    value: int
    percent: bool
    text: str

    def of(self, total: int) -> int:
        if not self.percent:
            return self.value
        return max(1, math.floor(total * self.value / 100))


def parse_budget(text: str | int) -> Budget:
    raw = str(text).strip()
    m = _BUDGET.fullmatch(raw)
    if m is None:
        raise UsageError(f"--max-unavailable {raw!r}: expected a count like 2 or a percentage like 25%")
    value, percent = int(m.group(1)), bool(m.group(2))
    if value < 1:
        raise UsageError(f"--max-unavailable {raw!r}: must be at least 1 (or 1%), or nothing would ever restart")
    if percent and value > 100:
        raise UsageError(f"--max-unavailable {raw!r}: a percentage must be at most 100%")
    return Budget(value=value, percent=percent, text=raw)


@dataclass(frozen=True, slots=True, kw_only=True)
class RollGroup:
    """One restart unit: every unit of one group (Ray instance: both its groups)."""

    name: str
    role: str
    units: tuple[Unit, ...]  # rank order; a Ray instance's Ray ranks first

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(u.host for u in self.units))

    @property
    def leader(self) -> Unit | None:
        """The unit that serves HTTP (what a router registers)."""
        return next((u for u in self.units if u.health is not None), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class Cohort:
    """A PD cohort: prefill and decode groups in the deployment's P:D ratio."""

    prefill: tuple[str, ...]
    decode: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RollPlan:
    deployment: str
    mode: Literal["groups", "cohort"]
    groups: tuple[RollGroup, ...]  # every serving restart unit of the deployment, plan order
    batches: tuple[tuple[str, ...], ...]  # group names; each batch goes out of service together
    max_unavailable: int  # groups out of service at once (cohort mode: 0, the new cohort serves first)
    skipped: tuple[tuple[str, str], ...] = ()  # (group, why it is not rolled)
    notes: tuple[str, ...] = ()
    cohorts: tuple[Cohort, ...] = ()  # PD: how the deployment splits at its P:D ratio
    infra: tuple[RollGroup, ...] = ()  # router / Mooncake / gateway groups

    def group(self, name: str) -> RollGroup:
        return next(g for g in (*self.groups, *self.infra) if g.name == name)


def restart_groups(units: Sequence[Unit]) -> tuple[RollGroup, ...]:
    """Units by restart unit, in plan order (a ``-ray`` group joins its serve group)."""
    by_key: dict[str, list[Unit]] = {}
    for u in units:
        by_key.setdefault(u.group.removesuffix(RAY_SUFFIX), []).append(u)
    out = []
    for key, members in by_key.items():
        ordered = sorted(members, key=lambda u: (not u.group.endswith(RAY_SUFFIX), u.rank))
        role = next((u.role for u in ordered if u.health is not None), ordered[0].role)
        out.append(RollGroup(name=key, role=role, units=tuple(ordered)))
    return tuple(out)


def pd_cohorts(prefill: Sequence[str], decode: Sequence[str]) -> tuple[Cohort, ...]:
    """Splits xPyD into gcd(x, y) cohorts keeping the ratio (2P2D -> two 1P1D; 2P1D -> one)."""
    if not prefill or not decode:
        return ()
    k = math.gcd(len(prefill), len(decode))
    p, d = len(prefill) // k, len(decode) // k
    return tuple(Cohort(prefill=tuple(prefill[i * p:(i + 1) * p]), decode=tuple(decode[i * d:(i + 1) * d])) for i in range(k))


def plan_roll(
    units: Sequence[Unit],
    *,
    max_unavailable: str | int = 1,
    role: str | None = None,
    limit: AbstractSet[str] | None = None,
    force: bool = False,
    surge: Sequence[str] = (),
) -> RollPlan:
    """The batches of a rolling restart of ``units`` (one deployment's plan units).

    ``limit``: host names (an already resolved ``--limit`` pattern); ``surge``: host names of
    ``--surge`` (PD only)."""
    if not units:
        raise UsageError("nothing to roll: the deployment has no units")
    deployment = units[0].deployment
    budget = parse_budget(max_unavailable)
    all_groups = restart_groups(units)
    serving = tuple(g for g in all_groups if g.role in ENGINE_ROLES)
    infra = tuple(g for g in all_groups if g.role not in ENGINE_ROLES)
    if any(g.role in ("prefill", "decode") for g in serving):
        return _plan_pd(deployment, serving, infra, role=role, limit=limit, surge=surge)
    if surge:
        raise UsageError(
            f"--surge: deployment {deployment} is not PD; its replicas roll in place (drop --surge)"
        )
    skipped: list[tuple[str, str]] = [(g.name, "infrastructure: not rolled (fleet up restarts it)") for g in infra]
    chosen = list(serving)
    if role is not None:
        roles = sorted({g.role for g in serving})
        if role not in roles:
            raise UsageError(
                f"--role {role}: deployment {deployment} has no {role} groups (roles: {', '.join(roles)})"
            )
        skipped += [(g.name, f"--role {role}") for g in chosen if g.role != role]
        chosen = [g for g in chosen if g.role == role]
    if limit is not None:
        inside = []
        for g in chosen:
            inn = [h for h in g.hosts if h in limit]
            out = [h for h in g.hosts if h not in limit]
            if inn and out:
                raise UsageError(
                    f"--limit splits group {g.name!r}: it also runs on {', '.join(out)}; include those hosts"
                )
            if inn:
                inside.append(g)
            else:
                skipped.append((g.name, "outside --limit"))
        chosen = inside
    if not chosen:
        raise UsageError(f"nothing to roll: no group of deployment {deployment} matches --role/--limit")
    total = len(serving)
    notes: list[str] = []
    if total == 1 and not force:
        raise UsageError(
            f"deployment {deployment} has one replica ({serving[0].name}): restarting it takes the "
            f"service down; pass --force to restart it anyway"
        )
    n = budget.of(total)
    if total > 1 and n >= total and not force:
        n = total - 1
        notes.append(
            f"--max-unavailable {budget.text} covers all {total} replicas: capped at {n} so one keeps "
            f"serving (--force allows all)"
        )
    if total == 1:
        notes.append(f"one replica ({serving[0].name}): the service is down while it restarts (--force)")
    batches = tuple(tuple(g.name for g in chosen[i:i + n]) for i in range(0, len(chosen), n))
    return RollPlan(
        deployment=deployment, mode="groups", groups=serving, batches=batches, max_unavailable=n,
        skipped=tuple(skipped), notes=tuple(notes), infra=infra,
    )  # fmt: skip


def _plan_pd(
    deployment: str,
    serving: tuple[RollGroup, ...],
    infra: tuple[RollGroup, ...],
    *,
    role: str | None,
    limit: AbstractSet[str] | None,
    surge: Sequence[str],
) -> RollPlan:
    prefill = [g.name for g in serving if g.role == "prefill"]
    decode = [g.name for g in serving if g.role == "decode"]
    shape = f"{len(prefill)}P{len(decode)}D"
    if role is not None:
        raise UsageError(
            f"--role {role}: PD deployment {deployment} rolls whole cohorts (prefill and decode of one "
            f"generation together, never paired across generations); drop --role"
        )
    if limit is not None:
        raise UsageError(
            f"--limit: PD deployment {deployment} rolls whole cohorts (prefill and decode of one "
            f"generation together, never paired across generations); drop --limit"
        )
    cohorts = pd_cohorts(prefill, decode)
    if not any(g.role == "router" for g in infra):
        raise UsageError(f"PD deployment {deployment} has no router unit to roll behind")
    if not surge:
        if len(cohorts) < 2:
            raise UsageError(
                f"PD deployment {deployment} is {shape}: it cannot be split into cohorts of the same "
                f"P:D ratio, and new-generation workers registered beside old ones would be paired with "
                f"them; give --surge PATTERN with hosts for a second {shape} cohort"
            )
        c = cohorts[0]
        raise UsageError(
            f"PD deployment {deployment} is {shape} ({len(cohorts)} cohorts of {len(c.prefill)}P{len(c.decode)}D), "
            f"but its one router pairs across cohorts, so cohorts cannot roll in place; give --surge "
            f"PATTERN with hosts for a second {shape} cohort"
        )
    used = {h for g in (*serving, *infra) for h in g.hosts}
    overlap = sorted(used & set(surge))
    if overlap:
        raise UsageError(
            f"--surge: {', '.join(overlap)} already run{'s' if len(overlap) == 1 else ''} deployment "
            f"{deployment}; surge hosts must be spare"
        )
    names = tuple(g.name for g in (*serving, *infra))
    hosts = len(used)
    if len(set(surge)) < hosts:
        raise UsageError(
            f"--surge: {len(set(surge))} host(s) given; a second {shape} cohort of deployment {deployment} "
            f"needs {hosts}, as many as the first"
        )
    notes = (
        f"cohort switch: a new {shape} cohort comes up on the surge hosts ({hosts} host(s) more while "
        f"it rolls), traffic moves to it, then the old cohort is drained and retired",
    )
    return RollPlan(
        deployment=deployment, mode="cohort", groups=serving, batches=(names,), max_unavailable=0,
        notes=notes, cohorts=cohorts, infra=infra,
    )  # fmt: skip
