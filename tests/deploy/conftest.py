from __future__ import annotations

import pytest

from tests.deploy.simhost import SimHost


class SimFleet:
    def __init__(self) -> None:
        self.hosts: dict[str, SimHost] = {}
        self.journal: list[tuple[str, str, str]] = []  # every host's holds and stops, in order
        self.events: list[tuple[str, str, str]] = []  # every host's stops, starts and health waits, in order

    def __getitem__(self, name: str) -> SimHost:
        if name not in self.hosts:
            h = SimHost(name)
            h.journal = self.journal
            h.events = self.events
            serves = {"h1": "fleet-demo-rank-r0", "h3": "fleet-demo-router"}
            h.health_urls = {f"http://{name}:30000/health": serves.get(name, "")}
            self.hosts[name] = h
        return self.hosts[name]

    def connect(self, host: object) -> SimHost:
        return self[getattr(host, "name")]


@pytest.fixture
def sim() -> SimFleet:
    return SimFleet()
