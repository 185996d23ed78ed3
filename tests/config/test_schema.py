from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping

import pytest

from launcher.config.schema import decode
from launcher.config.yamlpos import load_mapping
from launcher.errors import InputError
from launcher.model import EMPTY, Source, UNKNOWN_SOURCE


@dataclass(frozen=True, slots=True, kw_only=True)
class Inner:
    tp: int = 1
    pp: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Outer:
    name: str
    ratio: float = 0.5
    flag: bool = False
    kind: Literal["a", "b"] = "a"
    gid: int | Literal["auto"] | None = None
    value: str | int | None = None
    inner: Inner = Inner()
    maybe: Inner | None = None
    items: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    source: Source = UNKNOWN_SOURCE


def _decode(tmp_path: Path, text: str) -> Outer:
    p = tmp_path / "x.yaml"
    p.write_text(text)
    result: Outer = decode(load_mapping(p), Outer)
    return result


def test_decodes_every_kind(tmp_path: Path) -> None:
    o = _decode(
        tmp_path,
        "name: n\nratio: 1\nflag: true\nkind: b\ngid: auto\nvalue: 3\ninner: {tp: 8}\n"
        "maybe: null\nitems: [x, y]\nenv: {A: '1'}\n",
    )
    assert o == Outer(
        name="n",
        ratio=1.0,
        flag=True,
        kind="b",
        gid="auto",
        value=3,
        inner=Inner(tp=8),
        items=("x", "y"),
        env={"A": "1"},
        source=Source(path=str(tmp_path / "x.yaml"), line=1, col=1),
    )
    assert isinstance(o.ratio, float) and isinstance(o.items, tuple)
    with pytest.raises(TypeError):
        o.env["B"] = "2"  # type: ignore[index]
    assert _decode(tmp_path, "name: n\ngid: 5\n").gid == 5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: n\ninner:\n  tp: eight\n", "3:7: inner/tp: should be an integer, got 'eight'"),
        ("name: n\ninner: {tp: '8'}\n", "2:13: inner/tp: should be an integer, got '8'"),
        ("name: n\ninner: {tp: true}\n", "2:13: inner/tp: should be an integer, got true"),
        ("name: n\ninner: {tp: 1.5}\n", "2:13: inner/tp: should be an integer, got 1.5"),
        ("name: n\ninner: {tpp: 2}\n", "2:9: inner: unknown key 'tpp' (did you mean 'tp'?)"),
        ("name: n\nzzz: 1\n", "2:1: unknown key 'zzz'"),
        ("ratio: 1\n", "1:1: missing required key 'name'"),
        ("name: 5\n", "1:7: name: should be a string, got 5"),
        ("name: n\nratio: 'x'\n", "2:8: ratio: should be a number, got 'x'"),
        ("name: n\nratio: true\n", "2:8: ratio: should be a number, got true"),
        ("name: n\nflag: 1\n", "2:7: flag: should be true or false, got 1"),
        ("name: n\nkind: c\n", "2:7: kind: should be one of 'a', 'b', got 'c'"),
        ("name: n\ngid: x\n", "2:6: gid: should be an integer or 'auto', got 'x'"),
        ("name: n\nvalue: [1]\n", "2:8: value: should be a string or an integer, got a list"),
        ("name: n\ninner: 3\n", "2:8: inner: should be a mapping, got 3"),
        ("name: n\nitems: x\n", "2:8: items: should be a list, got 'x'"),
        ("name: n\nitems: [a, 2]\n", "2:12: items/1: should be a string, got 2"),
        ("name: n\nenv: {A: 1}\n", "2:10: env/A: should be a string, got 1"),
        ("name: n\nenv: {A: true}\n", "2:10: env/A: should be a string, got true"),
        ("name: n\nenv: [A]\n", "2:6: env: should be a mapping, got a list"),
        ("name: n\nsource: x\n", "2:1: unknown key 'source' (fleet fills it in)"),
        ("name: n\n1: x\n", "2:1: keys should be strings, got 1"),
        ("name: n\nmaybe: {pp: x}\n", "2:13: maybe/pp: should be an integer, got 'x'"),
    ],
)
def test_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InputError) as err:
        _decode(tmp_path, text)
    assert str(err.value) == f"{tmp_path / 'x.yaml'}:{message}"


def test_given_fields_may_not_be_written(tmp_path: Path) -> None:
    p = tmp_path / "x.yaml"
    p.write_text("name: n\n")
    o = decode(load_mapping(p), Outer, given={"kind": "b"})
    assert o.kind == "b"
    p.write_text("name: n\nkind: a\n")
    with pytest.raises(InputError) as err:
        decode(load_mapping(p), Outer, given={"kind": "b"})
    assert str(err.value) == f"{p}:2:1: key 'kind' is set by fleet, not written in the file"
