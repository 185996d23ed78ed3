"""Plan files in a unit's own directory (vLLM's Mooncake store config) are that unit's files: they
land on its host, count in its hash and are in its manifest, with or without a mount, so a native
unit reads them too.  Another unit's directory does not make a file this unit's."""

from __future__ import annotations

import json

import pytest

from launcher.errors import PlanError
from launcher.model import Runtime
from launcher.render import render
from tests.render import factory

D = "/etc/fleet/demo/fleet-demo-single-r0"
NAME = "demo/fleet-demo-single-r0/mooncake-store.json"
CONFIG = '{\n  "master_server_address": "10.0.0.1:50051"\n}\n'


@pytest.mark.parametrize("runtime", ["docker", "systemd"])
def test_file_in_the_unit_dir_ships_with_a_native_unit(runtime: Runtime) -> None:
    native = factory.unit(container=None)
    r = render(factory.plan(native, files={NAME: CONFIG}), runtime)
    host = r.hosts["gpu-a1"]
    assert {f.path: (f.mode, f.content) for f in host.files}[f"{D}/mooncake-store.json"] == (0o644, CONFIG)
    (u,) = host.units
    assert f"{D}/mooncake-store.json" in u.files
    manifest = json.loads(next(f.content for f in host.files if f.path == u.manifest))
    assert f"{D}/mooncake-store.json" in manifest["files"]


def test_file_in_the_unit_dir_changes_the_units_hash() -> None:
    p = factory.plan(factory.unit(container=None), files={NAME: CONFIG})
    changed = factory.plan(factory.unit(container=None), files={NAME: CONFIG.replace("10.0.0.1", "10.0.0.2")})
    assert render(p).hosts["gpu-a1"].units[0].render_hash != render(changed).hosts["gpu-a1"].units[0].render_hash


def test_another_units_dir_is_not_this_units() -> None:
    other = "demo/fleet-demo-single-r1/mooncake-store.json"
    with pytest.raises(PlanError) as err:
        render(factory.plan(factory.unit(container=None), files={other: CONFIG}))
    assert str(err.value) == f"plan file {other!r}: no unit mounts /etc/fleet/{other}"


def test_prefix_of_a_unit_name_is_not_its_dir() -> None:
    """fleet-demo-single-r0 must not own files of fleet-demo-single-r0x's directory."""
    other = "demo/fleet-demo-single-r0x/mooncake-store.json"
    with pytest.raises(PlanError) as err:
        render(factory.plan(factory.unit(container=None), files={other: CONFIG}))
    assert str(err.value) == f"plan file {other!r}: no unit mounts /etc/fleet/{other}"
