"""A connector that tries each host it could not reach once: the memory of one command.

``fleet up --check`` goes on past a failed preflight gate to its check pass, and both connect to
every host: a host whose SSH port drops packets cost its connect timeout twice.
:class:`TriedOnce` wraps the command's connector: a host whose connect raised
:class:`~launcher.errors.UnreachableError` is answered, for the rest of the wrapper's life, with
that error again (the same one line) instead of a second attempt.  Everything else is the
wrapped connector's: its connections and their reuse, host keys (a refused key is not
remembered: it costs no timeout and stops the command anyway), ``check_routes``.

Contract: the memory lasts as long as the wrapper, and the wrapper as long as one command
(:func:`launcher.flows.up.up` makes one per call, for its gate and its deploy or check pass).
Never wrap a connector that outlives a command: ``fleet watch`` keeps one connector for its whole
loop and must try a host that was down again on its next round.  Only a failed *connect* is
remembered: a connection lost later (mid-command) is not, so the next connect to that host
reconnects as the wrapped connector does.
"""

from __future__ import annotations

import threading
from typing import Sequence

from launcher.errors import UnreachableError
from launcher.execute.fanout import Connector, precheck, reopen
from launcher.execute.transport import Transport
from launcher.model import Host


class TriedOnce:
    """``connector`` with each unreachable host tried once (see the module docstring);
    thread-safe: a second connect to a host while the first is under way waits for its
    outcome."""

    def __init__(self, connector: Connector) -> None:
        self._connector = connector
        self._lock = threading.Lock()
        self._host_locks: dict[str, threading.Lock] = {}
        self._unreachable: dict[str, UnreachableError] = {}

    def connect(self, host: Host) -> Transport:
        """The wrapped connector's transport; raises the remembered ``UnreachableError`` (a new
        one with the same host, reason and debug text) for a host it could not reach before."""
        with self._lock:
            host_lock = self._host_locks.setdefault(host.name, threading.Lock())
        with host_lock:
            seen = self._unreachable.get(host.name)
            if seen is not None:
                # A new exception: re-raising the first would grow its traceback each time.
                raise UnreachableError(seen.host, seen.reason, debug=seen.debug)
            try:
                return self._connector.connect(host)
            except UnreachableError as err:
                self._unreachable[host.name] = err
                raise

    def check_routes(self, hosts: Sequence[Host]) -> None:
        """The wrapped connector's route check (see :func:`launcher.execute.fanout.precheck`)."""
        precheck(self._connector, hosts)

    def reopened(self) -> Connector | None:
        """The wrapped connector reopened (:func:`launcher.execute.fanout.reopen`)."""
        return reopen(self._connector)

    def close(self) -> None:
        self._connector.close()
