"""fleet's one fan-out: a function per key on a bounded thread pool, every key's result kept.

:func:`each` is the mechanism: ``fn`` once per key on at most ``forks`` threads; each key's
result is its value or the :class:`FleetError` it raised (other exceptions are bugs and
propagate).  A slow, dead or hung key costs only its own timeouts.  Ctrl-C: nothing new is
started, ``on_interrupt`` runs (e.g. closing the connections, which aborts running commands),
what is running gets :data:`INTERRUPT_GRACE_S` to finish, and :class:`Interrupted` -- a
``KeyboardInterrupt`` -- is raised with the results of the keys that had finished; a clean-up's
fan-out (``cleanup=True``: releasing locks) lets every key finish on the first Ctrl-C and is
abandoned so only on a second.  The deploy
phases (``deploy/session.py``, ``deploy/health.py``, ``watch/loop.py``) use it as is: their
cleanup (unlocking, tearing down) then runs on new channels of the same connections.

:func:`run_all` is :func:`each` over hosts with a connection each: a host's result, named, is
:class:`Ok` (its value), :class:`Failed` (the function raised; a bug too, as one line) or
:class:`Unreachable` (no connection, host key refused, connection lost); on Ctrl-C it closes
every connection and raises :class:`FanoutInterrupted` with the hosts that had finished.
"""

from __future__ import annotations

import concurrent.futures as cf
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Generic, Iterator, Mapping, Protocol, Sequence, TypeVar

from launcher.errors import FleetError, HostKeyError, UnreachableError
from launcher.execute.transport import Transport
from launcher.model import Host

K = TypeVar("K")
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
# Hosts worked on at once.  The CPU-bound part (key exchanges) is capped separately by
# SshOptions.max_handshakes; past it, a host mostly waits on round trips, so more at once is
# faster: bench/fanout.py measured 64 hosts in 2.9 s with 64 at once vs 4.6 s with 8.
DEFAULT_FORKS = 64
# How long a Ctrl-C waits for what is running to unwind before the caller's cleanup: a hung
# remote command is not waited out (its connection ends it).
INTERRUPT_GRACE_S = 2.0


class Interrupted(KeyboardInterrupt, Generic[K, T]):
    """Ctrl-C during :func:`each`; ``done`` holds the keys that had finished, in key order."""

    def __init__(self, done: Mapping[K, T | FleetError]) -> None:
        super().__init__()
        self.done = done


def each(keys: Sequence[K], fn: Callable[[K], T], forks: int, *,
         on_interrupt: Callable[[], None] | None = None, cleanup: bool = False) -> dict[K, T | FleetError]:  # fmt: skip
    """``fn(key)`` for every key, at most ``forks`` at a time; see the module docstring.
    ``cleanup``: ``fn`` is what an interrupt leads to (releasing locks), so a first Ctrl-C lets
    every key finish and then raises :class:`Interrupted` holding all of them; a second one
    abandons it as for any other step."""
    if not keys:
        return {}
    pool = cf.ThreadPoolExecutor(max_workers=max(1, min(forks, len(keys))), thread_name_prefix="fleet")
    futures: dict[K, cf.Future[T]] = {}
    # Handing the keys out is inside the try: a Ctrl-C arriving then is an interrupt like any
    # other (keys already started are closed down and reported), not a bare KeyboardInterrupt
    # that leaves them running unseen (ci of 78feaae: a preflight's claims were left so).
    try:
        _hand_out(pool, fn, keys, futures)
        cf.wait(futures.values())
        pool.shutdown()
    except KeyboardInterrupt:
        if cleanup and _outwaited(pool, fn, keys, futures):
            pool.shutdown()
            every: dict[K, T | FleetError] = _results(futures)
            raise Interrupted(every) from None
        finished = {k: f for k, f in futures.items() if f.done() and not f.cancelled()}
        pool.shutdown(wait=False, cancel_futures=True)
        if on_interrupt is not None:
            on_interrupt()
        cf.wait([f for f in futures.values() if not f.cancelled()], timeout=INTERRUPT_GRACE_S)
        done: dict[K, T | FleetError] = _results(finished)
        raise Interrupted(done) from None
    return _results(futures)


def _hand_out(pool: cf.ThreadPoolExecutor, fn: Callable[[K], T], keys: Sequence[K],
              futures: dict[K, cf.Future[T]]) -> None:  # fmt: skip
    """Every key not handed out yet submitted, in key order, into ``futures``."""
    for k in keys:
        if k not in futures:
            futures[k] = pool.submit(fn, k)


def _outwaited(pool: cf.ThreadPoolExecutor, fn: Callable[[K], T], keys: Sequence[K],
               futures: dict[K, cf.Future[T]]) -> bool:  # fmt: skip
    """Every key handed out (those the interrupt cut off too) and waited for once more (a
    cleanup's first interrupt); False on a second one."""
    try:
        _hand_out(pool, fn, keys, futures)
        cf.wait(futures.values())
    except KeyboardInterrupt:
        return False
    return True


def _results(futures: Mapping[K, cf.Future[T]]) -> dict[K, T | FleetError]:
    out: dict[K, T | FleetError] = {}
    for k, fut in futures.items():
        err = fut.exception()
        if err is None:
            out[k] = fut.result()
        elif isinstance(err, FleetError):
            out[k] = err
        else:
            raise err  # a bug
    return out


