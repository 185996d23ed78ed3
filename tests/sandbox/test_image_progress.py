"""What an operator sees while ``fleet sandbox image`` builds the hosts' image template (minutes on
a first run, once silent for ~6 of them): the build's progress lines on stderr, in order and
exact (durations aside), then where the template is on stdout; a cached build prints no progress
line, only that one.  The same for ``--real-engine``.

No root, network or docker: on a tmp FLEET_SANDBOX_CACHE the slow steps are stubs -- ``apt-get
download`` and ``pip download`` (they leave empty debs and minimal wheels; NIXL's holds the line
the build changes), ``dpkg -x`` (it leaves the directories), the
image's python in its chroot (the tiny model's generator leaves a config), the template's
dockerd and ``docker import``.  The CLI, the cache layout, the wheel installs, the rootfs copy and
the tars run for real.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import types
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest
from click.testing import CliRunner

from launcher.cli import cli
from launcher.sandbox import fleet, image, realimage

READY = re.compile(r"ready in \d+s$")


class Stubs:
    """The slow steps' stand-ins, as ``subprocess`` of image.py and realimage.py; every other
    command runs for real.  ``ran``: the stubbed steps, in order."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.CalledProcessError = subprocess.CalledProcessError
        self.DEVNULL, self.STDOUT = subprocess.DEVNULL, subprocess.STDOUT

    def Popen(self, *args: Any, **kwargs: Any) -> None:  # noqa: N802 - subprocess's name
        raise AssertionError(f"no process is started but by run(): {args}")

    def run(self, cmd: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        names = [Path(str(a)).name for a in cmd]
        if tuple(cmd[:2]) == ("apt-get", "download"):
            for package in cmd[3:]:
                (Path(kwargs["cwd"]) / f"{package}_1.0_amd64.deb").write_bytes(b"")
        elif "pip" in cmd and "download" in cmd:
            at = list(cmd).index("-d")
            for pin in cmd[at + 2:]:
                name, _, version = pin.partition("==")
                wheel = Path(cmd[at + 1]) / f"{re.sub(r'[-_.]+', '_', name).lower()}-{version.lower()}-py3-none-any.whl"
                module = re.sub(r"[-_.]+", "_", name).lower()
                with zipfile.ZipFile(wheel, "w") as zf:
                    zf.writestr(f"{module}/__init__.py", "")
                    if module == "nixl_cu12":  # the line the build changes (realimage._nixl_progress_delay)
                        zf.writestr(f"{module}/_api.py", "        agent_config.pthrDelay = 0\n")
        elif tuple(cmd[:2]) == ("dpkg", "-x"):
            for sub in ("usr/bin", "bin"):  # where the packages' programs go
                (Path(cmd[3]) / sub).mkdir(parents=True, exist_ok=True)
        elif "chroot" in names:
            root = Path(cmd[names.index("chroot") + 1])
            if "/tmp/make_model.py" in cmd:
                (root / "tmp/model").mkdir(parents=True)
                (root / "tmp/model/config.json").write_text("{}")
        elif cmd[0] != "docker":
            return subprocess.run(cmd, **kwargs)  # cp -al, tar
        self.ran.append("pip download" if "pip" in names else "chroot" if "chroot" in names else " ".join(cmd[:2]))
        return subprocess.CompletedProcess(cmd, 0, "", "")


@pytest.fixture
def stubs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Stubs:
    monkeypatch.setenv("FLEET_SANDBOX_CACHE", str(tmp_path))
    monkeypatch.setattr(fleet, "require_root", lambda: None)
    fake = Stubs()
    monkeypatch.setattr(image, "subprocess", fake)
    monkeypatch.setattr(realimage, "subprocess", fake)

    @contextmanager
    def daemon(work: Path, data: Path) -> Iterator[str]:
        data.mkdir()
        yield str(work / "run/docker.sock")

    monkeypatch.setattr(image, "template_daemon", daemon)
    return fake


def build(*args: str) -> tuple[list[str], str]:
    """``fleet sandbox image ARGS``: its stderr lines and stdout, durations as ``<N>``."""
    result = CliRunner().invoke(cli, ["sandbox", "image", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return [READY.sub("ready in <N>s", ln) for ln in result.stderr.splitlines()], READY.sub("ready in <N>s", result.stdout.strip())


STANDIN = [  # the stand-in image's base, built once
    f"fleet: sandbox image: downloading {len(image.PACKAGES)} Debian packages",
    f"fleet: sandbox image: downloading {len(image.ROUTER_WHEELS)} router wheels",
    f"fleet: sandbox image: unpacking {len(image.PACKAGES)} debs and {len(image.ROUTER_WHEELS)} wheels",
    "fleet: sandbox image: byte-compiling",
]


def test_a_first_build_shows_its_steps_and_a_cached_one_only_where_it_is(stubs: Stubs, tmp_path: Path) -> None:
    where = f"image template {tmp_path / image.IMAGES / ('template-' + image.source_hash())} ready in <N>s"
    assert build() == ([
        "fleet: sandbox image: building the hosts' image template (once per input change)",
        *STANDIN,
        f"fleet: sandbox image: docker import {image.IMAGE} into the template",
        "fleet: sandbox image: template ready in <N>s",
    ], where)  # fmt: skip
    assert stubs.ran == ["apt-get download", "pip download", *["dpkg -x"] * len(image.PACKAGES), "chroot", "chroot",
                         "chroot", "docker -H"]  # fmt: skip
    ran = len(stubs.ran)
    assert build() == ([], where)
    assert len(stubs.ran) == ran, "nothing rebuilt"


def test_the_real_engine_image_too(stubs: Stubs, tmp_path: Path) -> None:
    pins = realimage.pins()
    more_debs = [p for p in realimage.PACKAGES if p not in image.PACKAGES]
    digest = hashlib.sha256(f"{image.source_hash()}+{realimage.digest()}".encode()).hexdigest()[:16]
    where = f"image template {tmp_path / image.IMAGES / ('template-' + digest)} ready in <N>s"
    assert build("--real-engine") == ([
        "fleet: sandbox image: building the hosts' image template (once per input change) with the real-engine "
        "image: ~7-13 min on 2 busy cores",
        *STANDIN,
        f"fleet: sandbox image: downloading {len(more_debs)} Debian packages",
        f"fleet: real-engine image: downloading {len(pins)} wheels (~0.5 GB on a first run)",
        f"fleet: real-engine image: unpacking {len(realimage.PACKAGES)} debs and {len(pins)} wheels",
        "fleet: real-engine image: checking that vLLM, torch, NIXL and Mooncake load with the image's python",
        "fleet: real-engine image: byte-compiling",
        "fleet: real-engine image: generating the tiny model",
        "fleet: real-engine image: writing its tar (~3.0 GB)",
        f"fleet: sandbox image: docker import {image.IMAGE} into the template",
        f"fleet: sandbox image: docker import {realimage.IMAGE} into the template",
        "fleet: sandbox image: template ready in <N>s",
    ], where)  # fmt: skip
    assert build("--real-engine") == ([], where)
