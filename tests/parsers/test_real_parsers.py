"""Tier 2 (marker `parsers`): argcheck agrees with the engines' real parsers.

Needs the parser venvs (tools/parser_venvs.sh); each test skips, saying which venv is absent.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Sequence

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from launcher.engines.argcheck import Snapshot, check_argv, load_snapshot

from .cases import CASES, M
from .real import TOOL, cache_dir, real_results, venv_absent, venv_name

pytestmark = pytest.mark.parsers

TARGETS = sorted({target for target, _, _ in CASES})
OPTIONS = Path(__file__).resolve().parents[2] / "launcher" / "engines" / "options"
_BLAMED = re.compile(r"argument (\S+): ")
# Actions whose __call__ only stores (or warns): argparse-level semantics cover them fully.
PLAIN_ACTIONS = {
    "_StoreAction", "_StoreTrueAction", "_StoreFalseAction", "_StoreConstAction",
    "_AppendAction", "_AppendConstAction", "_CountAction", "_ExtendAction",
    "BooleanOptionalAction", "EnableDisableAction", "DeprecatedStoreTrueAction",
    "DeprecatedStoreConstAction",
}
# gflags' own flags: help/completion ones exit at once, flagfile/fromenv read files or env.
GFLAGS_OWN = {"gflags.cc", "gflags_reporting.cc", "gflags_completions.cc"}
PROBES = (
    "0", "7", "-3", "1.5", "1e3", "abc", "true", "false", "None", "{}", '{"a": 1}', "4k", "",
    "1K", "1Ki", "auto",
)
VALUES = (*PROBES, "8", "m", "-1", "-0.5", "0.5", "x_y", "--", "2Mi", " 5")


def _require(target: tuple[str, str]) -> None:
    reason = venv_absent(*target)
    if reason:
        pytest.skip(reason)


def _same_problem(real: str, mine: str) -> bool:
    """Equal, or both blame the same option (engine-specific type errors word it their way)."""
    if real == mine:
        return True
    a, b = _BLAMED.match(real), _BLAMED.match(mine)
    return a is not None and b is not None and a.group(1) == b.group(1)


def _disagreements(
    target: tuple[str, str], argvs: Sequence[Sequence[str]]
) -> list[tuple[Sequence[str], bool, str, tuple[str, ...]]]:
    snap = load_snapshot(*target)
    gflags = snap.syntax == "gflags"
    # Options whose engine-specific type (kind "other") validates more than argcheck models.
    opaque = {o.name for o in snap.options if o.type_kind == "other"}
    out = []
    for argv, (ok, message) in zip(argvs, real_results(*target, argvs)):
        mine = check_argv(*target, argv)
        if gflags and ("failed validation" in message or message.startswith("failed a flag")):
            continue  # the program's own flag validators: not modelled by argcheck
        blamed = _BLAMED.match(message)
        if blamed and blamed.group(1) in opaque and not any(blamed.group(0) in m for m in mine):
            continue  # e.g. vLLM's pydantic-validated JSON configs: not modelled
        if gflags:  # gflags reports every error, ordered by flag name: compare as sets
            same = set(message.splitlines()) == set(mine) if not ok else True
        else:
            same = ok or _same_problem(message, mine[0]) if mine else ok
        if ok != (mine == ()) or not same:
            out.append((argv, ok, message, mine))
    return out


@pytest.mark.parametrize("target", TARGETS, ids="-".join)
def test_table_agrees_exactly(target: tuple[str, str]) -> None:
    _require(target)
    cases = [(argv, problems) for t, argv, problems in CASES if t == target]
    results = real_results(*target, [argv for argv, _ in cases])
    got = [(argv, () if ok else (msg,)) for (argv, _), (ok, msg) in zip(cases, results)]
    assert got == [(argv, problems[:1]) for argv, problems in cases]


@pytest.mark.parametrize("target", TARGETS, ids="-".join)
def test_committed_snapshot_is_fresh(target: tuple[str, str], tmp_path: Path) -> None:
    _require(target)
    name = venv_name(*target)
    python = cache_dir() / name / "bin" / "python"
    done = subprocess.run(
        [str(python), str(TOOL), "write", name, "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (fresh,) = tmp_path.glob("*.json")
    committed = OPTIONS / fresh.name
    assert committed.read_text(encoding="utf-8") == fresh.read_text(encoding="utf-8"), (
        f"{committed} is stale: rerun {python} tools/snapshot_options.py write {name}"
    )


def _strings(snap: Snapshot) -> list[str]:
    """Option strings worth generating: no help (exits), no vLLM --config (reads a file),
    no custom actions whose own checks argcheck does not model."""
    out = []
    for string, option in snap.by_string.items():
        gflag = snap.syntax == "gflags" and option.action not in GFLAGS_OWN
        if (option.action in PLAIN_ACTIONS or gflag) and string != "--config":
            out.append(string if snap.syntax == "argparse" else "--" + string)
            if snap.syntax == "gflags" and option.type_kind == "bool":
                out.append("--no" + string)
    return out


@st.composite
def _argv(draw: st.DrawFn, snap: Snapshot) -> list[str]:
    strings = _strings(snap)
    argv: list[str] = []
    if snap.engine == "sglang" and draw(st.integers(0, 9)):
        argv += list(M)
    if snap.flexible and draw(st.integers(0, 9)):
        argv.append("m")
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.integers(0, 9))
        string = draw(st.sampled_from(strings))
        option = snap.by_string.get(string[2:] if snap.syntax == "gflags" else string)
        pool: tuple[str, ...] = VALUES
        if option is not None and option.type_kind == "other":
            pool = PROBES  # only its verdicts on these are recorded
        elif option is not None and option.choices:
            pool = (*VALUES, *map(str, option.choices))
        if kind == 0:
            argv.append(draw(st.sampled_from(("--zz-bogus", "zz", "-z", "--model"))))
            continue
        if kind == 1 and string.startswith("--") and len(string) > 4:
            string = string[: draw(st.integers(3, len(string) - 1))]  # abbreviation
        elif kind == 2 and snap.flexible and string.startswith("--"):
            string = "--" + string[2:].replace("-", "_")
        elif kind == 3 and snap.flexible and option is not None and option.type_kind == "other":
            string += "." + draw(st.sampled_from(("level", "method", "a", "kv_role")))
        if kind == 4:
            argv.append(f"{string}={draw(st.sampled_from(pool))}")
        else:
            argv.append(string)
            argv += draw(st.lists(st.sampled_from(pool), max_size=2))
    return argv


@pytest.mark.parametrize("target", TARGETS, ids="-".join)
@settings(
    max_examples=1,  # one batch: each real-parser subprocess pays the engine import
    deadline=None,
    derandomize=True,
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_random_argvs_agree(target: tuple[str, str], data: st.DataObject) -> None:
    _require(target)
    snap = load_snapshot(*target)
    argvs = data.draw(st.lists(_argv(snap), min_size=500, max_size=500), label="argvs")
    assert _disagreements(target, argvs) == []
