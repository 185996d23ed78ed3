"""Plan-time checks of what the engines will be asked to run (issue #26 item 4): every engine
argv against the pinned version's option snapshot, overrides that the argv contradicts, an image
that is not the pinned engine, an image override that systemd units do not use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.cli import cli
from launcher.config.recipes import load_catalog
from launcher.engines import optioncheck
from launcher.plancheck import ENGINE_ROLES

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = str(REPO / "inventories" / "example.yaml")
HEAD = """\
name: deepseek-pp2
recipe: deepseek/sglang-tp8pp2-6000d-fp8
placement:
  rank:
    hosts: rtx6000d_rack1[0:1]
"""


def _plan(tmp_path: Path, tail: str, head: str = HEAD) -> tuple[int, str]:
    (tmp_path / "pb.yaml").write_text(head + tail)
    result = CliRunner().invoke(cli, ["plan", str(tmp_path / "pb.yaml"), "-i", EXAMPLE, "--json"])
    return result.exit_code, result.stderr.replace(str(tmp_path) + "/", "")


@pytest.mark.parametrize(
    "tail, message",
    [
        ("overrides:\n  engine_args: [--moe-runner-backnd, marlin]\n",
         "pb.yaml:7:3: overrides/engine_args: --moe-runner-backnd is not an option of sglang 0.5.23 "
         "(did you mean --moe-runner-backend?)"),
        ('overrides:\n  engine_args: [--cuda-graph-max-bs, "8"]\n',
         "pb.yaml:7:3: overrides/engine_args: --cuda-graph-max-bs was removed in sglang 0.5.23: use "
         "--cuda-graph-max-bs-decode / --cuda-graph-max-bs-prefill"),
        ("overrides:\n  engine_args: [--enable-ep-moe]\n",
         "pb.yaml:7:3: overrides/engine_args: --enable-ep-moe was removed in sglang 0.5.23: use --ep-size N"),
        ('overrides:\n  engine_args: [--tp-size, "x"]\n',
         "pb.yaml:7:3: overrides/engine_args: sglang 0.5.23 would refuse the command: argument "
         "--tp-size/--tensor-parallel-size: invalid int value: 'x'"),
        ('overrides:\n  parallelism: {tp: 8, pp: 2, ep: 1}\n  engine_args: [--ep-size, "8"]\n',
         "pb.yaml:7:3: overrides/parallelism: ep is 1 here, but the engine argv asks for 8 (a flag in the recipe's "
         "engine_args or overrides.engine_args): change it with overrides.engine_args or drop it with "
         "overrides.remove_args"),
    ],
    ids=["unknown", "removed", "removed-long-ago", "bad-value", "parallelism-vs-argv"],
)
def test_refused_at_plan_time(tmp_path: Path, tail: str, message: str) -> None:
    assert _plan(tmp_path, tail) == (2, f"fleet: error: {message}\n")


def test_unknown_flag_that_another_version_has(tmp_path: Path) -> None:
    head = HEAD.replace("deepseek/sglang-tp8pp2-6000d-fp8", "mistral/vllm-tp1-h100-baseline")
    head = head.replace("rank:\n    hosts: rtx6000d_rack1[0:1]", "single:\n    hosts: h100-01")
    code, err = _plan(tmp_path, "overrides:\n  engine_args: [--enable-mamba-fine-grained-prefix-cache]\n", head)
    assert "--enable-mamba-fine-grained-prefix-cache is not an option of vllm 0.33.0" in err, err
    assert "vllm 0.30.0 has it" in err and code == 2


@pytest.mark.parametrize(
    "tail, warning",
    [
        ("overrides:\n  engine_args: [--enable-dp-attention]\n",
         "--enable-dp-attention is deprecated in sglang 0.5.23: use --attn-dp-size N"),
        ("overrides:\n  image: vllm/vllm-openai:v0.33.0\n",
         "image vllm/vllm-openai:v0.33.0 looks like vllm, but the recipe runs sglang 0.5.23"),
        ("overrides:\n  image: lmsysorg/sglang:v0.5.5-cu129\n",
         "image lmsysorg/sglang:v0.5.5-cu129 is sglang 0.5.5, but the recipe pins sglang 0.5.23"),
        ("runtime: systemd\noverrides:\n  image: lmsysorg/sglang:v0.5.23-cu130\n",
         "pb.yaml: overrides.image not used on rtx-01, rtx-02: runtime systemd runs the programs installed on "
         "the host, not an image"),
    ],
    ids=["deprecated", "other-engine", "older-version", "systemd-drops-image"],
)
def test_warned_at_plan_time(tmp_path: Path, tail: str, warning: str) -> None:
    assert _plan(tmp_path, tail) == (0, f"fleet: warning: {warning}\n")


def test_the_catalog_plans_without_a_warning(tmp_path: Path) -> None:
    assert _plan(tmp_path, "") == (0, "")


def _golden_engine_argvs() -> list[tuple[str, tuple[str, ...]]]:
    out = []
    for path in sorted((REPO / "tests" / "golden" / "plan").glob("*.json")):
        plan = json.loads(path.read_text())
        for unit in plan["units"]:
            if unit["role"] in ENGINE_ROLES:
                out.append((plan["recipe"], tuple(unit["argv"])))
    return out


def test_every_catalog_recipe_passes_the_argv_check() -> None:
    """All 55 recipes, as the golden plans place them: accepted by their pinned version's parser,
    nothing deprecated, the image the pinned engine."""
    catalog = load_catalog()
    argvs = _golden_engine_argvs()
    assert {rid for rid, _ in argvs} >= set(catalog.recipes), "a recipe without a golden plan"
    for rid, argv in argvs:
        recipe = catalog.get(rid)
        assert optioncheck.argv_error(argv, recipe.engine, recipe.engine_version) is None, rid
        assert optioncheck.argv_warnings(argv, recipe.engine, recipe.engine_version) == (), rid
        assert optioncheck.image_warning(recipe.image, recipe.engine, recipe.engine_version) is None, rid


def test_a_version_without_a_snapshot_is_said_not_checked() -> None:
    argv = ("vllm", "serve", "/models/m", "--bogus")
    assert optioncheck.argv_error(argv, "vllm", "0.31.0") is None
    assert optioncheck.argv_warnings(argv, "vllm", "0.31.0") == (
        "no option snapshot for vllm 0.31.0 (fleet has 0.30.0, 0.33.0): its flags are not checked",
    )


def test_flag_of_names_the_flag_blamed() -> None:
    assert optioncheck.flag_of("sglang 0.5.23 would refuse the command: argument --tp-size/--tensor-parallel-size: x") == "--tp-size"
    assert optioncheck.flag_of("--x was removed in sglang 0.5.23: use --y") == "--x"
