"""The sandbox's fake hardware tools: wrappers answer as tool.py does and replay their first
answer per argv (stdout, stderr and exit status) without running tool.py again."""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from launcher.sandbox import fakehw

QUERY = ("--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits")


def _host(tmp_path: Path, index: int) -> Path:
    tools = fakehw.install_tools(tmp_path)
    hostdir = tmp_path / f"h{index}"
    hostdir.mkdir()
    fakehw.materialize(fakehw.profile(index, f"198.18.0.{10 + index}"), index, hostdir, tools)
    return hostdir / "fakehw"


def _run(root: Path, tool: str, *args: str) -> tuple[int, str, str]:
    p = subprocess.run([str(root / "bin" / tool), *args], capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def _direct(root: Path, tool: str, *args: str) -> tuple[int, str, str]:
    tool_py = root.parent.parent / fakehw.TOOLS_DIR / "tool.py"
    p = subprocess.run(["python3", "-I", str(tool_py), str(root / "spec.json"), tool, *args],
                       capture_output=True, text=True, timeout=30)  # fmt: skip
    return p.returncode, p.stdout, p.stderr


def test_first_answer_is_tool_py_answer(tmp_path: Path) -> None:
    root = _host(tmp_path, 1)
    assert _run(root, "nvidia-smi", *QUERY) == _direct(root, "nvidia-smi", *QUERY)
    assert _run(root, "show_gids", "mlx5_0") == _direct(root, "show_gids", "mlx5_0")


def test_replays_per_argv_without_running_the_tool(tmp_path: Path) -> None:
    root = _host(tmp_path, 1)
    first = _run(root, "nvidia-smi", *QUERY)
    assert first[0] == 0 and first[1].count("\n") == 8
    # The spec changes under the wrapper: a cached argv still answers as before, a new one
    # sees the change (so the second answer cannot have come from tool.py).
    spec = json.loads((root / "spec.json").read_text())
    spec["gpus"] = spec["gpus"][:2]
    (root / "spec.json").write_text(json.dumps(spec))
    assert _run(root, "nvidia-smi", *QUERY) == first
    assert _run(root, "nvidia-smi", "-L")[1].count("\n") == 2


def test_failure_replayed_with_stderr_and_status(tmp_path: Path) -> None:
    root = _host(tmp_path, 4)  # h4: the HCA is gone
    first = _run(root, "ibv_devinfo")
    assert first == (255, "", "No IB devices found\n")
    assert _run(root, "ibv_devinfo") == first


def test_argument_boundaries_are_part_of_the_key(tmp_path: Path) -> None:
    root = _host(tmp_path, 1)
    assert _run(root, "nvidia-smi", "--query-gpu=index", "--format=csv")[0] == 0
    joined = _run(root, "nvidia-smi", "--query-gpu=index\n--format=csv")  # one argument
    assert joined == _direct(root, "nvidia-smi", "--query-gpu=index\n--format=csv") and joined[0] == 2


def test_concurrent_first_calls_agree(tmp_path: Path) -> None:
    root = _host(tmp_path, 2)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: _run(root, "show_gids"), range(16)))
    assert len(set(answers)) == 1 and answers[0][0] == 0
    assert not [p.name for p in (root / "cache").iterdir() if p.name.split(".")[-1].isdigit()]
