"""Bounded per-host parallelism for the deploy phases.

Contract: :func:`each` calls ``fn`` once per key on at most ``forks`` threads and returns every
key's value or its :class:`FleetError` (other exceptions are bugs and propagate).  On Ctrl-C it
cancels what has not started and waits for what has, so no transport is still in use when the
caller's cleanup (unlocking, tearing down) runs.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

from launcher.errors import FleetError

K = TypeVar("K")
T = TypeVar("T")


def each(keys: Sequence[K], fn: Callable[[K], T], forks: int) -> dict[K, T | FleetError]:
    if not keys:
        return {}
    pool = ThreadPoolExecutor(max_workers=max(1, min(forks, len(keys))), thread_name_prefix="fleet")
    try:
        futures: dict[K, Future[T]] = {k: pool.submit(fn, k) for k in keys}
        out: dict[K, T | FleetError] = {}
        for k, fut in futures.items():
            try:
                out[k] = fut.result()
            except FleetError as err:
                out[k] = err
        return out
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def first_error(results: dict[K, T | FleetError]) -> FleetError | None:
    return next((v for v in results.values() if isinstance(v, FleetError)), None)