def first_error(results: Mapping[K, T | FleetError]) -> FleetError | None:
    return next((v for v in results.values() if isinstance(v, FleetError)), None)


class Connector(Protocol):
    def connect(self, host: Host) -> Transport: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Ok(Generic[T_co]):
    host: Host
    value: T_co


@dataclass(frozen=True, slots=True, kw_only=True)
class Failed:
    host: Host
    error: Exception  # usually a FleetError (RemoteError, CommandTimeout); else a bug

    @property
    def message(self) -> str:
        """One line for the operator."""
        if isinstance(self.error, FleetError):
            return str(self.error)
        return f"{self.host.name}: internal error: {type(self.error).__name__}: {self.error}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Unreachable:
    host: Host
    error: UnreachableError | HostKeyError

    @property
    def reason(self) -> str:
        return str(self.error)


Outcome = Ok[T_co] | Failed | Unreachable


@dataclass(frozen=True, slots=True, kw_only=True)
class FanoutResult(Generic[T_co]):
    outcomes: tuple[Outcome[T_co], ...]  # in the order of the hosts given

    @property
    def ok(self) -> tuple[Ok[T_co], ...]:
        return tuple(o for o in self.outcomes if isinstance(o, Ok))

    @property
    def failed(self) -> tuple[Failed, ...]:
        return tuple(o for o in self.outcomes if isinstance(o, Failed))

    @property
    def unreachable(self) -> tuple[Unreachable, ...]:
        return tuple(o for o in self.outcomes if isinstance(o, Unreachable))

    @property
    def all_ok(self) -> bool:
        return len(self.ok) == len(self.outcomes)

    def values(self) -> dict[str, T_co]:
        """Host name -> value, for the hosts that succeeded."""
        return {o.host.name: o.value for o in self.ok}


class FanoutInterrupted(KeyboardInterrupt, Generic[T]):
    """Ctrl-C during :func:`run_all`; ``partial`` holds the hosts that had finished."""

    def __init__(self, partial: FanoutResult[T]) -> None:
        super().__init__()
        self.partial = partial


def _one(host: Host, fn: Callable[[Host, Transport], T], connector: Connector) -> Outcome[T]:
    try:
        transport = connector.connect(host)
    except (UnreachableError, HostKeyError) as err:
        return Unreachable(host=host, error=err)
    except Exception as err:  # bad ssh settings (InputError) and the like: this host only
        return Failed(host=host, error=err)
    try:
        return Ok(host=host, value=fn(host, transport))
    except UnreachableError as err:
        return Unreachable(host=host, error=err)
    except Exception as err:  # one host's failure must not lose the others' results
        return Failed(host=host, error=err)


def precheck(connector: object, hosts: Sequence[Host]) -> None:
    """Bad connection settings stop the command before any host is contacted, as one error
    (the connector's ``check_routes``, when it has one: SSH's does).  ``connector``: a
    connector, or its bound ``connect`` method (what deploy sessions are given)."""
    owner = getattr(connector, "__self__", connector)
    check = getattr(owner, "check_routes", None)
    if callable(check):
        check(hosts)


def reopen(connector: object) -> Connector | None:
    """A new connector like ``connector``, for clean-up after a Ctrl-C closed its connections
    (:func:`run_all` does): its ``reopened()`` (SSH's, or a wrapper's asking the connector it
    wraps); None when it has none.  The caller closes it."""
    fresh = getattr(connector, "reopened", None)
    return fresh() if callable(fresh) else None


@contextmanager
def cleanup_connector(connector: Connector, interrupted: bool) -> Iterator[Connector]:
    """What a clean-up fan-out runs on: ``connector``, or, after a Ctrl-C (``interrupted``), a
    reopened one (:func:`reopen`; ``connector`` when it cannot be), closed after."""
    fresh = reopen(connector) if interrupted else None
    try:
        yield fresh or connector
    finally:
        if fresh is not None:
            fresh.close()


def run_all(
    hosts: Sequence[Host],
    fn: Callable[[Host, Transport], T],
    *,
    connector: Connector,
    forks: int = DEFAULT_FORKS,
) -> FanoutResult[T]:
    """Call ``fn(host, transport)`` for every host, at most ``forks`` at a time.  Connections
    stay open in ``connector`` for the next phase; closing them is the caller's job."""
    if forks < 1:
        raise ValueError(f"forks must be >= 1, got {forks}")
    if not hosts:
        return FanoutResult(outcomes=())
    precheck(connector, hosts)
    try:
        done = each(range(len(hosts)), lambda i: _one(hosts[i], fn, connector), forks, on_interrupt=connector.close)
    except Interrupted as stop:
        raise FanoutInterrupted(FanoutResult(outcomes=_outcomes(stop.done))) from None
    return FanoutResult(outcomes=_outcomes(done))


def _outcomes(done: Mapping[int, Outcome[T] | FleetError]) -> tuple[Outcome[T], ...]:
    """The hosts' outcomes in host order (:func:`_one` keeps every exception as its host's
    outcome, so no result is an error)."""
    return tuple(o for o in done.values() if not isinstance(o, FleetError))
