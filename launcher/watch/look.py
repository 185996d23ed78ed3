"""One look at a host, in one round trip: who holds the deployment's deploy lock, the watch's
records (:mod:`launcher.deploy.watchstate`), a health probe of each health-checked unit, and the deploy
layer's survey (manifests, liveness, secrets-file hashes).

Contract: :func:`look` is one round trip (two when the host runs units of the deployment that
are no longer planned: :func:`~launcher.deploy.survey.SurveyAsk.survey`'s liveness of those);
:func:`steps` and :func:`read` are pure.  The probes never fail the batch: each prints ``ok`` or
``fail``, so the survey after them always runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from launcher.deploy import lock
from launcher.deploy.desired import Desired
from launcher.deploy.health import PROBE_TIMEOUT_S
from launcher.remote import STEP_TIMEOUT_S, failure, sh
from launcher.deploy.steps import probe_argv
from launcher.deploy.survey import Survey, SurveyAsk
from launcher.execute.files import Step, run_batch
from launcher.execute.transport import Result, Transport
from launcher.deploy import watchstate as state

_OWNER = 'cat "$1/owner" 2>/dev/null; true'
_PROBE = '"$@" >/dev/null 2>&1 && echo ok || echo fail'


@dataclass(frozen=True, slots=True, kw_only=True)
class HostView:
    survey: Survey
    owner: str = ""  # the deploy lock's owner line ("" : not locked)
    records: Mapping[str, state.Record] = field(default_factory=dict)
    probes: Mapping[str, bool] = field(default_factory=dict)  # unit -> answered its health check


def probed(units: Sequence[Desired], host: str) -> list[Desired]:
    return [d for d in units if d.host == host and d.unit.health is not None]


def steps(deployment: str, host: str, units: Sequence[Desired]) -> list[Step]:
    out = [
        Step(argv=sh(_OWNER, lock.lock_dir(deployment)), label=f"cat {lock.lock_dir(deployment)}/owner"),
        Step(argv=state.read_argv(deployment), label=f"cat {state.state_dir(deployment)}/*.json"),
    ]
    for d in probed(units, host):
        assert d.unit.health is not None
        out.append(Step(argv=sh(_PROBE, *probe_argv(d.unit.health.url, PROBE_TIMEOUT_S)), label=f"probe {d.name}"))
    return out + SurveyAsk.of(host, units, images=False).steps(deployment)


def read(t: Transport, deployment: str, host: str, units: Sequence[Desired], results: Sequence[Result]) -> HostView:
    checked = probed(units, host)
    mine = 2 + len(checked)
    for r in results[:mine]:
        if not r.ok:
            raise failure(r, r.command)
    owner = results[0].stdout_text.strip()
    records = state.parse(results[1].stdout_text)
    probes = {d.name: results[2 + i].stdout_text.strip() == "ok" for i, d in enumerate(checked)}
    survey = SurveyAsk.of(host, units, images=False).survey(t, deployment, results[mine:])
    return HostView(survey=survey, owner=owner, records=records, probes=probes)


def look(t: Transport, deployment: str, host: str, units: Sequence[Desired], timeout_s: float = STEP_TIMEOUT_S) -> HostView:
    """``timeout_s``: for the survey; each probe adds its own deadline."""
    batch = steps(deployment, host, units)
    timeout = timeout_s + PROBE_TIMEOUT_S * len(probed(units, host))
    return read(t, deployment, host, units, run_batch(t, batch, timeout=timeout))
