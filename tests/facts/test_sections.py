"""The section script runs its sections concurrently and prints them in order, the same as
running them one after another; run here by real shells (dash, bash, busybox sh)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from launcher.facts.host import MARKER, gather_script, sections_script, split_sections

SHELLS = [[str(shutil.which(s[0])), *s[1:]] for s in (["dash"], ["bash"], ["busybox", "sh"]) if shutil.which(s[0])]

# Output shapes that matter: several lines, no output, trailing newlines, stderr, failures,
# quoting, and one slow section that must not reorder the others.
SECTIONS = (
    ("lines", "printf 'a\\nb\\n\\n\\n'"),
    ("empty", "true"),
    ("stderr", "echo out; echo err >&2; exit 3"),
    ("slow", "sleep 0.3; echo late"),
    ("quote", "printf '%s\\n' \"it's \\$HOME\""),
    ("missing", "no-such-tool-here"),
)


def run(shell: list[str], script: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run([*shell, "-c", script], capture_output=True, text=True, check=True, timeout=30,
                          env=env).stdout


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: Path(s[0]).name)
def test_concurrent_equals_sequential(shell: list[str], tmp_path: Path) -> None:
    script = sections_script(SECTIONS, first=(("one", "echo first"),), last=(("end", "echo last"),))
    concurrent = run(shell, script)
    # No mktemp on PATH: the fallback runs the sections one by one.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("sleep", "printf", "cat", "rm", "echo", "true"):
        found = shutil.which(tool)
        if found:
            (bindir / tool).symlink_to(found)
    sequential = run(shell, script, env={"PATH": str(bindir)})
    assert "mktemp" not in os.listdir(bindir)
    # Equal but for the script line number in the shell's "not found" message.
    assert re.sub(r"\b\d+: no-such", "N: no-such", concurrent) == re.sub(r"\b\d+: no-such", "N: no-such", sequential)
    got = split_sections(concurrent)
    assert list(got) == ["one", "lines", "empty", "stderr", "slow", "quote", "missing", "end"]
    assert got["lines"] == (0, "a\nb")
    assert got["empty"] == (0, "")
    assert got["stderr"] == (3, "out\nerr")
    assert got["slow"] == (0, "late")
    assert got["quote"] == (0, "it's $HOME")
    assert got["missing"][0] == 127 and "no-such-tool-here" in got["missing"][1]
    assert got["end"] == (0, "last")


def test_temp_dir_is_removed() -> None:
    tmp = Path(subprocess.run(["mktemp", "-d"], capture_output=True, text=True, check=True).stdout.strip())
    try:
        script = sections_script((("where", 'echo "$TMPDIR"'),))
        run(["sh"], script, env={**os.environ, "TMPDIR": str(tmp)})
        assert list(tmp.iterdir()) == []
    finally:
        tmp.rmdir()


def test_gather_script_keeps_the_clock_brackets_outside() -> None:
    lines = gather_script(("/srv/models",)).splitlines()
    markers = [ln for ln in lines if MARKER in ln]
    assert "clock_start" in markers[0] and "clock_end" in markers[-1]
    assert lines.index("wait") < next(i for i, ln in enumerate(lines) if "clock_end" in ln)
