"""The store-client env of SGLang ranks with a Mooncake store: catalog sizes are per GPU, SGLang
0.5.23 splits MOONCAKE_GLOBAL_SEGMENT_SIZE across its storage config's tp_size * pp_size ranks
(attention TP under DP attention) and parses only ``<n>gb`` (GiB) or a byte count."""

from __future__ import annotations

import dataclasses

import pytest

from launcher.engines import mooncake
from launcher.errors import PlanError
from launcher.model import MooncakeStore, Parallelism, Source
from launcher.plan import plan
from tests.plan import factory as f
from tests.plan.test_placement import ROCE, hosts

SRC = Source(path="recipes/x.yaml", line=3, col=1)


@pytest.mark.parametrize(
    ("par", "ranks"),
    [
        (Parallelism(tp=8), 8),
        (Parallelism(tp=8, pp=2), 16),  # catalog entry 43: each of the 16 GPU ranks holds 1/16
        (Parallelism(tp=4, pp=4), 16),
        (Parallelism(tp=8, attn_dp=8), 1),  # DP attention: the storage config's tp_size is attention TP
        (Parallelism(tp=8, attn_dp=2, pp=2), 8),
    ],
)
def test_store_ranks(par: Parallelism, ranks: int) -> None:
    assert mooncake.store_ranks(par) == ranks


@pytest.mark.parametrize(
    ("per_gpu", "ranks", "rendered"),
    [
        ("100gb", 16, "1600gb"),
        ("4GB", 8, "32gb"),
        ("4gib", 2, "8gb"),
        ("1tb", 2, "2048gb"),
        ("512mb", 2, "1gb"),
        ("512mb", 3, str(3 * 512 * 1024 * 1024)),  # not whole GiB: bytes, which SGLang reads as int
        ("1000", 4, "4000"),
    ],
)
def test_instance_size_is_a_form_sglang_parses(per_gpu: str, ranks: int, rendered: str) -> None:
    assert mooncake.instance_size(per_gpu, ranks, SRC, "mooncake_store/global_segment_size") == rendered


def test_instance_size_rejects_what_is_not_a_size() -> None:
    with pytest.raises(PlanError) as err:
        mooncake.instance_size("lots", 8, SRC, "mooncake_store/global_segment_size")
    assert str(err.value) == (
        "recipes/x.yaml:3:1: mooncake_store/global_segment_size: size 'lots' is not a number with a unit like 100gb"
    )


def test_pp2_ranks_each_get_the_per_gpu_size() -> None:
    """A TP8 PP2 instance over two nodes (entry 43's shape): 16 ranks x 100gb."""
    store = MooncakeStore(global_segment_size="100gb", local_buffer_size="4gb")
    env = mooncake.client_env(store, "10.0.0.1:50051", Parallelism(tp=8, pp=2), SRC)
    assert (env["MOONCAKE_GLOBAL_SEGMENT_SIZE"], env["MOONCAKE_LOCAL_BUFFER_SIZE"]) == ("1600gb", "64gb")


def test_planned_pp2_pd_ranks_carry_the_whole_instance_size() -> None:
    r = f.pd(mooncake_store=f.STORE)
    assert r.pd is not None
    side = dataclasses.replace(r.pd.decode, nodes=2, parallelism=Parallelism(tp=8, pp=2))
    r = dataclasses.replace(r, pd=dataclasses.replace(r.pd, prefill=side, decode=side))
    p = plan(f.inventory(*hosts(4, **ROCE)), f.catalog(r), f.playbook({"prefill": "h1:h2", "decode": "h3:h4"}))
    engines = [u for u in p.units if u.role in ("prefill", "decode")]
    assert engines and {u.env["MOONCAKE_GLOBAL_SEGMENT_SIZE"] for u in engines} == {"1600gb"}
