"""Shapes, SLOs and concurrency sweeps as ``fleet bench`` flags and playbook lines write them."""

from __future__ import annotations

import pytest

from launcher.config.benchspec import Shape, parse_concurrency, parse_shape, parse_slo
from launcher.errors import InputError, UsageError
from launcher.model import Source


def test_catalog_shapes_and_plain_counts() -> None:
    assert parse_shape("50k+1.5k") == Shape(label="50k+1.5k", input_len=50000, output_len=1500)
    assert parse_shape("8k+1k") == Shape(label="8k+1k", input_len=8000, output_len=1000)
    assert parse_shape("512+64") == Shape(label="512+64", input_len=512, output_len=64)
    assert parse_shape("1m+1") == Shape(label="1m+1", input_len=1000000, output_len=1)


def test_scale_shrinks_lengths_and_says_so() -> None:
    s = parse_shape("8k+1k").scaled(0.01)
    assert (s.label, s.input_len, s.output_len, s.base_label) == ("8k+1k x0.01", 80, 10, "8k+1k")
    assert parse_shape("8+1").scaled(0.01).output_len == 1  # never below one token


@pytest.mark.parametrize("bad", ["8k", "8k+", "+1k", "8k+1k+1", "8x+1k", "0+10", "1.2345k+1", "-5+1"])
def test_bad_shape_is_one_line(bad: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_shape(bad, None, "--shape")
    assert str(err.value) == f"bad shape {bad!r}: expected IN+OUT token counts such as 8k+1k or 512+64"


def test_bad_shape_in_a_playbook_names_the_line() -> None:
    with pytest.raises(InputError) as err:
        parse_shape("8k", Source(path="pb.yaml", line=7, col=5), "bench/shapes/0")
    assert str(err.value).startswith("pb.yaml:7:5: bench/shapes/0: bad shape '8k'")


def test_slo_units() -> None:
    slo = parse_slo("ttft=2s,tpot=50", "--slo")
    assert (slo.ttft_ms, slo.tpot_ms, slo.origin) == (2000.0, 50.0, "--slo")
    assert parse_slo("tpot=20ms, ttft=150", "x").ttft_ms == 150.0


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("ttft=100", "expected ttft=MS,tpot=MS"),
        ("ttft=100,tpot=20,ttft=5", "expected ttft=MS,tpot=MS"),
        ("ttft=100,itl=20", "expected ttft=MS,tpot=MS"),
        ("ttft=fast,tpot=20", "ttft must be a positive number of milliseconds"),
        ("ttft=100,tpot=0", "tpot must be a positive number of milliseconds"),
    ],
)
def test_bad_slo_is_one_line(bad: str, why: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_slo(bad, "--slo")
    assert str(err.value) == f"bad SLO {bad!r}: {why}"


def test_concurrency_sweep() -> None:
    assert parse_concurrency("1,4,16") == (1, 4, 16)
    assert parse_concurrency(" 8 ") == (8,)


@pytest.mark.parametrize("bad", ["", "0", "1,,4", "1,1", "-1", "a", "5000", "1.5"])
def test_bad_concurrency_is_one_line(bad: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_concurrency(bad)
    assert str(err.value) == f"bad --concurrency {bad!r}: expected distinct integers from 1 to 4096, such as 1,4,16"
