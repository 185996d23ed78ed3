"""pyproject's dependencies are exactly the third-party distributions launcher/ imports: a
declared dependency nothing imports, or an import of an undeclared one, fails.  Every import
counts (module level, inside functions, TYPE_CHECKING); the distribution of a module comes from
the installed metadata (importlib.metadata.packages_distributions)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import launcher

ROOT = Path(launcher.__file__).parent
PYPROJECT = ROOT.parent / "pyproject.toml"
# Code that ships in launcher/ but runs elsewhere, on its own interpreter: the stand-in engine
# inside the sandbox image (imports its own ``standin`` package), the real-engine image's model
# generator (torch, transformers: the image's own) and the hosts' scripts.
ELSEWHERE = (ROOT / "sandbox" / "standin", ROOT / "sandbox" / "realengine" / "make_model.py", ROOT / "hostscripts")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    return {_norm(re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0]) for d in deps}


def imported_modules(root: Path = ROOT) -> set[str]:
    """Top-level names of every absolute import under ``root``."""
    found: set[str] = set()
    for path in root.rglob("*.py"):
        if any(path.is_relative_to(d) for d in ELSEWHERE):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found


def third_party(modules: set[str]) -> dict[str, set[str]]:
    """Distribution -> the modules of it imported (stdlib, ``__future__`` and launcher left out)."""
    dists = metadata.packages_distributions()
    out: dict[str, set[str]] = {}
    for m in sorted(modules - set(sys.stdlib_module_names) - {"__future__", "launcher"}):
        for d in dists.get(m, [f"<no installed distribution provides {m!r}>"]):
            out.setdefault(_norm(d), set()).add(m)
    return out


def test_declared_dependencies_are_the_imported_ones() -> None:
    used = third_party(imported_modules())
    assert sorted(set(used) - declared()) == [], f"imported, not declared: {used}"
    assert sorted(declared() - set(used)) == [], "declared, never imported in launcher/"


def test_the_check_sees_an_undeclared_import(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("import yaml\nfrom click import echo\nimport os\n\ndef f():\n    import psutil\n")
    assert third_party(imported_modules(tmp_path)) == {"pyyaml": {"yaml"}, "click": {"click"}, "psutil": {"psutil"}}
