from __future__ import annotations

import pytest

from tests.deploy.simhost import SimHost


class SimFleet:
    def __init__(self) -> None:
        self.hosts: dict[str, SimHost] = {}

    def __getitem__(self, name: str) -> SimHost:
        if name not in self.hosts:
            h = SimHost(name)
            serves = {"h1": "fleet-demo-rank-r0", "h3": "fleet-demo-router"}
            h.health_urls = {f"http://{name}:30000/health": serves.get(name, "")}
            self.hosts[name] = h
        return self.hosts[name]

    def connect(self, host: object) -> SimHost:
        return self[getattr(host, "name")]


@pytest.fixture
def sim() -> SimFleet:
    return SimFleet()
