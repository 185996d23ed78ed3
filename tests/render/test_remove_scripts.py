"""The remove and hold commands (launcher/hostscripts/docker-remove.sh, systemd-remove.sh,
docker-hold.sh) run by this machine's ``sh`` against stand-in ``docker`` / ``systemctl`` that
record their arguments and answer as the real ones do: a unit gone already is removed, any other
failure is one line on stderr and exit 1; holding never fails."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from launcher.runtimes import registry
from launcher.runtimes.base import UnitCommands


def unit_commands(name: str, runtime: str, unit_dir: str) -> UnitCommands:
    return registry.get(runtime).commands(name, unit_dir)


def hold_argv(runtime: str, names: list[str]) -> tuple[str, ...] | None:
    return registry.get(runtime).hold_argv(names)

# Records its argv in calls, then answers with $ANSWER (stderr) and $RC -- for its first $TIMES
# calls if set (a count kept in $CALLS.n), then with nothing and 0.
TOOL = """#!/bin/sh
echo "$(basename "$0") $*" >> "$CALLS"
if [ -n "$TIMES" ]; then
  n=$(cat "$CALLS.n" 2>/dev/null || echo 0); echo $((n + 1)) > "$CALLS.n"
  [ "$n" -lt "$TIMES" ] || exit 0
fi
if [ -n "$ANSWER" ]; then echo "$ANSWER" >&2; fi
exit "${RC:-0}"
"""


class Tools:
    """A PATH directory with the stand-in ``docker`` and ``systemctl`` (and ``sleep``, which
    only records its call)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for tool in ("docker", "systemctl"):
            (root / tool).write_text(TOOL)
            (root / tool).chmod(0o755)
        (root / "sleep").write_text('#!/bin/sh\necho "sleep $*" >> "$CALLS"\n')
        (root / "sleep").chmod(0o755)

    def __call__(self, argv: tuple[str, ...], answer: str = "", rc: int = 0,
                 times: int | None = None) -> tuple[int, str, list[str]]:
        """(exit status, stderr, the tools' calls) of ``argv`` when every tool answers so (the
        docker/systemctl calls so far counted together: the first ``times`` only, if given)."""
        calls = self.root / "calls"
        calls.write_text("")
        (self.root / "calls.n").unlink(missing_ok=True)
        env = {"PATH": f"{self.root}:/usr/bin:/bin", "CALLS": str(calls), "ANSWER": answer, "RC": str(rc),
               "TIMES": "" if times is None else str(times)}
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30)
        return proc.returncode, proc.stderr, calls.read_text().splitlines()


@pytest.fixture
def run(tmp_path: Path) -> Tools:
    return Tools(tmp_path)


def test_docker_remove_drains_then_removes(run: Tools) -> None:
    argv = unit_commands("fleet-x-r0", "docker", "/etc/fleet/x/fleet-x-r0").remove(30)
    assert run(argv) == (0, "", ["docker stop -t 30 fleet-x-r0", "docker rm -f fleet-x-r0"])
    no_grace = unit_commands("fleet-x-r0", "docker", "/etc/fleet/x/fleet-x-r0").remove()
    assert run(no_grace) == (0, "", ["docker rm -f fleet-x-r0"])


def test_docker_remove_of_a_gone_container_succeeds_other_failures_do_not(run: Tools) -> None:
    argv = unit_commands("fleet-x-r0", "docker", "/d").remove()
    assert run(argv, "Error response from daemon: No such container: fleet-x-r0", 1)[:2] == (0, "")
    busy = "Error response from daemon: cannot remove container fleet-x-r0: device or resource busy"
    assert run(argv, busy, 1)[:2] == (1, busy + "\n")


NO_EXIT_EVENT = ("Error response from daemon: Cannot kill container: fleet-x-r0: tried to kill container, "
                 "but did not receive an exit event")


def test_docker_remove_tries_again_while_the_exit_event_is_late(run: Tools) -> None:
    argv = unit_commands("fleet-x-r0", "docker", "/d").remove()
    late = run(argv, NO_EXIT_EVENT, 1, times=2)
    assert late == (0, "", ["docker rm -f fleet-x-r0", "sleep 2", "docker rm -f fleet-x-r0", "sleep 2",
                            "docker rm -f fleet-x-r0"])  # fmt: skip
    never = run(argv, NO_EXIT_EVENT, 1)
    assert never[:2] == (1, NO_EXIT_EVENT + "\n")
    assert never[2] == ["docker rm -f fleet-x-r0", "sleep 2"] * 5 + ["docker rm -f fleet-x-r0"]


@pytest.mark.parametrize("gone", ["Failed to disable unit: Unit file fleet-x-r0.service does not exist.",
                                  "Unit fleet-x-r0.service not loaded."])  # fmt: skip
def test_systemd_remove_disables_and_a_gone_unit_succeeds(run: Tools, gone: str) -> None:
    argv = unit_commands("fleet-x-r0", "systemd", "/d").remove(30)
    assert run(argv) == (0, "", ["systemctl disable --now fleet-x-r0.service"])
    assert run(argv, gone, 1)[:2] == (0, "")
    assert run(argv, "Access denied", 1)[:2] == (1, "Access denied\n")


def test_hold_never_fails(run: Tools) -> None:
    argv = hold_argv("docker", ["fleet-x-r0", "fleet-x-r1"])
    assert argv is not None and hold_argv("systemd", ["fleet-x-r0"]) is None and hold_argv("docker", []) is None
    assert run(argv, "Error: No such container: fleet-x-r1", 1) == (
        0, "", ["docker update --restart=no fleet-x-r0 fleet-x-r1"]
    )
