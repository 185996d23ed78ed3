"""docs/playbook-reference.md is what tools/playbook_reference.py generates from the model now,
with a type, default, meaning and example for every key."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("playbook_reference", REPO / "tools" / "playbook_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_playbook_reference_is_current() -> None:
    assert (REPO / "docs" / "playbook-reference.md").read_text() == _tool().render(), (
        "stale: python3 tools/playbook_reference.py > docs/playbook-reference.md"
    )


def test_every_key_has_a_type_default_meaning_and_example() -> None:
    tool = _tool()
    from launcher import model

    rows = list(tool.rows(model.Playbook, (), tool._shipped()))
    assert len(rows) > 50
    for key, tp, default, meaning, example in rows:
        assert tp and default and meaning and example, key
    assert set(tool.MADE_UP) <= {r[0] for r in rows}  # no made-up example for a key that is gone


def _launcher_text() -> str:
    """fleet's source with adjacent string literals joined, as Python joins them."""
    import re

    text = "\n".join(p.read_text() for p in sorted((REPO / "launcher").rglob("*.py")))
    return re.sub(r"[\"']\s*\n\s*f?[\"']", "", text)


def _in(fragment: str, source: str) -> bool:
    """``fragment`` is in ``source``, whole or as two pieces split at a word (an error class's
    prefix joined to its message, e.g. "host key " + "changed: ...")."""
    words = fragment.split(" ")
    return fragment in source or any(
        " ".join(words[:i]).strip(" :") in source and " ".join(words[i:]).strip(" :") in source
        for i in range(1, len(words))
    )


def test_troubleshooting_lines_are_lines_fleet_prints() -> None:
    """Each fixed part (between ``<...>`` placeholders, without the separators fleet's error
    classes add) of each documented error line is in fleet's source: a reworded message makes the
    page stale, and this test says so."""
    import re

    text = (REPO / "docs" / "troubleshooting.md").read_text()
    lines = [ln.strip() for ln in text.splitlines() if ln.startswith("    fleet: ")]
    assert len(lines) >= 20
    source = _launcher_text()
    for line in lines:
        body = re.sub(r"^fleet: (error|preflight): ", "", line)
        for part in (p.strip(" :;()[]") for p in re.split(r"<[^>]+>", body)):
            assert len(part) < 6 or _in(part, source), (line, part)
