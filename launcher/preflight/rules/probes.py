"""Probe rule family "probe": a host whose probe script failed."""

from __future__ import annotations

from launcher.preflight.rules.base import Check, PlanCase


def failed(case: PlanCase) -> list[Check]:
    assert case.probes is not None
    return [Check(host=name, unit="", name="probe", status="fail", message=f"host probe failed: {err}",
                  fix="see the error; the probe needs sh, ss, du, find and docker")
            for name, err in sorted(case.probes.errors.items())]
