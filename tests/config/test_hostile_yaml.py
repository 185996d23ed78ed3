"""Hostile YAML (issue 16 item 8): alias bombs, self-referencing aliases and deep nesting are
one-line errors naming file:line:col, fast, in inventories, playbooks and recipes alike."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.cli import cli
from launcher.config.yamlpos import MAX_VALUES, load_yaml, parse_yaml, plain
from launcher.errors import InputError
from tests.config.conftest import FIXTURES, REPO

# 9 values, each level nine aliases of the one before: 9**7 values from ~300 bytes.
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdef", "bcdefg")
)
BOMB_ERROR = f"{{p}}:6:16: aliases expand the document past {MAX_VALUES} values"


def _error(text: str) -> str:
    with pytest.raises(InputError) as err:
        parse_yaml(text, "f.yaml")
    return str(err.value)


def test_alias_bomb_is_refused_quickly() -> None:
    start = time.process_time()
    assert _error(BOMB) == BOMB_ERROR.format(p="f.yaml")
    assert time.process_time() - start < 2.0  # before: 7.8 s and 147 MB for 9**7 values


def test_self_referencing_aliases() -> None:
    assert _error("a: &a [1, *a]\n") == "f.yaml:1:11: alias *a is inside the node it names (it would never end)"
    assert _error("a: &a\n  b:\n    c: *a\n") == "f.yaml:3:8: alias *a is inside the node it names (it would never end)"


@pytest.mark.parametrize(
    ("text", "where"),
    [("[" * 5000 + "]" * 5000, "1:101"), ("x: " + "{a: " * 3000 + "1" + "}" * 3000, "1:400")],
)
def test_deep_nesting(text: str, where: str) -> None:
    assert _error(text) == f"f.yaml:{where}: nested more than 100 levels deep"


def test_ordinary_aliases_still_expand_and_are_shared() -> None:
    node = parse_yaml("d: &d {x: [1, 2]}\na: *d\nb: {<<: *d, y: 3}\n", "f.yaml")
    assert node is not None
    assert plain(node) == {"d": {"x": [1, 2]}, "a": {"x": [1, 2]}, "b": {"x": [1, 2], "y": 3}}


def test_a_big_plain_document_is_not_an_alias_bomb(tmp_path: Path) -> None:
    """MAX_VALUES values without aliases (830 KB) load; one more is refused (issue 25 item 11)."""
    p = tmp_path / "big.yaml"
    lines = [f"h{i}: [1, 2, 3, 4]\n" for i in range((MAX_VALUES - 1) // 6)]  # 6 values a line, + the top mapping
    p.write_text("".join(lines))
    assert isinstance(load_yaml(p), object)
    p.write_text("".join(lines) + "x: [1, 2, 3, 4, 5, 6, 7]\n")
    with pytest.raises(InputError) as err:
        load_yaml(p)
    assert str(err.value) == f"{p}:{len(lines) + 1}:8: more than {MAX_VALUES} values in one document"  # at its ' 2'


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stderr


def test_inventory_playbook_and_recipe_loaders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text("all:\n  vars:\n" + "".join("    " + line + "\n" for line in BOMB.splitlines()))
    assert _cli("inventory", "list", "-i", str(inv)) == (
        2, f"fleet: error: {inv}:8:20: aliases expand the document past {MAX_VALUES} values\n"
    )  # fmt: skip

    book = tmp_path / "book.yaml"
    book.write_text("name: x\nrecipe: &r [*r]\n")
    assert _cli("plan", str(book), "-i", str(REPO / "inventories" / "example.yaml")) == (
        2, f"fleet: error: {book}:2:13: alias *r is inside the node it names (it would never end)\n"
    )  # fmt: skip

    recipes = tmp_path / "recipes"
    shutil.copytree(FIXTURES / "recipes", recipes)
    bad = recipes / "qwen" / "vllm-single-a100.yaml"
    bad.write_text(bad.read_text() + "notes: " + "[" * 200 + "]" * 200 + "\n")
    monkeypatch.setenv("FLEET_RECIPES_DIR", str(recipes))
    code, err = _cli("recipes", "list")
    assert (code, err) == (2, f"fleet: error: {bad}:16:107: nested more than 100 levels deep\n")
