"""The health gate with its real remote wait script, run by dash and by busybox sh on this
machine against stand-in ``docker``/``systemctl``/``curl`` commands; and the gate's handling of
hosts that answer garbage or time out (fake transports)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import pytest

from launcher.deploy import steps, wait
from launcher.deploy.desired import Desired
from launcher.deploy.health import Verdict, gate
from launcher.runtimes import docker
from launcher.runtimes.docker import DOCKER_FORMAT
from launcher.execute.fake import FakeTransport, Reply, RunCall
from launcher.execute.local import LocalTransport
from launcher.execute.transport import Transport
from launcher.output import QuietProgress
from tests.deploy.factory import pp_plan, target

R0, R1, ROUTER = "fleet-demo-rank-r0", "fleet-demo-rank-r1", "fleet-demo-router"
URL0 = "http://h1:30000/health"
RUN0 = "h1: sh /etc/fleet/demo/fleet-demo-rank-r0/run.sh: fleet-demo-rank-r0"
RUN1 = "h2: sh /etc/fleet/demo/fleet-demo-rank-r1/run.sh: fleet-demo-rank-r1"

# Stand-ins for what a host runs.  State lives in files the test writes: docker.<name> holds
# "status|exit code|restarts", docker.logs.<name> (else docker.logs) its log, systemd.<unit> a
# `systemctl show` block; a probe succeeds from
# its ready_after-th call on (never without that file) and keeps its last argv.
DOCKER = """#!/bin/sh
S=@STATE@
case $1 in
inspect)
  f=$5; shift 5
  if [ -f "$S/docker.down" ]; then
    echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2; exit 1
  fi
  rc=0
  for n; do
    if [ ! -f "$S/docker.$n" ]; then echo "Error: No such container: $n" >&2; rc=1
    elif [ "$f" = "{{.State.StartedAt}}" ]; then cat "$S/docker.$n.started" 2>/dev/null || echo "2026-01-01T00:00:00Z"
    else read -r st < "$S/docker.$n"; echo "/$n|$st"; fi
  done
  exit $rc ;;
logs)
  if [ -f "$S/docker.logs.$5" ]; then cat "$S/docker.logs.$5"
  elif [ -f "$S/docker.logs" ]; then cat "$S/docker.logs"
  else echo "2026-01-01T00:00:00.000000000Z FATAL: rendezvous with rank 0 failed"; fi ;;
esac
"""
SYSTEMCTL = """#!/bin/sh
S=@STATE@
if [ -f "$S/systemd.down" ]; then
  echo "System has not been booted with systemd as init system (PID 1). Can't operate." >&2; exit 1
fi
shift 2
sep=
for u; do
  printf '%s' "$sep"; sep='
'
  if [ -f "$S/systemd.$u" ]; then cat "$S/systemd.$u"; else printf 'Id=%s\\nLoadState=not-found\\nActiveState=inactive\\n' "$u"; fi
