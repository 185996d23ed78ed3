"""Run argvs through an engine's real parser, in its parser venv (tools/parser_venvs.sh).

For any test that wants the ground truth next to argcheck::

    from tests.parsers.real import real_parse, venv_absent
    reason = venv_absent("sglang", "0.5.23")
    if reason: pytest.skip(reason)
    assert real_parse("sglang", "0.5.23", [argv1, argv2]) == [True, False]

One subprocess parses the whole batch (building the parser once: 1-5 s per engine).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Sequence

from launcher.engines.argcheck import load_snapshot

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "snapshot_options.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("snapshot_options", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("snapshot_options", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def cache_dir() -> Path:
    return Path(os.environ.get("FLEET_PARSER_CACHE", "/var/cache/fleet-parsers"))


def venv_name(engine: str, version: str) -> str:
    """The parser venv holding engine/version's parser (KeyError when none is defined)."""
    canonical = load_snapshot(engine, version).version
    for name, target in _tool().TARGETS.items():
        if (target.engine, target.version) == (engine, canonical):
            return str(name)
    raise KeyError(f"no parser venv defined for {engine} {version}")


def venv_absent(engine: str, version: str) -> str | None:
    """None when the venv is built; else the reason to print when skipping."""
    name = venv_name(engine, version)
    venv = cache_dir() / name
    if not (venv / ".complete").is_file():
        return f"parser venv {venv} absent: run tools/parser_venvs.sh {name}"
    return None


def real_results(engine: str, version: str, argvs: Sequence[Sequence[str]]) -> list[tuple[bool, str]]:
    """(accepted, the parser's error message or "") per argv, from the real parser."""
    name = venv_name(engine, version)
    python = cache_dir() / name / "bin" / "python"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_TARGET_DEVICE="cpu")
    done = subprocess.run(
        [str(python), str(TOOL), "parse", name],
        input=json.dumps([list(a) for a in argvs]),
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"real parser for {name} failed: {done.stderr[-2000:]}")
    return [(bool(ok), str(msg)) for ok, msg in json.loads(done.stdout)]


def real_parse(engine: str, version: str, argvs: Sequence[Sequence[str]]) -> list[bool]:
    """Whether the real parser accepts each argv."""
    return [ok for ok, _ in real_results(engine, version, argvs)]
