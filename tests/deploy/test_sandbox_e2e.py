"""``fleet up/status/logs/down`` end to end on the sandbox fleet (real sshd, real dockerd, the
engine stand-in, the real sglang-router inside the image), through the real CLI in a subprocess.

One 15-host sandbox serves the session (``SANDBOX_HOSTS``; conftest): h1 single node, h6:h7 two-node
PP (H100), h9..h12 four-node PP (RTX-6000D), and the 2P1D PD deployment on h9..h14 with its router
on h15.  Every deployment goes through the same lifecycle: ``up`` -> a real request (PD: through
the router, served by a prefill AND the decode) -> ``status`` all running/healthy -> a second
``up`` changes nothing -> ``--check --diff`` of an override shows the diff and changes nothing ->
(PP2: the override applied restarts the group, whole; single: its host's dockerd restarts and
the unit comes back) -> ``down`` leaves no unit and no unit file but ``prev/``.  The single and
PD runs carry a secret: the engines can read it, and it shows up in no argv, no log and no
world-readable file on any host, only in each engine's 0600 secrets.env -- gone after down.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

import pytest

from launcher.sandbox import dockerd, procs, state
from launcher.sandbox.client import Sandbox

pytestmark = pytest.mark.sandbox
SANDBOX_HOSTS = 15  # the session's sandbox (tests/conftest.py) has the RTX-6000D hosts h9..h15

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "playbooks" / "sandbox"
TOKEN = "hf_sandboxSECRET0123456789"
OVERRIDE = '  engine_args: [--max-running-requests, "16"]\n'


def fleet(sb: Sandbox, *args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``fleet ARGS`` against the sandbox; ``timeout`` bounds a hang, it is not a speed check."""
    cmd = ["fleet", *args[:1], *args[1:], "-i", sb.inventory, "--known-hosts", sb.known_hosts]
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout, cwd=REPO)


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def status(sb: Sandbox, playbook: Path) -> list[dict[str, Any]]:
    proc = fleet(sb, "status", str(playbook), "--json")
    rows: list[dict[str, Any]] = json.loads(proc.stdout)
    return rows