done
"""
JOURNALCTL = """#!/bin/sh
S=@STATE@
if [ -f "$S/journal" ]; then cat "$S/journal"; else echo "2026-01-01T00:00:00+0000 h1 engine[1]: FATAL: out of memory"; fi
echo "-- cursor: s=1"
"""
PROBE = """#!/bin/sh
S=@STATE@
printf '%s\\n' "$0" "$@" > "$S/probe.argv"
n=0; if [ -f "$S/probe.n" ]; then read -r n < "$S/probe.n"; fi
n=$((n+1)); echo "$n" > "$S/probe.n"
[ -f "$S/ready_after" ] && read -r k < "$S/ready_after" && [ "$n" -ge "$k" ]
"""


class Host:
    """A bin directory that is the whole PATH: ``sh`` (dash or busybox), a few coreutils, the
    stand-ins, and the probe tool asked for (or none)."""

    def __init__(self, root: Path, shell: str, tool: str | None) -> None:
        self.state = root / "state"
        self.bin = root / "bin"
        self.state.mkdir()
        self.bin.mkdir()
        for name, target_ in (("sh", shell), ("date", _coreutil("date", shell)), ("sleep", _coreutil("sleep", shell)),
                              ("cat", _coreutil("cat", shell))):  # fmt: skip
            (self.bin / name).symlink_to(target_)
        scripts = {"docker": DOCKER, "systemctl": SYSTEMCTL, "journalctl": JOURNALCTL}
        if tool is not None:
            scripts[tool] = PROBE
        for name, text in scripts.items():
            path = self.bin / name
            path.write_text(text.replace("@STATE@", str(self.state)))
            path.chmod(0o755)

    def set(self, name: str, text: str) -> None:
        (self.state / name).write_text(text + "\n")

    def probe_argv(self) -> list[str]:
        return (self.state / "probe.argv").read_text().splitlines()

    def probes(self) -> int:
        return int((self.state / "probe.n").read_text())


def _coreutil(name: str, shell: str) -> str:
    if shell.endswith("busybox"):
        return shell
    found = shutil.which(name)
    assert found is not None
    return found


SHELLS = [s for s in (shutil.which("dash"), shutil.which("busybox")) if s is not None]


@pytest.fixture(params=SHELLS, ids=[os.path.basename(s) for s in SHELLS])
def shell(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def host(tmp_path: Path, shell: str, monkeypatch: pytest.MonkeyPatch) -> Host:
    h = Host(tmp_path, shell, "curl")
    monkeypatch.setenv("PATH", str(h.bin))
    return h


def units(*names: str) -> list[Desired]:
    return [d for d in target(pp_plan()).units if d.name in names]


def systemd(d: Desired) -> Desired:
    return replace(d, unit=replace(d.unit, runtime="systemd"))


def run_gate(ds: Sequence[Desired], transports: dict[str, Transport], timeout: float = 20) -> dict[str, Verdict]:
    """``timeout``: the groups' deadline (a broken test fails in seconds, not the units' 60 s)."""
    groups: dict[str, list[Desired]] = {}
    for d in ds:
        groups.setdefault(d.unit.group, []).append(d)
    return gate(groups, transports, timeout_override=timeout, forks=2, progress=QuietProgress())


def local(*hosts: str) -> dict[str, Transport]:
    return {h: LocalTransport(h) for h in hosts}


def errors(verdicts: dict[str, Verdict]) -> dict[str, str | None]:
    return {g: None if v.healthy else str(v.error) for g, v in verdicts.items()}


# ---------------------------------------------------------------------------------------------
# the real script


def test_group_is_healthy_once_rank0_answers_and_every_rank_runs(host: Host) -> None:
    host.set(f"docker.{R0}", "running|0|0")
    host.set(f"docker.{R1}", "running|0|0")
    host.set("ready_after", "3")  # the endpoint answers from the third probe on
    verdicts = run_gate(units(R0, R1), local("h1", "h2"))
    assert errors(verdicts) == {"g0": None}
    assert host.probes() >= 3
    assert host.probe_argv() == [str(host.bin / "curl"), "-fsS", "-o", "/dev/null", "-m", "5", URL0]


def test_a_rank_that_exited_fails_its_group_with_its_last_log_line(host: Host) -> None:
    host.set(f"docker.{R0}", "running|0|0")
    host.set(f"docker.{R1}", "exited|4|0")
    verdicts = run_gate(units(R0, R1), local("h1", "h2"))
    assert errors(verdicts) == {
        "g0": f"{RUN1} exited while its group was starting (exit 4): FATAL: rendezvous with rank 0 failed"
    }
    assert "FATAL" in verdicts["g0"].detail


def test_a_dead_unit_ends_the_wait_at_the_first_look(host: Host) -> None:
    host.set(f"docker.{R0}", "exited|1|0")  # and its endpoint never answers
    seen = wait.run_wait(LocalTransport("h1"), units(R0), window_s=60, step_s=0.15, probe_timeout_s=5)
    assert seen.live[R0].state == "exited" and seen.probes == {R0: False}
    assert host.probes() == 1, "liveness is read at the first step, not only at the window's end"


def test_a_rank_that_restarted_or_vanished_fails_its_group(host: Host) -> None:
    host.set(f"docker.{R0}", "running|0|1")
    host.set("ready_after", "1")
    assert errors(run_gate(units(R0), local("h1"))) == {
        "g0": f"{RUN0} restarted once by its runtime while its group was starting: FATAL: rendezvous with rank 0 failed"
    }
    assert errors(run_gate(units(R1), local("h2")))["g0"] == (
        f"{RUN1} missing while its group was starting (no exit status): FATAL: rendezvous with rank 0 failed"
    )


def test_a_restarted_rank_is_reported_by_the_run_that_died(host: Host) -> None:
    """docker keeps one log across restarts and resets the exit status: the failure is the last
    line stamped before the current run started (docker trims the stamps' trailing zeros, so
    05.49 < 05.4999 only when compared as times), and no exit status is quoted."""
    host.set(f"docker.{R0}", "running|0|0")
    host.set(f"docker.{R1}", "running|0|2")
    host.set(f"docker.{R1}.started", "2026-01-01T00:00:05.4999Z")
    host.set("docker.logs", "\n".join((
        "2026-01-01T00:00:01Z loading weights",
        "2026-01-01T00:00:05.49Z FATAL: injected failure: crash-at-start",
        "2026-01-01T00:00:05.500000001Z start",
        "2026-01-01T00:00:06.1Z rendezvous_join rank=1",
    )))  # fmt: skip
    host.set("ready_after", "1")
    verdict = run_gate(units(R0, R1), local("h1", "h2"))["g0"]
    assert str(verdict.error) == (
        f"{RUN1} restarted 2 times by its runtime while its group was starting: FATAL: injected failure: crash-at-start"
    )
    assert verdict.culprit == ("h2", R1) and verdict.detail.endswith("rendezvous_join rank=1")


def test_a_restarted_systemd_unit_is_reported_by_the_run_that_died(host: Host) -> None:
    block = "Id={}.service\nLoadState=loaded\nActiveState=active\nSubState=running\nExecMainStatus=0\nNRestarts=1"
    host.set(f"systemd.{R1}.service", block.format(R1))
    host.set("journal", "\n".join((
        "2026-01-01T00:00:01+0000 h2 engine[7]: FATAL: NCCL error: unhandled system error",
        f"2026-01-01T00:00:01+0000 h2 systemd[1]: {R1}.service: Main process exited, code=exited, status=1/FAILURE",
        f"2026-01-01T00:00:01+0000 h2 systemd[1]: {R1}.service: Failed with result 'exit-code'.",
        f"2026-01-01T00:00:06+0000 h2 systemd[1]: Started {R1}.service.",
        "2026-01-01T00:00:07+0000 h2 engine[9]: rendezvous_join rank=1",
    )))  # fmt: skip
    assert errors(run_gate([systemd(units(R1)[0])], local("h2")))["g0"] == (
        f"{RUN1} restarted once by its runtime while its group was starting: "
        "2026-01-01T00:00:01+0000 h2 engine[7]: FATAL: NCCL error: unhandled system error"
    )


def test_a_failed_systemd_unit_is_reported_by_its_own_last_line_not_systemds(host: Host) -> None:
    """A real journal ends a dead run with systemd's own lines (seen on the systemd sandbox
    hosts); the failure is the engine's last line before them, even before any restart."""
    block = "Id={}.service\nLoadState=loaded\nActiveState=activating\nSubState=auto-restart\nExecMainStatus=1\nNRestarts=0"
    host.set(f"systemd.{R1}.service", block.format(R1))
    host.set("journal", "\n".join((
        f"2026-01-01T00:00:01+0000 h2 systemd[1]: Started {R1}.service.",
        "2026-01-01T00:00:01+0000 h2 engine[7]: FATAL: injected failure: crash-at-start",
        f"2026-01-01T00:00:01+0000 h2 systemd[1]: {R1}.service: Main process exited, code=exited, status=1/FAILURE",
        f"2026-01-01T00:00:01+0000 h2 systemd[1]: {R1}.service: Failed with result 'exit-code'.",
    )))  # fmt: skip
    assert errors(run_gate([systemd(units(R1)[0])], local("h2")))["g0"] == (
        f"{RUN1} restarting while its group was starting (exit 1): "
        "2026-01-01T00:00:01+0000 h2 engine[7]: FATAL: injected failure: crash-at-start"
    )


