"""Host rule family "ssh" / "facts": the host answered and its facts were gathered; every other
host rule reads them, so without them this is the host's only verdict."""

from __future__ import annotations

from launcher.preflight.rules.base import Check, HostCase


def host(case: HostCase) -> list[Check]:
    if case.facts is not None:
        return []
    h = case.host.name
    if case.unreachable:
        return [Check(host=h, unit="", name="ssh", status="fail", message=f"unreachable: {case.unreachable}",
                      fix=f"check SSH to {h}: fleet run -i INVENTORY {h} -- true")]
    return [Check(host=h, unit="", name="facts", status="fail",
                  message="no facts gathered", fix=f"run: fleet facts -i INVENTORY --limit {h}")]
