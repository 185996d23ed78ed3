"""Which image provides each unit's program, and preflight's verdict on it (issue 16 item 18):
the router and Mooncake master run from the engine image unless the recipe's ``images`` or the
playbook's ``overrides.images`` name another (role by role, playbook over recipe); the in-image
lookup script, run for real; the verdict lines (exact)."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

from launcher import hostscripts
from launcher.engines.images import program_of
from launcher.config.recipes import Catalog
from launcher.model import ContainerSpec, RoleImages, Unit
from launcher.pipeline import load_inputs
from launcher.plan import plan
from launcher.preflight import checks as preflight
from launcher.preflight.rules.base import ProgramsProbe
from tests.preflight.test_evaluate import RECIPE, probes, setup

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = """\
name: t18
recipe: qwen/sglang-tp2-h100-tuned
placement:
  single:
    hosts: h100-01
  router:
    hosts: h100-02
overrides:
  image: engine:1
"""


def router_image(tmp_path: Path, recipe_router: str | None, playbook_router: str | None) -> str:
    text = PLAYBOOK + (f"  images:\n    router: {playbook_router}\n" if playbook_router else "")
    (tmp_path / "pb.yaml").write_text(text)
    inputs = load_inputs(tmp_path / "pb.yaml", REPO / "inventories" / "example.yaml")
    recipe = inputs.catalog.get("qwen/sglang-tp2-h100-tuned")
    recipes = {**inputs.catalog.recipes, recipe.id: dataclasses.replace(recipe, images=RoleImages(router=recipe_router))}
    catalog = Catalog(root=inputs.catalog.root, recipes=recipes)
    (r,) = [u for u in plan(inputs.inventory, catalog, inputs.playbook).units if u.role == "router"]
    assert r.container is not None
    return r.container.image


def test_the_router_image_is_the_engine_image_unless_recipe_or_playbook_names_one(tmp_path: Path) -> None:
    assert router_image(tmp_path, None, None) == "engine:1"
    assert router_image(tmp_path, "router:2", None) == "router:2"
    assert router_image(tmp_path, "router:2", "mine:3") == "mine:3"


def test_program_of_a_unit_and_one_probe_per_image_per_host() -> None:
    assert program_of(("vllm-router", "--port", "1")) == "vllm-router"
    assert program_of(("python3", "-m", "sglang_router.launch_router")) == "python3 -m sglang_router.launch_router"
    the_plan, _, _ = setup()
    r = Unit(host="gpu-01", name="fleet-ds-router-r0", deployment="ds", role="router", group="ds/router",
             argv=("vllm-router", "--port", "8000"), container=ContainerSpec(image="img"))
    the_plan = dataclasses.replace(the_plan, units=(*the_plan.units, r))
    assert preflight.image_programs(the_plan) == {
        "gpu-01": (("img", ("python3 -m sglang.launch_server", "vllm-router")),),
        "gpu-02": (("img", ("python3 -m sglang.launch_server",)),),
    }


def test_the_in_image_script_names_what_is_missing() -> None:
    argv = ["sh", "-c", hostscripts.text("image-programs.sh"), "image-programs", "sh", "python3 -m json.tool",
            "python3 -m fleet_no_such_pkg.mod", "fleet-no-such-program"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout
    assert out == "missing python3 -m fleet_no_such_pkg.mod\nmissing fleet-no-such-program\nchecked\n"


def test_verdicts_name_host_image_and_program() -> None:
    the_plan, inv, facts = setup()
    r = Unit(host="gpu-02", name="fleet-ds-router-r0", deployment="ds", role="router", group="ds/router",
             argv=("vllm-router",), container=ContainerSpec(image="img"))
    the_plan = dataclasses.replace(the_plan, units=(*the_plan.units, r))
    found = preflight.evaluate(the_plan, inv, RECIPE, facts, probes(programs={
        ("gpu-01", "img"): ProgramsProbe(status="checked"),
        ("gpu-02", "img"): ProgramsProbe(status="checked", missing=("vllm-router",)),
    }))
    assert [c.line() for c in found if c.name == "programs"] == [
        "pass: gpu-01/fleet-ds-rank0-r0: programs: image img has python3 -m sglang.launch_server",
        "fail: gpu-02/fleet-ds-router-r0: programs: image img on gpu-02 has no vllm-router (the router runs it) "
        "(fix: use an image that provides it: images.router in the recipe, or overrides.images.router in the "
        "playbook)",
    ]
    absent = preflight.evaluate(the_plan, inv, RECIPE, facts, probes(programs={
        ("gpu-01", "img"): ProgramsProbe(status="no-image"),
        ("gpu-02", "img"): ProgramsProbe(status="error", detail="exec: \"sh\": executable file not found in $PATH"),
    }))
    assert [c.line() for c in absent if c.name == "programs"] == [
        "warn: gpu-01/fleet-ds-rank0-r0: programs: image img is not on the host yet; the programs it must run are "
        "not checked (fix: docker pull img, then run fleet preflight again)",
        "warn: gpu-02/fleet-ds-rank0-r1: programs: could not look into image img: exec: \"sh\": executable file "
        "not found in $PATH (fix: see the error (the check runs sh inside the image))",
    ]


def test_a_nixl_unit_needs_nixl_in_its_image() -> None:
    """vLLM with NixlConnector imports the nixl package at engine start (not a dependency of the
    vllm wheel): its image must provide it, and a missing one fails naming host, image and it."""
    the_plan, inv, facts = setup()
    kv = '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'
    d = Unit(host="gpu-02", name="fleet-ds-decode0-r0", deployment="ds", role="decode", group="ds/decode0",
             argv=("vllm", "serve", "/m", "--kv-transfer-config", kv), container=ContainerSpec(image="vimg"))
    the_plan = dataclasses.replace(the_plan, units=(*the_plan.units, d))
    assert preflight.image_programs(the_plan)["gpu-02"] == (
        ("img", ("python3 -m sglang.launch_server",)), ("vimg", ("python3 -m nixl", "vllm")),
    )
    found = preflight.evaluate(the_plan, inv, RECIPE, facts, probes(programs={
        ("gpu-01", "img"): ProgramsProbe(status="checked"),
        ("gpu-02", "img"): ProgramsProbe(status="checked"),
        ("gpu-02", "vimg"): ProgramsProbe(status="checked", missing=("python3 -m nixl",)),
    }))
    assert [c.line() for c in found if c.name == "programs" and c.status == "fail"] == [
        "fail: gpu-02/fleet-ds-decode0-r0: programs: image vimg on gpu-02 has no python3 -m nixl (the decode needs "
        "it) (fix: use an image that provides it: image in the recipe, or overrides.image in the playbook)",
    ]
