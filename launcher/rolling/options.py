"""A rollout's options: the command's flags over the playbook's ``rollout`` section, and its
bench gate.

Contract: pure apart from :func:`with_bench_gate`, which builds the gate (``launcher/bench``);
a refused combination is a :class:`UsageError` before any host is asked.
"""

from __future__ import annotations

from dataclasses import replace

from launcher.deploy.session import Target
from launcher.errors import UsageError
from launcher.model import Playbook
from launcher.rolling.roll import RollOptions


def rolling_options(
    playbook: Playbook,
    *,
    rolling: bool,
    max_unavailable: str | None,
    drain_timeout_s: float | None,
    **kw: object,
) -> RollOptions:
    """Flags over the playbook's ``rollout``; without --rolling and a rolling rollout, one batch."""
    ro = playbook.rollout
    if rolling or ro.strategy == "rolling":
        budget: str | int = max_unavailable if max_unavailable is not None else ro.max_unavailable
        return RollOptions(
            max_unavailable=budget,
            drain_timeout_s=drain_timeout_s if drain_timeout_s is not None else float(ro.drain_timeout_s),
            **kw,  # type: ignore[arg-type]
        )
    if max_unavailable is not None:
        raise UsageError("--max-unavailable needs --rolling (or rollout: {strategy: rolling} in the playbook)")
    kw = dict(kw, force=True)
    return RollOptions(
        max_unavailable="100%",
        drain_timeout_s=drain_timeout_s if drain_timeout_s is not None else float(ro.drain_timeout_s),
        **kw,  # type: ignore[arg-type]
    )


def bench_gate_wanted(playbook: Playbook, flag: bool | None) -> bool:
    """``--bench-gate`` / ``--no-bench-gate``, else the playbook's ``rollout.bench_gate``.  A PD
    deployment rolls by cohort switch, which is not gated (docs/bench.md): refused."""
    if not (playbook.rollout.bench_gate is not None if flag is None else flag):
        return False
    if "prefill" in playbook.placement:
        raise UsageError(f"--bench-gate: PD deployment {playbook.name} rolls by cohort switch, which is not "
                         "bench-gated (docs/bench.md)")  # fmt: skip
    return True


def with_bench_gate(options: RollOptions, playbook: Playbook, target: Target, flag: bool | None) -> RollOptions:
    """``options`` with the rollout's bench gate when :func:`bench_gate_wanted` (the caller has
    checked that the rollout is rolling)."""
    if not bench_gate_wanted(playbook, flag):
        return options
    from launcher.bench.gate import gate_for

    return replace(options, gate=gate_for(playbook, target.deployment, target.secrets))