# What each rank of a group that died together logged last: the cause on one, the lost peer on
# the other (the stand-in's lines for SGLang's Mooncake store setup and the rendezvous).
MOONCAKE = "FATAL: Failed to setup Mooncake store, error code: -900 (master 198.18.0.15:50051: timed out)"
LOST_R1 = "FATAL: rank 1 (h2) disconnected: process group is broken"
LOST_R0 = "FATAL: rank 1: lost the connection to rank 0: process group is broken"
GLOO_LOST = ("(Worker pid=20) ERROR 12-01 15:42:16 [multiproc_executor.py:1063] RuntimeError: "
             "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [198.18.0.2]:21573")  # fmt: skip


@pytest.mark.parametrize(("log0", "log1", "culprit", "error"), [
    (LOST_R1, MOONCAKE, R1, f"{RUN1} exited while its group was starting (exit 1): {MOONCAKE}"),
    (MOONCAKE, LOST_R0, R0, f"{RUN0} exited while its group was starting (exit 1): {MOONCAKE}"),
    (GLOO_LOST, MOONCAKE, R1, f"{RUN1} exited while its group was starting (exit 1): {MOONCAKE}"),
    (MOONCAKE, "FATAL: out of memory", R0, f"{RUN0} exited while its group was starting (exit 1): {MOONCAKE}"),
    (LOST_R1, LOST_R0, R0, f"{RUN0} exited while its group was starting (exit 1): {LOST_R1}"),
], ids=["rank1-cause", "rank0-cause", "gloo-peer-closed", "both-causes", "both-lost"])  # fmt: skip
def test_ranks_that_died_together_are_reported_by_the_cause_not_the_lost_peer(
    host: Host, log0: str, log1: str, culprit: str, error: str
) -> None:
    """Whichever rank died first: the culprit is the first rank (group order) whose line names a
    cause, not one that only lost its peer; when both or neither do, rank 0."""
    for name, line in ((R0, log0), (R1, log1)):
        host.set(f"docker.{name}", "exited|1|0")
        host.set(f"docker.logs.{name}", f"2026-01-01T00:00:00.1Z starting\n2026-01-01T00:00:05Z {line}")
    verdict = run_gate(units(R0, R1), local("h1", "h2"))["g0"]
    assert str(verdict.error) == error
    assert verdict.culprit == ("h1" if culprit == R0 else "h2", culprit)
    assert verdict.detail.splitlines() == ["starting", log0 if culprit == R0 else log1], "the culprit's own log"


