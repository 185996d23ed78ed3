"""Gathering facts: one SSH round per host (the gather script of :mod:`launcher.facts.host`), each
answer parsed, timed for the clock offset and cached (:mod:`launcher.facts.cache`).  This is
``fleet facts``, and the first round of preflight.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from launcher.errors import ExitCode, HostKeyError, RemoteError, UnreachableError
from launcher.execute.fanout import DEFAULT_FORKS, Connector, Failed, Ok, Unreachable, run_all
from launcher.execute.transport import Result, Transport
from launcher.facts import cache as facts_cache
from launcher.facts.host import HostFacts, gather_script
from launcher.model import Host, Inventory

GATHER_TIMEOUT_S = 120.0


def failure(result: Result, label: str) -> RemoteError:
    """The error of a probe that printed nothing usable, named by ``label`` (never the whole
    script): exit status and the last stderr line."""
    tail = result.stderr_text.strip() or result.stdout_text.strip()
    return RemoteError(result.host, label, result.exit_status, tail[-500:])


def outcome_reason(outcome: Unreachable | Failed) -> str:
    """One line: why a host has no result (without the host name prefix)."""
    if isinstance(outcome, Unreachable):
        err = outcome.error
        return err.reason if isinstance(err, UnreachableError) else str(err).removeprefix(f"{outcome.host.name}: ")
    return outcome.message.removeprefix(f"{outcome.host.name}: ")


@dataclass(frozen=True, slots=True, kw_only=True)
class FactsRound:
    entries: Mapping[str, facts_cache.Cached]  # host -> fresh facts, inventory order
    unreachable: Mapping[str, str] = field(default_factory=dict)  # host -> why
    order: tuple[str, ...] = ()  # every host asked, inventory order

    @property
    def facts(self) -> dict[str, HostFacts]:
        return facts_cache.facts_of(self.entries)

    @property
    def exit_code(self) -> ExitCode:
        if not self.unreachable:
            return ExitCode.OK
        return ExitCode.PARTIAL if self.entries else ExitCode.FAILED


def _gather_one(host: Host, transport: Transport) -> facts_cache.Cached:
    script = gather_script((host.spec.models_dir, host.spec.cache_dir))
    sent = time.time()
    result = transport.run(("sh", "-c", script), timeout=GATHER_TIMEOUT_S)
    received = time.time()
    if not result.stdout_text.strip():
        raise failure(result, "facts gather script")
    return facts_cache.entry(host, result.stdout_text, sent, received)


def gather_facts(inventory: Inventory, hosts: Sequence[Host], connector: Connector, *,
                 forks: int = DEFAULT_FORKS, cache: bool = True) -> FactsRound:
    """One gather round on ``hosts``; fresh entries are written to the facts cache."""
    result = run_all(hosts, _gather_one, connector=connector, forks=forks)
    entries: dict[str, facts_cache.Cached] = {}
    unreachable: dict[str, str] = {}
    for outcome in result.outcomes:
        if isinstance(outcome, Ok):
            entries[outcome.host.name] = outcome.value
            if cache:
                facts_cache.store(inventory, outcome.value)
        elif isinstance(outcome, Unreachable) and isinstance(outcome.error, HostKeyError):
            # An unknown or changed host key is a refusal, not a flaky host: stop before
            # anything runs anywhere, as every other command does (exit 2).
            raise outcome.error
        else:
            unreachable[outcome.host.name] = outcome_reason(outcome)
    return FactsRound(entries=entries, unreachable=unreachable, order=tuple(h.name for h in hosts))
