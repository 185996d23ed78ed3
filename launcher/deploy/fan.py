"""Bounded per-host parallelism for the deploy phases.

Contract: :func:`each` calls ``fn`` once per key on at most ``forks`` threads and returns every
key's value or its :class:`FleetError` (other exceptions are bugs and propagate).  On Ctrl-C it
cancels what has not started, gives what has :data:`INTERRUPT_GRACE_S` to finish and returns
to the caller's cleanup (unlocking, tearing down) without waiting for a hung remote command:
that cleanup runs on new channels of the same connections, and a command still running is
ended when the connections close.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Callable, Sequence, TypeVar

from launcher.errors import FleetError

K = TypeVar("K")
T = TypeVar("T")

INTERRUPT_GRACE_S = 2.0


def each(keys: Sequence[K], fn: Callable[[K], T], forks: int) -> dict[K, T | FleetError]:
    if not keys:
        return {}
    pool = ThreadPoolExecutor(max_workers=max(1, min(forks, len(keys))), thread_name_prefix="fleet")
    futures: dict[K, Future[T]] = {k: pool.submit(fn, k) for k in keys}
    try:
        out: dict[K, T | FleetError] = {}
        for k, fut in futures.items():
            try:
                out[k] = fut.result()
            except FleetError as err:
                out[k] = err
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        wait(futures.values(), timeout=INTERRUPT_GRACE_S)
        raise
    pool.shutdown(wait=True)
    return out


def first_error(results: dict[K, T | FleetError]) -> FleetError | None:
    return next((v for v in results.values() if isinstance(v, FleetError)), None)
