"""Golden renders: every shipped plan (see corpus) rendered with each unit's own runtime and with
``runtime="systemd"``, one text file per host: ``tests/golden/render/<id>/[systemd/]<host>.txt``.
``UPDATE_GOLDEN=1 python -m pytest tests/render`` rewrites them; review the diff."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from launcher.model import Runtime
from launcher.render import RenderedHost, render
from tests.render.corpus import plan_for, plan_ids

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "render"
RUNTIMES: tuple[tuple[str, Runtime | None], ...] = (("", None), ("systemd", "systemd"))


def listing(host: RenderedHost) -> str:
    units = [
        {"unit": u.name, "runtime": u.runtime, "render_hash": u.render_hash, "start": u.start, "stop": u.stop, "files": u.files}
        for u in host.units
    ]
    parts = [json.dumps(units, indent=1, sort_keys=True), "\n"]
    for f in host.files:
        parts += [f"\n===== {f.path} {f.mode:04o}\n", f.content]
    return "".join(parts)


def expected_files(plan_id: str) -> dict[Path, str]:
    out: dict[Path, str] = {}
    for sub, runtime in RUNTIMES:
        for name, host in render(plan_for(plan_id), runtime).hosts.items():
            out[GOLDEN / plan_id / sub / f"{name}.txt"] = listing(host)
    return out


@pytest.mark.parametrize("plan_id", plan_ids())
def test_render_golden(plan_id: str) -> None:
    files = expected_files(plan_id)
    assert render(plan_for(plan_id)) == render(plan_for(plan_id))
    if os.environ.get("UPDATE_GOLDEN") == "1":
        for stale in (GOLDEN / plan_id).rglob("*.txt"):
            if stale not in files:
                stale.unlink()
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    on_disk = {p for p in (GOLDEN / plan_id).rglob("*.txt")}
    assert on_disk == set(files), f"{GOLDEN / plan_id}: files differ (UPDATE_GOLDEN=1 rewrites them)"
    for path, text in files.items():
        assert path.read_text(encoding="utf-8") == text, f"{path} differs (UPDATE_GOLDEN=1 rewrites it)"


def test_no_stale_golden_dirs() -> None:
    stale = sorted(p.name for p in GOLDEN.iterdir() if p.is_dir() and p.name not in set(plan_ids()))
    assert stale == []


def test_golden_size_is_sane() -> None:
    total = sum(p.stat().st_size for p in GOLDEN.rglob("*.txt"))
    assert 0 < total < 5_000_000
