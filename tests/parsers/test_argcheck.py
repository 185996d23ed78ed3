"""Tier 1 (always runs): argcheck against the committed option snapshots."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.engines import argcheck
from launcher.engines.argcheck import (
    SnapshotNotFound,
    UnknownCommand,
    check_argv,
    known_versions,
    load_snapshot,
    split_command,
)

from .cases import CASES, M

OPTIONS = Path(argcheck.__file__).with_name("options")


@pytest.mark.parametrize(
    ("target", "argv", "problems"),
    CASES,
    ids=[f"{e}-{v}:{' '.join(a)[:60]}" for (e, v), a, _ in CASES],
)
def test_cases(target: tuple[str, str], argv: tuple[str, ...], problems: tuple[str, ...]) -> None:
    assert check_argv(*target, argv) == problems


def test_versions_and_normalised_lookup() -> None:
    assert known_versions("vllm") == ("0.30.0", "0.33.0")
    assert known_versions("vllm-ascend") == ("0.23.0",)
    assert known_versions("sglang") == ("0.5.23",)
    assert known_versions("vllm-router") == ("0.1.17",)  # and not a "vllm" version above
    assert load_snapshot("vllm-ascend", "v0.23").version == "0.23.0"
    assert load_snapshot("vllm", "0.33").version == "0.33.0"


def test_unknown_version_names_the_known_ones() -> None:
    with pytest.raises(SnapshotNotFound) as err:
        check_argv("vllm", "0.31.0", ["m"])
    assert str(err.value) == "no option snapshot for vllm 0.31.0 (known: 0.30.0, 0.33.0)"
    with pytest.raises(SnapshotNotFound) as err:
        load_snapshot("tgi", "1.0")
    assert str(err.value) == "no option snapshot for tgi 1.0 (known: none)"


@pytest.mark.parametrize(
    ("command", "engine", "args"),
    [
        (("python3", "-m", "sglang.launch_server", *M), "sglang", M),
        (("/usr/bin/python3.11", "-m", "sglang.launch_server"), "sglang", ()),
        (("sglang", "serve", *M, "--tp", "8"), "sglang", (*M, "--tp", "8")),
        (("/opt/venv/bin/vllm", "serve", "m", "-tp", "2"), "vllm", ("m", "-tp", "2")),
        (("python", "-m", "sglang_router.launch_router", "--port", "8000"), "sglang-router",
         ("--port", "8000")),
        (("smg", "launch", "--port", "8000"), "sglang-router", ("--port", "8000")),
        (("vllm-router", "--port", "8000"), "vllm-router", ("--port", "8000")),
        (("/usr/local/bin/vllm-router",), "vllm-router", ()),
        (("python3", "-m", "vllm_router.launch_router", "--port", "8000"), "vllm-router",
         ("--port", "8000")),
        (("mooncake_master", "--rpc_port=50051"), "mooncake", ("--rpc_port=50051",)),
    ],
)
def test_split_command(command: tuple[str, ...], engine: str, args: tuple[str, ...]) -> None:
    assert split_command(command) == (engine, args)


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ((), "empty command"),
        (("python3", "-m", "vllm.entrypoints.openai.api_server"),
         "not an engine command: python3 -m vllm.entrypoints.openai.api_server"),
        (("vllm", "bench", "serve"), "not an engine command: vllm bench serve"),
        (("python3", "-m", "vllm_router"), "not an engine command: python3 -m vllm_router"),
        (("python3", "sglang.launch_server"), "not an engine command: python3 sglang.launch_server"),
    ],
)
def test_split_command_rejects(command: tuple[str, ...], message: str) -> None:
    with pytest.raises(UnknownCommand) as err:
        split_command(command)
    assert str(err.value) == message


def test_help_is_not_a_launch() -> None:
    assert check_argv("sglang", "0.5.23", (*M, "-h")) == (
        "argument -h/--help: prints and exits; the engine would not start",
    )


def test_vllm_router_bootstrap_port_is_read_after_a_clean_parse() -> None:
    """The launcher reads bootstrap ports only once argparse accepted the argv, first bad one."""
    assert check_argv("vllm-router", "0.1.17", ("--prefill", "u", "x", "--bogus")) == (
        "unrecognized arguments: --bogus",
    )
    assert check_argv("vllm-router", "0.1.17", ("--prefill", "u", "8998", "--prefill", "v", "y",
                                                "--prefill", "w", "z")) == (
        "ValueError: Invalid bootstrap port: y. Must be a number or 'none'",
    )


def test_vllm_hidden_negations_are_registered() -> None:
    """EnableDisableAction keeps --no-enable-x out of the action's strings but in the parser."""
    snap = load_snapshot("vllm", "0.33.0")
    caching = snap.by_string["--enable-prefix-caching"]
    assert "--no-enable-prefix-caching" not in caching.strings
    assert snap.by_string["--no-enable-prefix-caching"] is caching


@pytest.mark.parametrize("path", sorted(OPTIONS.glob("*.json")), ids=lambda p: p.name)
def test_snapshot_files(path: Path) -> None:
    assert path.stat().st_size < 500_000
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert path.name == f"{raw['engine']}-{raw['version']}.json"
    assert raw["package_version"].startswith(raw["version"])
    assert re.fullmatch(
        r"<venv (\S+)>/bin/python tools/snapshot_options.py write \1", raw["generated_by"]
    )
    assert path.read_text(encoding="utf-8") == json.dumps(
        raw, indent=1, sort_keys=True, ensure_ascii=False
    ) + "\n", "not in the generator's canonical form"
    snap = load_snapshot(raw["engine"], raw["version"])
    assert len(snap.by_string) > 20


def test_standalone_import(tmp_path: Path) -> None:
    """The sandbox stand-in imports argcheck.py alone, with the snapshots elsewhere."""
    shutil.copy(argcheck.__file__, tmp_path / "argcheck.py")
    shutil.copytree(OPTIONS, tmp_path / "opts")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import argcheck; "
        "print(argcheck.check_argv('sglang', '0.5.23', ['--model-path', 'm', '--bogus']))"
    )
    done = subprocess.run(  # -I: no PYTHONPATH, no site packages, launcher not importable
        [sys.executable, "-I", "-c", code, str(tmp_path)],
        cwd=tmp_path,
        env={"FLEET_ENGINE_OPTIONS": str(tmp_path / "opts")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        "('unrecognized arguments: --bogus',)\n",
        "",
    )


def test_opaque_json_configs_need_an_object() -> None:
    """vLLM's dataclass-validated configs: argcheck checks the JSON object shape only."""
    assert check_argv("vllm", "0.33.0", ("m", "--compilation-config", "zz")) == (
        "argument --compilation-config/-cc: invalid parse_dataclass value: 'zz'",
    )
    assert check_argv("vllm", "0.33.0", ("m", "-cc", '{"mode": 3}')) == ()