def test_a_rank_seen_alive_just_before_its_peer_lost_it_is_read_again() -> None:
    """The wait of rank 1's host ended a moment before rank 1 died; rank 0's saw rank 0 dead of
    it: liveness is read again, so rank 1's cause is named."""
    def seen(name: str, state: str) -> bytes:
        return f"{wait.MARK}docker\n/{name}|{state}\n{wait.MARK}systemd\n\n{wait.MARK}probe 0 0\n{wait.MARK}end\n".encode()

    def logs(line: str) -> Reply:
        return Reply(match="docker logs --timestamps", stdout=f"2026-01-01T00:00:00Z\n2026-01-01T00:00:05Z {line}\n".encode())

    inspect = re.escape(shlex.quote(docker._INSPECT))
    transports: dict[str, Transport] = {
        "h1": FakeTransport("h1", [logs(LOST_R1), Reply(match=inspect, stdout=f"/{R0}|exited|1|0\n".encode()),
                                   Reply(match="", stdout=seen(R0, "exited|1|0"))]),
        "h2": FakeTransport("h2", [logs(MOONCAKE), Reply(match=inspect, stdout=f"/{R1}|exited|1|0\n".encode()),
                                   Reply(match="", stdout=seen(R1, "running|0|0"))]),
    }  # fmt: skip
    verdict = run_gate(units(R0, R1), transports)["g0"]
    assert str(verdict.error) == f"{RUN1} exited while its group was starting (exit 1): {MOONCAKE}"
    assert verdict.culprit == ("h2", R1)


def test_deadline_fails_a_group_whose_endpoint_never_answers(host: Host) -> None:
    host.set(f"docker.{R0}", "running|0|0")
    error = errors(run_gate(units(R0), local("h1"), timeout=0.5))["g0"]
    assert error is not None and error.startswith(f"{RUN0} not healthy at {URL0} after ")


def test_a_router_is_started_once_it_is_ready_not_once_it_listens(host: Host) -> None:
    """sglang-router 0.3.2 answers /health before it has registered its workers (measured): the
    gate polls the unit's ready URL, and its deadline names that URL."""
    (r,) = units(ROUTER)
    assert r.unit.health is not None
    ready = "http://h3:30000/readiness"
    d = replace(r, unit=replace(r.unit, health=replace(r.unit.health, ready_url=ready)))
    host.set(f"docker.{ROUTER}", "running|0|0")
    host.set("ready_after", "2")
    assert errors(run_gate([d], local("h3"))) == {"router": None}
    assert host.probe_argv()[-1] == ready
    (host.state / "ready_after").unlink()
    error = errors(run_gate([d], local("h3"), timeout=0.5))["router"]
    assert error is not None and error.startswith(
        f"h3: sh /etc/fleet/demo/{ROUTER}/run.sh: {ROUTER} not healthy at {ready} after "), error


