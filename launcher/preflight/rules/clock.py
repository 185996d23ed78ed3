"""Probe rule family "clock": each host's clock is within a second of the control node's."""

from __future__ import annotations

from launcher.preflight.rules.base import Check, PlanCase, verdict


CLOCK_TOLERANCE_S = 1.0



def probe(case: PlanCase) -> list[Check]:
    assert case.probes is not None
    out: list[Check] = []
    for name, (off, unc) in sorted(case.probes.clock_offset_s.items()):
        ok = abs(off) - unc <= CLOCK_TOLERANCE_S
        out.append(verdict(name, "", "clock", ok, f"clock offset {off:+.2f}s (±{unc:.2f}s)",
                          f"clock is {off:+.2f}s (±{unc:.2f}s) off the control node",
                          "run chrony/ntp on every host", bad_status="warn"))
    return out
