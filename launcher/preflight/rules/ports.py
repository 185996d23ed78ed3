"""Unit rule family "ports": the ports a unit will listen on are free on its host (unless the
unit itself, already running, holds them)."""

from __future__ import annotations

from typing import Mapping

from launcher.model import Unit
from launcher.preflight.rules.base import Check, PlanCase, verdict


def unit(case: PlanCase, u: Unit) -> list[Check]:
    assert case.probes is not None
    running = u.name in case.probes.running_units.get(u.host, frozenset())
    busy = case.probes.listening_ports.get(u.host)
    if busy is None or running or not u.ports:
        return []
    taken = sorted(p for p in set(u.ports.values()) if p in busy)
    names = {p: n for n, p in u.ports.items()}
    return [verdict(u.host, u.name, "ports", not taken,
                   "ports free: " + ", ".join(str(p) for p in sorted(set(u.ports.values()))),
                   "port " + ", ".join(f"{p} ({names[p]})" for p in taken) + " already in use",
                   "stop what listens there (ss -ltnp) or change the playbook's ports")]


def probe_sections() -> list[tuple[str, str]]:
    """The host probe's sections this family reads: ``ports`` (listening TCP ports) and
    ``units`` (our running units, either runtime's)."""
    return [
        ("ports", "(ss -Htln 2>/dev/null || netstat -tln 2>/dev/null) | awk '{print $4}'"),
        ("units", "docker ps --format '{{.Names}}' 2>/dev/null; "
                 "systemctl list-units --type=service --state=active --plain --no-legend 'fleet-*' "
                 "2>/dev/null | awk '{print $1}'; true"),
    ]


def parse_probe(s: Mapping[str, tuple[int, str]]) -> tuple[frozenset[int], frozenset[str]]:
    """(listening ports, running units) from the probe's sections."""
    ports: set[int] = set()
    for line in s.get("ports", (0, ""))[1].splitlines():
        port = line.rsplit(":", 1)[-1] if ":" in line else ""
        if port.isdigit():
            ports.add(int(port))
    running = frozenset(
        ln.strip().removesuffix(".service") for ln in s.get("units", (0, ""))[1].splitlines() if ln.strip()
    )
    return frozenset(ports), running