def test_systemd_units_are_watched_through_systemctl(host: Host) -> None:
    r0, r1 = (systemd(d) for d in units(R0, R1))
    block = "Id={}.service\nLoadState=loaded\nActiveState={}\nSubState={}\nExecMainStatus=0\nNRestarts={}"
    host.set(f"systemd.{R0}.service", block.format(R0, "active", "running", 0))
    host.set(f"systemd.{R1}.service", block.format(R1, "active", "running", 0))
    host.set("ready_after", "1")
    assert errors(run_gate([r0, r1], local("h1", "h2"))) == {"g0": None}
    host.set(f"systemd.{R1}.service", block.format(R1, "activating", "auto-restart", 2))
    assert errors(run_gate([r0, r1], local("h1", "h2")))["g0"] == (
        f"{RUN1} restarting while its group was starting (exit 0): 2026-01-01T00:00:00+0000 h1 engine[1]: FATAL: out of memory"
    )


def test_mixed_runtimes_on_one_host_are_one_wait(host: Host) -> None:
    r0 = units(R0)[0]
    side = replace(systemd(r0), unit=replace(systemd(r0).unit, name="fleet-demo-side", health=None))
    host.set(f"docker.{R0}", "running|0|0")
    host.set("systemd.fleet-demo-side.service", "Id=fleet-demo-side.service\nLoadState=loaded\nActiveState=active\nSubState=running\nNRestarts=0")
    host.set("ready_after", "1")
    seen = wait.run_wait(LocalTransport("h1"), [r0, side], window_s=1, step_s=0.15, probe_timeout_s=5)
    assert {n: live.state for n, live in seen.live.items()} == {R0: "running", "fleet-demo-side": "running"}
    assert seen.probes == {R0: True}


def test_systemctl_failing_names_the_host_and_systemctl(host: Host) -> None:
    host.set("systemd.down", "")
    assert errors(run_gate([systemd(units(R1)[0])], local("h2"))) == {
        "g0": "h2: systemctl show: exit 1: System has not been booted with systemd as init system (PID 1). Can't operate."
    }


def test_no_systemctl_is_not_taken_for_a_missing_probe_tool(host: Host) -> None:
    (host.bin / "systemctl").unlink()
    error = errors(run_gate([systemd(units(R1)[0])], local("h2")))["g0"]
    assert error is not None and error.startswith("h2: systemctl show: exit 127: ") and error.endswith("not found")


def test_docker_daemon_down_names_the_host(host: Host) -> None:
    host.set("docker.down", "")
    assert errors(run_gate(units(R0, R1), local("h1", "h2")))["g0"] == (
        "h1: docker inspect: exit 0: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
        "Is the docker daemon running?"
    )


@pytest.mark.parametrize("tool", ["wget", "python3"])
def test_probe_falls_back_to_wget_then_python3(tmp_path: Path, shell: str, monkeypatch: pytest.MonkeyPatch, tool: str) -> None:
    if shell.endswith("busybox"):
        pytest.skip("busybox sh finds its own wget applet before PATH")
    h = Host(tmp_path, shell, tool)
    monkeypatch.setenv("PATH", str(h.bin))
    h.set(f"docker.{R0}", "running|0|0")
    h.set("ready_after", "1")
    assert errors(run_gate(units(R0), local("h1"))) == {"g0": None}
    argv = h.probe_argv()
    assert argv[0] == str(h.bin / tool) and URL0 in argv and "5" in argv


