"""Issue 30 item 1: a router or Mooncake master whose image fleet knows lacks its program is
refused at plan time, naming the role, the program, the image, where the fact came from and the
key to set; an image fleet has no fact about is left to preflight."""

from __future__ import annotations

import pytest

from launcher.engines.images import FACTS, lacks, repository, version_of
from launcher.errors import PlanError
from launcher.model import Overrides, RoleImages
from launcher.plan import plan
from tests.plan import factory as f

ROCE = dict(fabric="roce", hcas=("mlx5_0",), gid_index=3)


def _pd(**kw: object) -> f.Recipe:
    return f.pd(**{"transfer": "nixl", "engine": "vllm", "engine_version": "0.33.0",
                   "image": "vllm/vllm-openai:v0.33.0", **kw})


def _plan(recipe: f.Recipe, images: RoleImages = RoleImages()) -> object:
    pb = f.playbook({"prefill": "h1", "decode": "h2", "router": "h2"}, {"prefill": 2},
                    overrides=Overrides(images=images))
    hosts = tuple(f.host(f"h{i}", f"10.0.0.{i}", gpu_count=16, **ROCE) for i in (1, 2))
    return plan(f.inventory(*hosts), f.catalog(recipe), pb)


def test_a_vllm_router_from_the_vllm_image_is_refused_at_the_recipe() -> None:
    with pytest.raises(PlanError) as e:
        _plan(_pd())
    assert str(e.value) == (
        "recipes/fam/v.yaml:1:1: images.router: the router runs vllm-router, which image vllm/vllm-openai:v0.33.0 "
        "does not carry (vllm-router is its own package and image (vllm-project/router; vllm/vllm-router), not a "
        "dependency of vllm (requirements read in vLLM 0.33.0; later releases unread)): name an image that does in "
        "the recipe's images.router or the playbook's "
        "overrides.images.router"
    )


def test_the_playbooks_override_is_named_when_it_brought_the_image() -> None:
    recipe = _pd(images=RoleImages(router="vllm/vllm-router:nightly"))
    assert _plan(recipe) is not None
    with pytest.raises(PlanError) as e:
        _plan(recipe, RoleImages(router="docker.io/vllm/vllm-openai:v0.33.0"))
    assert str(e.value).startswith(
        "playbooks/x.yaml:1:1: overrides.images.router: the router runs vllm-router, which image "
        "docker.io/vllm/vllm-openai:v0.33.0 does not carry")


def test_an_image_fleet_knows_nothing_about_is_left_to_preflight() -> None:
    assert _plan(_pd(image="registry.local/vllm-pd:custom")) is not None


@pytest.mark.parametrize("image", ["vllm/vllm-openai:v0.34.0", "vllm/vllm-openai:nightly", "vllm/vllm-openai@sha256:" + "0" * 64])
def test_a_vllm_image_at_a_version_the_facts_were_not_read_for_is_left_to_preflight(image: str) -> None:
    """The facts are per engine version: a later vLLM release may ship vllm-router, and a tag
    naming no version may be any release, so neither gets a plan-time verdict."""
    assert _plan(_pd(image=image)) is not None


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("lmsysorg/sglang:v0.5.23-cu130", (0, 5, 23)),
        ("vllm/vllm-openai:v0.33.0", (0, 33, 0)),
        ("registry.local:5000/vllm/vllm-openai:0.30.0", (0, 30, 0)),
        ("lmsysorg/sglang:v0.4.6.post4-cu124", (0, 4, 6)),
        ("lmsysorg/sglang:glm-5.3-flash", None),
        ("vllm/vllm-router:nightly", None),
        ("registry.local:5000/x", None),
        ("vllm/vllm-openai:v0.33.0@sha256:" + "0" * 64, None),
    ],
)
def test_the_engine_version_an_image_tag_names(image: str, version: tuple[int, ...] | None) -> None:
    assert version_of(image) == version


@pytest.mark.parametrize(
    ("image", "repo"),
    [
        ("lmsysorg/sglang:v0.5.23-cu130", "lmsysorg/sglang"),
        ("docker.io/library/ubuntu:24.04", "ubuntu"),
        ("registry.local:5000/vllm/vllm-openai@sha256:" + "0" * 64, "registry.local:5000/vllm/vllm-openai"),
        ("registry.local:5000/x", "registry.local:5000/x"),
        ("vllm/vllm-openai", "vllm/vllm-openai"),
    ],
)
def test_repository_of_an_image_reference(image: str, repo: str) -> None:
    assert repository(image) == repo


def test_known_facts() -> None:
    assert lacks("lmsysorg/sglang:latest", ("python3", "-m", "sglang_router.launch_router")) is None
    assert lacks("lmsysorg/sglang:latest", ("mooncake_master", "--rpc_port", "50051")) is None
    fact = lacks("vllm/vllm-openai:v0.30.0", ("mooncake_master",))
    assert fact is not None and "optional extra" in fact.source
    assert lacks("vllm/vllm-openai:v0.33.0", ("vllm-router",)) is not None
    assert lacks("vllm/vllm-openai:v0.34.0", ("vllm-router",)) is None
    assert lacks("vllm/vllm-router:nightly", ("vllm-router",)) is None


def test_every_fact_names_the_versions_it_was_read_for_in_its_source() -> None:
    """A range's last version is the one whose source was read: its source says so; a fact
    without a range is the program's own image."""
    table = [(f.repository, f.program, f.carried, f.first, f.last) for f in FACTS]
    assert table == [
        ("lmsysorg/sglang", "python3 -m sglang_router.launch_router", True, "0.5.23", "0.5.23"),
        ("lmsysorg/sglang", "mooncake_master", True, "0.5.23", "0.5.23"),
        ("vllm/vllm-openai", "vllm-router", False, None, "0.33.0"),
        ("vllm/vllm-openai", "mooncake_master", False, None, "0.33.0"),
        ("vllm/vllm-router", "vllm-router", True, None, None),
    ]
    for f in FACTS:
        assert f.last is None or f.last in f.source, f


def test_the_catalogs_vllm_pd_router_has_its_own_image() -> None:
    from click.testing import CliRunner

    from launcher.cli import cli

    shown = CliRunner().invoke(cli, ["recipes", "show", "deepseek/vllm-pd-tp8-6000d-nvfp4"]).stdout
    assert "  router image: vllm/vllm-router:nightly\n" in shown
