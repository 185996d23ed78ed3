"""Free space against what a copy still needs, per host filesystem.  Pure."""

from __future__ import annotations

from typing import Sequence


def gib(n: int) -> str:
    return f"{n / 1024**3:.2f} GiB" if n >= 1024**3 else f"{n / 1024**2:.1f} MiB"


def refusals(host: str, wants: Sequence[tuple[str, int, int, int]]) -> list[str]:
    """``wants``: (model dir, its filesystem's id, bytes free there, bytes still to write there).
    One line per filesystem
    whose free space is below the sum of what its dirs need: host, path(s), need and have.
    A file being replaced counts whole: rsync writes the new copy before it drops the old."""
    by_fs: dict[int, tuple[list[str], int, int]] = {}
    for path, fs, free, need in wants:
        paths, total, _ = by_fs.setdefault(fs, ([], 0, free))
        paths.append(path)
        by_fs[fs] = (paths, total + need, free)
    return [f"{host}: {' + '.join(paths)} needs {gib(need)} ({need} bytes), has {gib(free)} ({free} bytes) free"
            for paths, need, free in by_fs.values() if need > free]
