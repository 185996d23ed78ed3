"""Every rendered systemd unit passes ``systemd-analyze verify`` with nothing on stderr (verify
exits 0 on unknown keys and bad values and only warns, so any output is a failure).

The units are verified unmodified, beside stub ``docker.service`` / ``network-online.target``
(verify searches the verified file's directory).  ExecStart programs must exist: docker units
run /usr/bin/docker (docker.io) and native units with a relative program run /usr/bin/env.  A
native unit's absolute program that this machine lacks (e.g. /usr/local/bin/mooncake_master) is
made to exist only inside a private mount namespace: the nearest existing ancestor directory
gets an overlay whose upper layer holds a stub script, so the rendered text is verified as is and
the real filesystem is never written.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from launcher.model import Plan
from launcher.render import render
from launcher.runtimes.base import RenderedFile
from tests.render import factory
from tests.render.corpus import plan_for, plan_ids

STUBS = {
    "docker.service": "[Unit]\nDescription=stub\n\n[Service]\nExecStart=/bin/true\n",
    "network-online.target": "[Unit]\nDescription=stub\n",
}


def _services(plan: Plan) -> list[RenderedFile]:
    out = {}
    for runtime in ("docker", "systemd"):
        for host in render(plan, runtime).hosts.values():
            for f in host.files:
                if f.path.endswith(".service"):
                    out[f.path, f.content] = f
    return list(out.values())


def _programs(files: list[RenderedFile]) -> set[str]:
    progs = set()
    for f in files:
        for line in f.content.splitlines():
            if line.startswith(("ExecStart=", "ExecStartPre=", "ExecStop=")):
                progs.add(line.split("=", 1)[1].lstrip("-").split(" ", 1)[0])
    return progs


def verify(files: list[RenderedFile], workdir: Path) -> subprocess.CompletedProcess[str]:
    workdir.mkdir(parents=True)
    units = workdir / "units"
    units.mkdir()
    for name, text in STUBS.items():
        (units / name).write_text(text)
    paths = []
    for f in files:
        p = units / Path(f.path).name
        p.write_text(f.content, encoding="utf-8")
        paths.append(str(p))
    script = ["set -e", "mount --make-rprivate /"]
    overlaid: list[str] = []
    for i, prog in enumerate(sorted(p for p in _programs(files) if not os.path.exists(p))):
        anchor = Path(prog).parent
        while not anchor.exists():
            anchor = anchor.parent
        assert anchor != Path("/"), f"{prog}: no directory below / to overlay"
        if not any(str(anchor) == o or str(anchor).startswith(o + "/") for o in overlaid):
            ov = workdir / f"ov{i}"
            script += [
                f"mkdir -p {ov}/upper {ov}/work",
                f"mount -t overlay overlay -o lowerdir={anchor},upperdir={ov}/upper,workdir={ov}/work {anchor}",
            ]
            overlaid.append(str(anchor))
        script += [f"mkdir -p {Path(prog).parent}", f"printf '#!/bin/sh\\nexit 0\\n' > {prog}", f"chmod 755 {prog}"]
    script.append('exec systemd-analyze verify --man=no "$@"')
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(script), "verify", *paths],
        capture_output=True,
        text=True,
        timeout=120,
    )


FACTORY = {"factory-full": factory.full_plan, "factory-multinode": factory.multinode_plan}


@pytest.mark.parametrize("plan_id", [*plan_ids(), *FACTORY])
def test_units_verify_clean(plan_id: str, tmp_path: Path) -> None:
    files = _services(FACTORY[plan_id]() if plan_id in FACTORY else plan_for(plan_id))
    assert files
    r = verify(files, tmp_path / "v")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


def test_native_unit_with_missing_absolute_program_is_verified(tmp_path: Path) -> None:
    files = [f for f in _services(factory.full_plan()) if "mooncake-master" in f.path]
    assert _programs(files) == {"/usr/local/bin/mooncake_master"}
    assert not os.path.exists("/usr/local/bin/mooncake_master")
    r = verify(files, tmp_path / "v")
    assert (r.returncode, r.stderr) == (0, "")
    assert not os.path.exists("/usr/local/bin/mooncake_master")  # only ever inside the namespace


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda t: t.replace("EnvironmentFile=", "Environmentt=", 1), "Unknown key 'Environmentt'"),
        (lambda t: t.replace("[Install]", "[Instal]"), "Unknown section 'Instal'"),
        (lambda t: t.replace("Type=exec", "Type=simpel"), "simpel"),
        (lambda t: t.replace("ExecStart=/usr/bin/docker run", 'ExecStart=/usr/bin/docker "run', 1), "Unbalanced quoting"),
    ],
)
def test_verify_harness_catches_mistakes(mutate: object, message: str, tmp_path: Path) -> None:
    f = next(f for f in _services(factory.plan()) if "ExecStart=/usr/bin/docker run" in f.content)
    assert callable(mutate)
    bad = RenderedFile(path=f.path, content=mutate(f.content), mode=f.mode)
    r = verify([bad], tmp_path / "v")
    assert message in r.stderr
