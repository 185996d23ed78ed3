"""The watch's own Prometheus endpoint (``--metrics-port``): groups per state, recreations,
the last successful survey, time to recover.

Metrics (all labelled with ``deployment``):

- ``fleet_watch_groups{state}``: groups per decision of the last survey (healthy, recreate,
  register, wait, give-up, failed, unreachable, not-deployed, drift, unready);
- ``fleet_watch_recreations_total{group,outcome}``: recreations (``recovered`` / ``failed``);
- ``fleet_watch_last_survey_timestamp_seconds``: when a survey of every reachable host last
  finished;
- ``fleet_watch_paused``: 1 while an operator's deploy holds the lock;
- ``fleet_watch_time_to_recover_seconds``: from the survey that first saw a group broken until
  it served again (histogram).

Contract: its own registry (nothing of the process's default one); :meth:`Metrics.serve` binds
the port and returns; the HTTP thread is a daemon.
"""

from __future__ import annotations

from typing import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from launcher.watch.decide import Kind
from launcher.watch.events import WatchEvent

STATES: tuple[Kind, ...] = ("healthy", "recreate", "register", "wait", "give-up", "failed", "unreachable",
                            "not-deployed", "drift", "unready")  # fmt: skip


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.groups = Gauge("fleet_watch_groups", "Groups per state at the last survey", ["deployment", "state"],
                            registry=self.registry)  # fmt: skip
        self.recreations = Counter("fleet_watch_recreations", "Group recreations by outcome",
                                   ["deployment", "group", "outcome"], registry=self.registry)  # fmt: skip
        self.last_survey = Gauge("fleet_watch_last_survey_timestamp_seconds", "End of the last survey",
                                 ["deployment"], registry=self.registry)  # fmt: skip
        self.paused = Gauge("fleet_watch_paused", "1 while another deploy holds the lock", ["deployment"],
                            registry=self.registry)  # fmt: skip
        self.recover = Histogram("fleet_watch_time_to_recover_seconds", "Broken seen to serving again",
                                 ["deployment"], registry=self.registry,
                                 buckets=(5, 10, 20, 30, 60, 120, 300, 600, 1200, 3600))  # fmt: skip

    def serve(self, port: int, address: str) -> None:
        start_http_server(port, addr=address, registry=self.registry)

    def surveyed(self, deployment: str, counts: Mapping[str, int], at: float) -> None:
        for s in STATES:
            self.groups.labels(deployment, s).set(counts.get(s, 0))
        self.last_survey.labels(deployment).set(at)

    def __call__(self, event: WatchEvent) -> None:
        if event.kind in ("recovered", "recreate-failed"):
            outcome = "recovered" if event.kind == "recovered" else "failed"
            self.recreations.labels(event.deployment, event.group, outcome).inc()
        if event.kind == "recovered" and isinstance(ttr := event.data.get("time_to_recover_s"), (int, float)):
            self.recover.labels(event.deployment).observe(float(ttr))
        if event.kind in ("paused", "resumed"):
            self.paused.labels(event.deployment).set(1 if event.kind == "paused" else 0)
