"""``fleet up`` as library code: preflight gate -> warm -> deploy (plain, or rolling for a
``rollout: rolling`` playbook) -> scrape targets.

Contract: :func:`up` touches the hosts in that order over one connector (the gate's connections
are the deploy's) and prints nothing: what the operator sees is the caller's, through
:class:`UpEvents`, called in the order the steps run.  A failed gate (not ``--check``) ends the
flow before anything is warmed or started, with the gate's exit code; ``--check`` goes on past
it to every host that answers and ends with exit 1 at best.  Each host is tried once per call:
one the gate could not reach is not connected to again by the deploy or the ``--check`` pass,
which report it unreachable with the gate's error (:mod:`launcher.execute.once`; the memory
ends with the call, the connector's connections do not).  The flags' own consistency
(``--diff`` without ``--check``, ...) is checked by the caller before any host is asked.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Protocol, Sequence

from launcher.deploy import orchestrate
from launcher.deploy.orchestrate import Options, Report
from launcher.deploy.owner import owner_of
from launcher.deploy.publish import TargetsHook, after_change
from launcher.deploy.session import Target
from launcher.errors import ExitCode
from launcher.execute.once import TriedOnce
from launcher.execute.ssh import SshConnector
from launcher.output import Progress
from launcher.pipeline import Inputs, deployment, target_of, unlocked_by
from launcher.preflight.run import PreflightReport, run_preflight
from launcher.rolling.options import rolling_options, with_bench_gate
from launcher.rolling.roll import RollReport, up_rolling
from launcher.rolling.routers import clients, drain_router_urls
from launcher.weights.wanted import deployment_needs
from launcher.weights.warm import Warmed, warm


class UpEvents(Protocol):
    """What the flow tells its caller, in this order (each at most once)."""

    def note(self, line: str) -> None:
        """A progress note of the gate (preflight's rounds)."""

    def drain_note(self, line: str) -> None:
        """Which routers a rolling rollout drains through, or leaves out (not answering)."""

    def preflight(self, report: PreflightReport) -> None:
        """The gate's report, before anything is warmed or started."""

    def warmed(self, warmed: Sequence[Warmed]) -> None:
        """``--warm``: what was read into the page caches."""

    def deployed(self, result: UpResult) -> None:
        """The deploy's report (plain or rolling), before the scrape targets are rewritten."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UpRequest:
    inputs: Inputs
    playbook_path: str
    inventory_path: str
    secrets: Mapping[str, str]  # resolved values (never in argv or logs)
    options: Options  # forks, check, diff, timeout_s, break_lock, unknown_secrets
    limit: str | None = None
    preflight: bool = True  # --skip-preflight: False
    warm: bool = False
    take_over: bool = False
    router_urls: tuple[str, ...] = ()
    bench_gate: bool | None = None
    # The scrape targets' hook of the whole deployment (None: no targets file).
    targets: Callable[[Target], TargetsHook | None] = field(default=lambda _: None)


@dataclass(frozen=True, slots=True, kw_only=True)
class UpResult:
    exit_code: int
    target: Target | None = None  # None: the gate stopped the flow
    preflight: PreflightReport | None = None
    report: Report | None = None  # a plain deploy (or --check)
    rolled: RollReport | None = None  # a rolling rollout


def up(request: UpRequest, connector: SshConnector, events: UpEvents,
       progress: Callable[[], AbstractContextManager[Progress]]) -> UpResult:  # fmt: skip
    """Runs the flow.  ``progress``: the deploy's progress display, opened after the gate and the
    warming (they report through ``events``) and closed before ``events.deployed``."""
    inputs, options = request.inputs, request.options
    # A host the gate could not reach costs its connect timeout once, not again in the deploy or
    # the --check pass (which goes on past a failed gate).  This call's only: the memory is not
    # the connector's, whose owner may retry later.
    once = TriedOnce(connector)
    the_plan, checked = None, None
    if request.preflight:
        # Planned with the facts the gate just gathered (gid_index: auto resolves there).
        checked = run_preflight(inputs.inventory, inputs.catalog, inputs.playbook, once, forks=options.forks,
                                level="cheap", note=events.note, limit=request.limit,
                                force=options.break_lock)  # fmt: skip
        events.preflight(checked)
        if checked.failed and not options.check:
            return UpResult(exit_code=int(checked.exit_code), preflight=checked)
        the_plan = checked.plan
    if request.warm:
        events.warmed(warm(inputs.inventory, deployment_needs(inputs, the_plan, request.limit), connector,
                           forks=options.forks))  # fmt: skip
    dep = deployment(inputs, the_plan)
    target = replace(unlocked_by(target_of(dep, request.limit, request.secrets), request.playbook_path,
                                 request.inventory_path),
                     owner=owner_of(request.playbook_path), take_over=request.take_over)  # fmt: skip
    # The targets cover the whole deployment, whatever --limit touched.
    hook = None if options.check else request.targets(target_of(dep))
    with progress() as shown:
        if not options.check and inputs.playbook.rollout.strategy == "rolling":
            # Changed groups restart in batches, drained out of their routers.
            roll_options = rolling_options(inputs.playbook, rolling=True, max_unavailable=None, drain_timeout_s=None,
                                           forks=options.forks, timeout_s=options.timeout_s,
                                           break_lock=options.break_lock, after_batch=hook)  # fmt: skip
            roll_options = with_bench_gate(roll_options, inputs.playbook, target, request.bench_gate)
            routers = clients(drain_router_urls(request.router_urls, target, events.drain_note))
            rolled = up_rolling(target, once.connect, routers, roll_options, shown)
            result = UpResult(exit_code=int(rolled.exit_code), target=target, preflight=checked, rolled=rolled)
        else:
            report = orchestrate.up(target, once.connect, options, shown)
            code = int(report.exit_code)
            if checked is not None and checked.failed and code == ExitCode.OK:
                code = int(ExitCode.FAILED)  # `fleet up` would have stopped at the gate
            result = UpResult(exit_code=code, target=target, preflight=checked, report=report)
    events.deployed(result)
    return replace(result, exit_code=after_change(hook, result.exit_code))
