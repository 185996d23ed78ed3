from __future__ import annotations

from pathlib import Path

import pytest

from launcher.config.yamlpos import Map, Scalar, Seq, find, load_mapping, load_yaml, plain
from launcher.errors import InputError


def _write(tmp_path: Path, text: str, name: str = "f.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_positions_are_one_based(tmp_path: Path) -> None:
    p = _write(tmp_path, "a: 1\nb:\n  - x\n  - {c: true}\n")
    node = load_mapping(p)
    assert node.source.line == 1 and node.source.col == 1
    b = node.get("b")
    assert isinstance(b, Seq)
    assert (b.source.line, b.source.col) == (3, 3)
    c = find(node, "b/1/c")
    assert isinstance(c, Scalar) and c.value is True
    assert (c.source.line, c.source.col) == (4, 9)
    key = node.key_node("b")
    assert key is not None and (key.source.line, key.source.col) == (2, 1)
    assert plain(node) == {"a": 1, "b": ["x", {"c": True}]}


def test_merge_keys_and_anchors(tmp_path: Path) -> None:
    p = _write(tmp_path, "base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\n")
    other = load_mapping(p).get("other")
    assert isinstance(other, Map)
    assert plain(other) == {"x": 1, "y": 3}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: 1\nb: 2\na: 3\n", "{p}:3:1: duplicate key 'a' (first at line 1)"),
        ("x:\n  k: 1\n  k: 2\n", "{p}:3:3: duplicate key 'k' (first at line 2)"),
        ("a: [1, 2\nb: 3\n", "{p}:2:2: invalid YAML: did not find expected ',' or ']'"),
        ("a: 1\n b: 2\n", "{p}:2:3: invalid YAML: mapping values are not allowed in this context"),
        ("a: 'x\n", "{p}:2:1: invalid YAML: found unexpected end of stream"),
        ("", "{p}:1:1: file is empty"),
        ("# only a comment\n", "{p}:1:1: file is empty"),
        ("- a\n- b\n", "{p}:1:1: the top level should be a mapping, got a list"),
        ("just text\n", "{p}:1:1: the top level should be a mapping, got 'just text'"),
        ("a: 1\n---\nb: 2\n", "{p}:3:1: expected one YAML document, found several"),
        ("? [a]\n: 1\n", "{p}:1:3: mapping keys must be plain values, not a list or mapping"),
    ],
)
def test_errors(tmp_path: Path, text: str, message: str) -> None:
    p = _write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_mapping(p)
    assert str(err.value) == message.format(p=p)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        load_yaml(tmp_path / "nope.yaml")
    assert str(err.value) == f"{tmp_path / 'nope.yaml'}: no such file"
