"""The image cache's locking: a template in use is never pruned by a concurrent build of another
hash; build failures are one-line errors.  No root or docker needed: the build is replaced."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from launcher.errors import FleetError
from launcher.sandbox import image


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FLEET_SANDBOX_CACHE", str(tmp_path))
    monkeypatch.setattr(image, "base_hash", lambda: "base0")

    def fake_build(cache: Path, digest: str, path: Path, extra: image.ExtraImage | None) -> None:
        path.mkdir()
        (path / "built").write_text(digest)

    monkeypatch.setattr(image, "_build", fake_build)
    return tmp_path / image.IMAGES


def use(monkeypatch: pytest.MonkeyPatch, digest: str) -> None:
    monkeypatch.setattr(image, "source_hash", lambda: digest)


def test_a_held_template_survives_builds_of_other_hashes(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use(monkeypatch, "aaaa")
    with image.template() as held:
        assert (held / "built").read_text() == "aaaa"
        os.utime(held, (1, 1))  # the least recently used of all
        for digest in ("bbbb", "cccc", "dddd"):
            use(monkeypatch, digest)
            with image.template():
                time.sleep(0.01)  # distinct mtimes
        assert held.is_dir(), "in use: never pruned"
    use(monkeypatch, "eeee")
    with image.template():
        pass
    kept = sorted(p.name for p in cache.glob("template-*") if p.is_dir())
    assert kept == ["template-cccc", "template-dddd", "template-eeee"]


def test_older_layouts_outside_images_are_left_alone(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = cache.parent / "template-0ld"  # another checkout's template, older code
    other.mkdir(parents=True)
    for digest in ("1111", "2222", "3333", "4444"):
        use(monkeypatch, digest)
        with image.template():
            pass
    assert other.is_dir()


def test_a_failed_build_step_is_one_line(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(cache: Path, tar: Path) -> None:
        raise subprocess.CalledProcessError(2, ["tar", "-C", "/x", "-cf", "y.part", "."])

    monkeypatch.undo()
    monkeypatch.setenv("FLEET_SANDBOX_CACHE", str(cache.parent))
    monkeypatch.setattr(image, "source_hash", lambda: "ffff")
    monkeypatch.setattr(image, "_build_tar", failing)
    with pytest.raises(FleetError) as err:
        with image.template():
            pass
    assert str(err.value) == "sandbox image: `tar -C /x -cf y.part .` exited 2"
    assert not (cache / "template-ffff").exists()
