"""Probe rule family "listen" / "reach <port>": every rank reaches, from its data IP, the ports
it must reach on other ranks' hosts before it can start."""

from __future__ import annotations

from launcher.preflight.rules.base import Check, PlanCase, ProbeResults


def probe(case: PlanCase) -> list[Check]:
    assert case.probes is not None
    return _reach_checks(case.probes)


def _reach_checks(probes: ProbeResults) -> list[Check]:
    out: list[Check] = []
    for (host, key), err in sorted(probes.listener_errors.items()):
        out.append(Check(host=host, unit="", name="listen", status="fail",
                         message=f"cannot listen on {key} for the reachability probe: {err}",
                         fix="the data IP must be on this host and the port free"))
    for r in probes.reach:
        t = r.target
        name = f"reach {t.label}"
        if r.unreachable:
            down = r.unreachable
            out.append(Check(host=r.client, unit=r.unit, name=name, status="warn",
                             message=f"{t.label} {t.key} on {t.host} not probed: {down} is unreachable over SSH "
                             f"({r.error})", fix=f"check SSH to {down}: fleet run -i INVENTORY {down} -- true"))
        elif not r.probed:
            out.append(Check(host=r.client, unit=r.unit, name=name, status="warn",
                             message=f"{t.label} {t.key} on {t.host} not probed: {r.error}",
                             fix="install python3 on both hosts (the probe uses its standard library)"))
        elif r.error is None:
            out.append(Check(host=r.client, unit=r.unit, name=name, status="pass",
                             message=f"reaches {t.label} {t.key} on {t.host}"))
        else:
            out.append(Check(host=r.client, unit=r.unit, name=name, status="fail",
                             message=f"cannot reach {t.label} {t.key} on {t.host} ({t.group}): {r.error}",
                             fix=f"open tcp/{t.port} from this host's data IP to {t.ip} (routes, firewall)"))
    return out
