"""Free space against what a copy still needs, per host filesystem.  Pure."""

from __future__ import annotations

from typing import Sequence

from launcher.weights.manifest import Listing


def gib(n: int) -> str:
    return f"{n / 1024**3:.2f} GiB" if n >= 1024**3 else f"{n / 1024**2:.1f} MiB"


def refusals(host: str, wants: Sequence[tuple[str, Listing, int]]) -> list[str]:
    """``wants``: (model dir, its scan, bytes still to write there).  One line per filesystem
    whose free space is below the sum of what its dirs need: host, path(s), need and have.
    A file being replaced counts whole: rsync writes the new copy before it drops the old."""
    by_fs: dict[int, tuple[list[str], int, int]] = {}
    for path, listing, need in wants:
        paths, total, free = by_fs.setdefault(listing.fs, ([], 0, listing.free))
        paths.append(path)
        by_fs[listing.fs] = (paths, total + need, free)
    return [f"{host}: {' + '.join(paths)} needs {gib(need)} ({need} bytes), has {gib(free)} ({free} bytes) free"
            for paths, need, free in by_fs.values() if need > free]