def test_no_probe_tool_is_the_same_error_as_a_lone_probe(tmp_path: Path, shell: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if shell.endswith("busybox"):
        pytest.skip("busybox sh finds its own wget applet before PATH")
    h = Host(tmp_path, shell, None)
    monkeypatch.setenv("PATH", str(h.bin))
    h.set(f"docker.{R0}", "running|0|0")
    assert errors(run_gate(units(R0), local("h1"))) == {
        "g0": f"h1: sh: exit 127: none of curl, wget, python3 on this host to probe {URL0}"
    }
    h.set(f"docker.{R1}", "running|0|0")
    assert errors(run_gate(units(R1), local("h2"))) == {"g0": None}, "no probe needed, no tool needed"


def test_urls_and_names_are_data_never_shell_text(host: Host, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r0 = units(R0)[0]
    assert r0.unit.health is not None
    evil = "http://h1:30000/health?$(touch pwned)`touch pwned2`;touch pwned3"
    d = replace(r0, unit=replace(r0.unit, name="x y*", health=replace(r0.unit.health, url=evil)))
    host.set("docker.x y*", "running|0|0")
    host.set("ready_after", "1")
    seen = wait.run_wait(LocalTransport("h1"), [d], window_s=1, step_s=0.15, probe_timeout_s=5)
    assert seen.live["x y*"].state == "running" and seen.probes == {"x y*": True}
    assert host.probe_argv()[-1] == evil
    assert not list(tmp_path.rglob("pwned*"))


# ---------------------------------------------------------------------------------------------
# answers that are not reports, hangs, rounds


def test_argv_is_the_fixed_script_with_data_as_positional_parameters() -> None:
    r0, r1 = units(R0, R1)
    argv = wait.wait_argv([r0, systemd(r1)], window_s=3, step_s=0.15, probe_timeout_s=5)
    assert argv == ("sh", "-c", wait._WAIT, "sh", "3", "0.15", "5", DOCKER_FORMAT,
                    "docker", R0, URL0, "systemd", f"{R1}.service", "")  # fmt: skip


def test_a_host_answering_garbage_fails_only_its_group() -> None:
    healthy = f"{wait.MARK}docker\n/{ROUTER}|running|0|0\n{wait.MARK}systemd\n\n{wait.MARK}probe 0 1\n{wait.MARK}end\n"
    transports: dict[str, Transport] = {
        "h1": FakeTransport("h1", [Reply(match="", stdout=b"Welcome to h1!\nfleet-wait:docker\n")]),
        "h2": FakeTransport("h2", [Reply(match="", stdout=b"")]),
        "h3": FakeTransport("h3", [Reply(match="", stdout=healthy.encode())]),
    }
    assert errors(run_gate(units(R0, R1, ROUTER), transports)) == {
        "g0": "h1: health wait: unreadable answer ('Welcome to h1!')",
        "router": None,
    }
    assert errors(run_gate(units(R1), transports)) == {"g0": "h2: health wait: empty answer"}


@pytest.mark.parametrize("line", ["fleet-wait:probe 1 1", "fleet-wait:probe 0 yes", "fleet-wait:what"])
def test_a_report_with_an_unknown_line_is_unreadable(line: str) -> None:
    out = f"{wait.MARK}docker\n/{R0}|running|0|0\n{line}\n{wait.MARK}end\n"
    t = FakeTransport("h1", [Reply(match="", stdout=out.encode())])
    assert errors(run_gate(units(R0), {"h1": t})) == {"g0": f"h1: health wait: unreadable answer ({line!r})"}


def test_a_wait_that_hangs_fails_its_group_naming_the_host() -> None:
    t = FakeTransport("h1", [Reply(match="", hang=True)])
    assert errors(run_gate(units(R0), {"h1": t})) == {"g0": "h1: health wait: no exit status: timed out after 128s"}


def test_other_failures_of_the_wait_name_the_host() -> None:
    t = FakeTransport("h1", [Reply(match="", exit_status=2, stderr=b"sh: 1: Syntax error: end of file unexpected\n")])
    assert errors(run_gate(units(R0), {"h1": t})) == {
        "g0": "h1: health wait: exit 2: sh: 1: Syntax error: end of file unexpected"
    }


def test_rounds_answered_at_once_are_padded_and_windows_end_at_the_deadline() -> None:
    starting = f"{wait.MARK}docker\n/{R0}|created|0|0\n{wait.MARK}systemd\n\n{wait.MARK}probe 0 0\n{wait.MARK}end\n"
    t = FakeTransport("h1", [Reply(match="docker logs --timestamps", stdout=b""), Reply(match="", stdout=starting.encode())])
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        assert len(slept) < 100, "the gate spins"
        slept.append(s)
        now[0] += s

    groups = {"g0": units(R0)}
    verdicts = gate(groups, {"h1": t}, timeout_override=4.2, forks=1, progress=QuietProgress(), clock=lambda: now[0], sleep=sleep)
    assert errors(verdicts) == {"g0": f"{RUN0} not healthy at {URL0} after 4s"}
    assert slept and all(s == pytest.approx(0.15) for s in slept)
    windows = [c.command.argv[4] for c in t.calls if isinstance(c, RunCall) and c.command.argv[2:3] == (wait._WAIT,)]
    assert windows[0] == "3" and windows[-1] == "1"