def up_json(sb: Sandbox, playbook: Path, *extra: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = fleet(sb, "up", str(playbook), "--json", *extra, env=env)
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def post(url: str, body: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
    """A request from the control node, as a user would send it (sandbox addresses are routed)."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            answer: dict[str, Any] = json.loads(r.read())
    except urllib.error.HTTPError as err:
        raise AssertionError(f"{url}: HTTP {err.code}: {err.read()[:300]!r}") from None
    return answer


def containers(sb: Sandbox, hosts: tuple[str, ...], deployment: str) -> dict[tuple[str, str], str]:
    """(host, container) -> StartedAt of every container of ``deployment`` on ``hosts``."""
    found = {}
    for h in hosts:
        res = sb.ssh(h, f"ids=$(docker ps -aq --filter label=fleet.deployment={deployment}); "
                        "[ -z \"$ids\" ] || docker inspect -f '{{.Name}} {{.State.StartedAt}}' $ids")  # fmt: skip
        assert res.rc == 0, res.err
        for line in res.out.split("\n"):
            if line.strip():
                name, when = line.split()
                found[(h, name.lstrip("/"))] = when
    return found


def unit_files(sb: Sandbox, hosts: tuple[str, ...], deployment: str) -> dict[str, str]:
    """host:path -> sha256 of every file under /etc/fleet/<deployment> on ``hosts``."""
    out = {}
    for h in hosts:
        res = sb.ssh(h, f"cd /etc/fleet/{deployment} 2>/dev/null && find . -type f -exec sha256sum {{}} + ; true")
        for line in res.out.splitlines():
            digest, path = line.split(maxsplit=1)
            out[f"{h}:{path}"] = digest
    return out


def with_overrides(src: Path, dest: Path, extra: str) -> Path:
    dest.write_text(src.read_text().replace("overrides:\n", "overrides:\n" + extra, 1))
    return dest


def events(sb: Sandbox, host: str, container: str) -> list[dict[str, Any]]:
    res = sb.ssh(host, f"docker logs {container} 2>/dev/null")
    return [json.loads(line) for line in res.out.splitlines() if line.startswith("{")]


def need_netns(sb: Sandbox) -> None:
    if sb.state.mode != "netns":
        pytest.skip("multi-host deployments need a netns sandbox (loopback hosts share one IP and its ports)")


# ---------------------------------------------------------------------------------------------
# the lifecycle, per deployment


@dataclass(frozen=True, slots=True)
class Case:
    playbook: str
    deployment: str
    units: tuple[tuple[str, str], ...]  # (host, unit) in plan order
    serving: tuple[str, str]  # (host, unit) answering requests: rank 0 or the router
    port: int
    apply_override: bool = False  # also apply the override for real (group restarts)
    secret: bool = False  # deploy with HF_TOKEN and check it leaks nowhere
    restart_dockerd: bool = False  # the serving host's dockerd restarts: the unit comes back

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(sorted({h for h, _ in self.units}, key=lambda h: int(h[1:])))


def _ranks(deployment: str, group: str, hosts: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    return tuple((h, f"fleet-{deployment}-{group}-r{i}") for i, h in enumerate(hosts))


PD_UNITS = (
    *_ranks("sb-pd", "decode0", ("h13", "h14")),
    *_ranks("sb-pd", "prefill0", ("h9", "h10")),
    *_ranks("sb-pd", "prefill1", ("h11", "h12")),
    ("h15", "fleet-sb-pd-router-r0"),
)
CASES = {
    "single": Case("single.yaml", "sb-single", _ranks("sb-single", "single0", ("h1",)),
                   ("h1", "fleet-sb-single-single0-r0"), 30000, secret=True, restart_dockerd=True),
    "pp2": Case("pp2.yaml", "sb-pp2", _ranks("sb-pp2", "rank0", ("h6", "h7")),
                ("h6", "fleet-sb-pp2-rank0-r0"), 30000, apply_override=True),
    "pp4": Case("pp4.yaml", "sb-pp4", _ranks("sb-pp4", "rank0", ("h9", "h10", "h11", "h12")),
                ("h9", "fleet-sb-pp4-rank0-r0"), 30000),
    "pd": Case("pd-2p1d.yaml", "sb-pd", PD_UNITS, ("h15", "fleet-sb-pd-router-r0"), 8000, secret=True),
}  # fmt: skip


@pytest.fixture
def deployed(sandbox_fleet: Sandbox, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Case, Path, dict[str, str]]]:
    """The case's playbook (PD: with an HF_TOKEN secret from the env) and the env for ``up``;
    if the test fails before its own ``down``, the deployment is taken down afterwards, so later
    tests find free hosts."""
    need_netns(sandbox_fleet)
    case: Case = CASES[request.param]
    pb = PLAYBOOKS / case.playbook
    env: dict[str, str] = {}
    if case.secret:
        pb = tmp_path / case.playbook
        pb.write_text((PLAYBOOKS / case.playbook).read_text() + "secrets:\n  - name: HF_TOKEN\n    from_env: FLEET_TEST_HF_TOKEN\n")
        env = {"FLEET_TEST_HF_TOKEN": TOKEN}
    yield case, pb, env
    if containers(sandbox_fleet, case.hosts, case.deployment):
        fleet(sandbox_fleet, "down", str(pb), "-q", "--break-lock")


@pytest.mark.parametrize("deployed", list(CASES), indirect=True)
def test_lifecycle(sandbox_fleet: Sandbox, deployed: tuple[Case, Path, dict[str, str]], tmp_path: Path) -> None:
    sb = sandbox_fleet
    case, pb, env = deployed
    names = [u for _, u in case.units]

    t0 = time.monotonic()
    first = up_json(sb, pb, env=env)
    assert [(u["host"], u["unit"], u["action"], u["outcome"]) for u in first["units"]] == [
        (h, u, "start", "healthy") for h, u in case.units
    ], first
    gen = {u["unit"]: u["generation"] for u in first["units"]}
    t_up = time.monotonic() - t0

    ask(sb, case)

    rows = status(sb, pb)
    assert sorted((r["host"], r["unit"]) for r in rows) == sorted(case.units)
    assert {r["unit"]: (r["state"], r["drift"], r["generation"]) for r in rows} == {
        u: ("running", "none", gen[u]) for u in names
    }
    healthy = {r["unit"] for r in rows if r["health"] == "ok"}
    assert case.serving[1] in healthy and all(r["health"] in ("ok", "-") for r in rows), rows
    assert all(r["unit"] in healthy for r in rows if r["rank"] == 0), "every rank 0 and the router answer"

    before = containers(sb, case.hosts, case.deployment)
    assert sorted(before) == sorted(case.units)
    again = up_json(sb, pb, env=env)
    assert {(u["unit"], u["action"], u["outcome"]) for u in again["units"]} == {
        (u, "unchanged", "unchanged") for u in names
    }
    assert containers(sb, case.hosts, case.deployment) == before, "a second up restarts nothing"

    files = unit_files(sb, case.hosts, case.deployment)
    changed = with_overrides(pb, tmp_path / f"{case.deployment}-ov.yaml", OVERRIDE)
    check = up_json(sb, changed, "--check", "--diff", env=env)
    engines = [(h, u) for h, u in case.units if not u.endswith("router-r0")]
    assert {(u["unit"], u["action"], u["outcome"]) for u in check["units"]} == (
        {(u, "restart", "planned") for _, u in engines} | {(u, "unchanged", "unchanged") for h, u in case.units if (h, u) not in engines}
    )  # fmt: skip
    for h, u in engines:
        assert f"+++ {h}:/etc/fleet/{case.deployment}/{u}/run.sh" in check["diff"]
    assert "--max-running-requests 16" in check["diff"]
    assert "router-r0/run.sh" not in check["diff"]
    if case.secret:
        assert TOKEN not in check["diff"]
    assert containers(sb, case.hosts, case.deployment) == before, "--check started/stopped nothing"
    assert unit_files(sb, case.hosts, case.deployment) == files, "--check wrote nothing"
    assert {r["drift"] for r in status(sb, pb)} == {"none"}

    logs = ok(fleet(sb, "logs", str(pb), "--tail", "5")).stdout
    assert {line.split(" | ", 1)[0] for line in logs.splitlines()} == {f"{h}/{u}" for h, u in case.units}

    if case.secret:
        secret_stays_secret(sb, case, logs)

    if case.restart_dockerd:
        host, unit = case.serving
        _restart_dockerd(sb, host)
        deadline = time.monotonic() + 180  # a bound on a failure: dockerd's restart policy at CI's load
        while sb.ssh(host, f"docker inspect -f '{{{{.State.Running}}}}' {unit}").out.strip() != "true":
            assert time.monotonic() < deadline, "container did not come back"
            time.sleep(0.5)
        assert [r["state"] for r in status(sb, pb)] == ["running"] * len(case.units)
        assert {u["outcome"] for u in up_json(sb, pb, env=env)["units"]} == {"unchanged"}
        ask(sb, case)

    if case.apply_override:
        applied = up_json(sb, changed, env=env)
        outcome = {u["unit"]: (u["outcome"], u["generation"]) for u in applied["units"]}
        assert outcome == {u: ("healthy", gen[u] + 1) if (h, u) in engines else ("unchanged", gen[u]) for h, u in case.units}
        after = containers(sb, case.hosts, case.deployment)
        for key in case.units:
            assert (after[key] != before[key]) == (key in engines), f"{key}: only the changed groups restart, whole"
        ask(sb, case)
        pb = changed

    ok(fleet(sb, "down", str(pb), "-q"))
    assert {(r["state"], r["drift"]) for r in status(sb, pb)} == {("missing", "not deployed")}
    assert containers(sb, case.hosts, case.deployment) == {}
    left = [k for k in unit_files(sb, case.hosts, case.deployment) if "/prev/" not in k]
    assert left == [], "down leaves only each unit's prev/"
    if case.secret:
        assert [p for h in sb.hosts for p in _grep(Path(sb.host(h).dir), ("etc-fleet", "var-lib-fleet"))] == [], (
            "down leaves no secret behind, not even in prev/"
        )
    print(f"\n{case.deployment}: first up {t_up:.1f}s, lifecycle {time.monotonic() - t0:.1f}s")


def ask(sb: Sandbox, case: Case) -> None:
    """A real request to the deployment's serving endpoint, checked against the stand-ins."""
    host = sb.host(case.serving[0])
    url = f"http://{host.data_ip}:{case.port}"
    if case.deployment != "sb-pd":
        answer = post(f"{url}/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 4}})
        assert answer["fleet_standin"]["host"] == case.serving[0] and answer["text"]
        with urllib.request.urlopen(f"{url}/server_info", timeout=10) as r:
            info = json.loads(r.read())
        assert [p["host"] for p in info["peers"]] == [h for h, _ in case.units if len(case.units) > 1], info["peers"]
        return
    prefills = {"h9": "fleet-sb-pd-prefill0-r0", "h11": "fleet-sb-pd-prefill1-r0"}
    served = []
    for i in range(4):
        body = {"model": "glm-5.3-flash", "messages": [{"role": "user", "content": f"question {i}"}], "max_tokens": 3}
        answer = post(f"{url}/v1/chat/completions", body)
        origin = answer["fleet_standin"]
        assert answer["choices"][0]["message"]["content"] and answer["usage"]["completion_tokens"] == 3
        assert origin["decode_host"] == "h13" and origin["prefill_host"] in prefills, origin
        served.append((origin["prefill_host"], str(origin["bootstrap_room"])))
    # The stand-ins' own logs: the prefill saw the room and handed its KV to the decode.
    for prefill, room in served:
        ev = events(sb, prefill, prefills[prefill])
        assert any(e["event"] == "request" and str(e.get("bootstrap_room")) == room for e in ev)
        assert any(e["event"] == "kv_transfer" and e["room"] == room and e["ok"] for e in ev)
    decode = events(sb, "h13", "fleet-sb-pd-decode0-r0")
    for prefill, room in served:
        assert any(e["event"] == "request" and str(e.get("bootstrap_room")) == room and e.get("prefill_host") == prefill
                   for e in decode), room  # fmt: skip


def world_readable(path: Path) -> bool:
    """Readable by any user: other-read on the file and other-exec on every directory above."""
    if not os.stat(path).st_mode & stat.S_IROTH:
        return False
    return all(os.stat(d).st_mode & stat.S_IXOTH for d in path.parents)


def secret_stays_secret(sb: Sandbox, case: Case, logs: str) -> None:
    assert TOKEN not in logs
    engine = case.units[0]
    env = sb.ssh(engine[0], f"docker exec {engine[1]} sh -c 'cat /proc/1/environ | tr \"\\0\" \"\\n\"'")
    assert f"HF_TOKEN={TOKEN}" in env.out.splitlines(), "the engine can read it"
    assert TOKEN not in sb.ssh(engine[0], "ps -eo args").out, "no argv on the machine holds it"
    for h, u in case.units:
        assert TOKEN not in sb.ssh(h, f"docker logs {u} 2>&1").out, f"{h}/{u} logged it"
    # Every file of every host that holds it: fleet's dirs, /run, /srv and docker's container state.
    in_fleet_dirs = set()
    for h in sb.hosts:
        d = Path(sb.host(h).dir)
        for hit in _grep(d, ("etc-fleet", "var-lib-fleet", "run", "srv", "docker/containers")):
            assert not world_readable(hit), f"{h}: {hit} is world-readable"
            for sub, seen_as in (("etc-fleet", "/etc/fleet"), ("var-lib-fleet", "/var/lib/fleet")):
                if hit.is_relative_to(d / sub):
                    assert stat.S_IMODE(os.stat(hit).st_mode) == 0o600, hit
                    in_fleet_dirs.add(f"{h}:{seen_as}/{hit.relative_to(d / sub)}")
    engines = {f"{h}:/etc/fleet/{case.deployment}/{u}/secrets.env" for h, u in case.units if not u.endswith("router-r0")}
    assert in_fleet_dirs == engines, "only each engine's secrets.env (0600) holds it"


def _grep(hostdir: Path, subdirs: tuple[str, ...]) -> list[Path]:
    roots = [str(hostdir / sub) for sub in subdirs if (hostdir / sub).exists()]
    grep = subprocess.run(["grep", "-rlF", TOKEN, *roots], capture_output=True, text=True)
    return [Path(p) for p in grep.stdout.split()]


# ---------------------------------------------------------------------------------------------
# refusals


def test_unknown_host_key_stops_up_before_anything_runs(sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    sb = sandbox_fleet
    env = {**os.environ, "HOME": str(tmp_path)}
    # The sandbox's own inventory names its known_hosts (-o UserKnownHostsFile=...): enough alone.
    run = ["fleet", "run", "-i", sb.inventory, "h1", "--", "true"]
    assert subprocess.run(run, capture_output=True, text=True, env=env, timeout=120, cwd=REPO).returncode == 0
    # The same inventory pointing at a known_hosts without h1: refused before anything runs.
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    inv = tmp_path / "inventory.yaml"
    inv.write_text(Path(sb.inventory).read_text().replace(sb.known_hosts, str(empty)))
    pb = tmp_path / "hostkey.yaml"
    pb.write_text((PLAYBOOKS / "single.yaml").read_text().replace("name: sb-single", "name: sb-hostkey"))
    proc = subprocess.run(["fleet", "up", str(pb), "-i", str(inv)], capture_output=True, text=True, env=env,
                          timeout=300, cwd=REPO)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    # Progress notes (the preflight gate's) may precede it; the error is the last line.
    assert proc.stderr.splitlines()[-1].startswith("fleet: error: h1: host key"), proc.stderr
    assert sb.ssh("h1", "test -e /etc/fleet/sb-hostkey || test -e /run/fleet/lock/sb-hostkey").rc == 1


def _restart_dockerd(sb: Sandbox, name: str) -> None:
    """SIGTERM the host's dockerd (containers stop with it), start it again, record the new PID
    in the sandbox state so teardown still finds it."""
    st = state.load(sb.state.name)
    assert st is not None
    host = st.host(name)
    assert host.dockerd is not None
    procs.kill_all((host.dockerd,), 15.0)
    host = replace(host, dockerd=dockerd.start(st.name, host))
    state.save(st.with_host(host))
    dockerd.wait_ready(host, time.monotonic() + 120)  # a bound on a failure (a loaded machine's dockerd start)


def test_a_rank_that_dies_and_is_restarted_is_reported_by_its_own_failure(
    sandbox_fleet: Sandbox, tmp_path: Path
) -> None:
    """Both ranks die 1 s after start; docker restarts a dead container at once (its restart
    policy) and keeps one log across runs.  Whether the gate sees the rank restarting, running
    again or exited, the one-line error quotes the line the dead run ended with, never the new
    run's first lines, and the log block is printed once, under the rank that failed."""
    sb = sandbox_fleet
    need_netns(sb)
    pb = tmp_path / "crash.yaml"
    pb.write_text(
        (PLAYBOOKS / "pp2.yaml").read_text().replace("name: sb-pp2", "name: sb-crash").replace(
            "overrides:\n",
            "overrides:\n  env:\n    FLEET_STANDIN_FAIL: crash-after:1\n    FLEET_STANDIN_START_DELAY: '30'\n", 1,
        )
    )  # fmt: skip
    try:
        proc = fleet(sb, "up", str(pb), "--skip-preflight")
        assert proc.returncode == 1, proc.stderr  # ExitCode.FAILED
        errors = [line for line in proc.stderr.splitlines() if line.startswith("fleet: error: ")]
        assert len(errors) == 1 and "while its group was starting" in errors[0], proc.stderr
        assert "injected failure: crash-after:1" in errors[0].split("while its group was starting")[1], errors[0]
        blocks = [line[4:].split(":")[0] for line in proc.stderr.splitlines() if line.startswith("--- ")]
        assert len(blocks) == 1 and blocks[0].split("/")[1] + " " in errors[0], proc.stderr
        assert containers(sb, ("h6", "h7"), "sb-crash") == {}, "the failed group is torn down"
    finally:
        fleet(sb, "down", str(pb), "-q", "--break-lock")
