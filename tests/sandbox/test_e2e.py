"""The sandbox's acceptance test: 8 hosts, a 2-node PP stand-in by hand-written ``docker run``
over strict-host-key SSH, rendezvous semantics, a wrong GLOO_SOCKET_IFNAME, the real
sglang-router (regular and PD), then a teardown that leaves nothing behind."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from launcher.sandbox import router, state
from launcher.sandbox.client import Sandbox
from tests.sandbox_slots import assert_slot_released

pytestmark = pytest.mark.sandbox

IMAGE = "fleet-standin:latest"


def http(url: str, body: dict[str, Any] | None = None, timeout: float = 30.0) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            try:
                return r.status, json.loads(raw) if raw else None
            except ValueError:
                return r.status, raw.decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")
    except OSError:
        return 0, None


def wait_for(what: str, check: Any, timeout: float = 120.0) -> Any:  # a hang bound, not a speed check
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def events(sb: Sandbox, host: str, container: str) -> list[dict[str, Any]]:
    res = sb.ssh(host, f"docker logs {container}")
    return [json.loads(line) for line in res.out.splitlines() if line.startswith("{")]


def inspect_state(sb: Sandbox, host: str, container: str) -> dict[str, Any]:
    res = sb.ssh(host, f"docker inspect --format '{{{{json .State}}}}' {container}")
    assert res.rc == 0, res.err
    parsed: dict[str, Any] = json.loads(res.out)
    return parsed


def sglang_run(name: str, env: dict[str, str], args: str) -> str:
    envs = " ".join(f"-e {k}={v}" for k, v in env.items())
    return (f"docker run -d --name {name} --network host --ipc host --shm-size 1g {envs} {IMAGE} "
            f"python3 -m sglang.launch_server {args}")  # fmt: skip


@pytest.fixture(scope="module")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from launcher.sandbox import fleet

    if os.geteuid() != 0:
        pytest.skip("the sandbox fleet needs root")
    st = fleet.up("e2e", 8)
    sb = Sandbox(st)
    sb.logs = Path(os.environ.get("FLEET_E2E_LOGS") or tmp_path_factory.mktemp("routers"))  # type: ignore[attr-defined]
    routers: list[subprocess.Popen[bytes]] = []
    try:
        yield sb, routers
    finally:
        for r in routers:
            r.terminate()
            r.wait(10)
        sb.close()
        fleet.down("e2e")


def test_argcheck_is_in_the_image(e2e: Any) -> None:
    sb, _ = e2e
    assert importlib.util.find_spec("launcher.engines.argcheck"), "launcher/engines/argcheck.py missing"
    res = sb.ssh("h1", f"docker run --rm {IMAGE} python3 -c 'import argcheck; print(argcheck.known_versions(\"sglang\"))'")
    assert res.rc == 0 and "0.5.23" in res.out, res.err
    bad = sb.ssh("h1", f"docker run --rm {IMAGE} python3 -m sglang.launch_server --model-path m --bogus-flag")
    assert bad.rc == 2
    assert bad.err.strip().splitlines()[-1] == "launch_server.py: error: unrecognized arguments: --bogus-flag"


def test_two_node_pp_rendezvous_router_and_pd(e2e: Any) -> None:
    sb, routers = e2e
    h1, h3 = sb.host("h1"), sb.host("h3")
    common = f"--model-path /models/m --tp 8 --pp-size 2 --nnodes 2 --dist-init-addr {h1.data_ip}:20000"
    # Rank 0 waits for rank 1 while this test checks it is unhealthy and starts rank 1 over SSH
    # (containers start slowly on a loaded machine): a rendezvous bound far beyond that, not the
    # stand-in's 60 s default.  Neither rank is meant to time out.
    patient = {"FLEET_STANDIN_DIST_TIMEOUT": "600"}
    r0 = sb.ssh("h1", sglang_run("pp-r0", {"GLOO_SOCKET_IFNAME": "veth0", "NCCL_SOCKET_IFNAME": "veth0", **patient},
                                 f"{common} --node-rank 0 --host 0.0.0.0"))
    assert r0.rc == 0, r0.err
    # Rank 0 is up and waiting for its peer: it must not be healthy yet.
    wait_for("rank 0 to join its own rendezvous", lambda: any(
        e["event"] == "rendezvous_join" for e in events(sb, "h1", "pp-r0")))
    assert http(f"http://{h1.data_ip}:30000/health")[0] == 503
    # h3's NIC is ens1f0: rank 1 there joins from that interface.
    r1 = sb.ssh("h3", sglang_run("pp-r1", {"GLOO_SOCKET_IFNAME": "ens1f0", **patient}, f"{common} --node-rank 1"))
    assert r1.rc == 0, r1.err
    wait_for("rank 0 healthy", lambda: http(f"http://{h1.data_ip}:30000/health")[0] == 200)
    done = [e for e in events(sb, "h1", "pp-r0") if e["event"] == "rendezvous_done"]
    assert done and done[0]["peers"] == [f"rank0:h1@{h1.data_ip}", f"rank1:h3@{h3.data_ip}"]

    # A wrong interface name fails the rank at once, as Gloo does on a cluster.
    bad = sb.ssh("h3", sglang_run("bad-if", {"GLOO_SOCKET_IFNAME": "veth0"}, f"{common} --node-rank 1"))
    assert bad.rc == 0
    st = wait_for("bad-if to exit", lambda: (s := inspect_state(sb, "h3", "bad-if"))["Status"] == "exited" and s)
    assert st["ExitCode"] != 0
    assert "GLOO_SOCKET_IFNAME=veth0" in sb.ssh("h3", "docker logs bad-if").err
    # A wrong dist-init address: nobody answers, the rank gives up after its timeout.
    lost = sb.ssh("h2", sglang_run("lost", {"GLOO_SOCKET_IFNAME": "veth0", "FLEET_STANDIN_DIST_TIMEOUT": "2"},
                                   f"{common.replace(h1.data_ip, sb.host('h2').data_ip)} --node-rank 1"))
    assert lost.rc == 0
    st = wait_for("lost to exit", lambda: (s := inspect_state(sb, "h2", "lost"))["Status"] == "exited" and s)
    assert st["ExitCode"] == 1

    # The real sglang-router on h6 in front of rank 0.
    h6 = sb.host("h6")
    log_dir = sb.logs
    routers.append(router.start(h6, ("--host", "0.0.0.0", "--port", "8000", "--worker-urls",
                                     f"http://{h1.data_ip}:30000", "--policy", "round_robin"),
                                log_dir / "router.log"))  # fmt: skip
    wait_for("router healthy", lambda: http(f"http://{h6.address}:8000/health")[0] == 200)
    body = {"model": "/models/m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 5}
    code, resp = wait_for("a routed answer", lambda: (r := http(f"http://{h6.address}:8000/v1/chat/completions", body))[0] == 200 and r)
    assert resp["fleet_standin"]["host"] == "h1"
    assert resp["usage"]["completion_tokens"] == 5

    # PD: prefill on h7, decode on h8, the router in PD mode on h6.
    h7, h8 = sb.host("h7"), sb.host("h8")
    for host, mode in (("h7", "prefill"), ("h8", "decode")):
        res = sb.ssh(host, sglang_run(f"pd-{mode}", {"SGLANG_HOST_IP": sb.host(host).data_ip},
                                      f"--model-path /models/m --host 0.0.0.0 --disaggregation-mode {mode}"))
        assert res.rc == 0, res.err
    for h in (h7, h8):
        wait_for(f"{h.name} healthy", lambda h=h: http(f"http://{h.data_ip}:30000/health")[0] == 200)
    routers.append(router.start(h6, ("--host", "0.0.0.0", "--port", "8001", "--prometheus-port", "29001", "--pd-disaggregation",
                                     "--prefill", f"http://{h7.data_ip}:30000", "8998",
                                     "--decode", f"http://{h8.data_ip}:30000"),
                                log_dir / "router-pd.log"))  # fmt: skip
    wait_for("PD router healthy", lambda: http(f"http://{h6.address}:8001/health")[0] == 200)
    code, resp = wait_for("a PD answer", lambda: (r := http(f"http://{h6.address}:8001/v1/chat/completions", body))[0] == 200 and r)
    origin = resp["fleet_standin"]
    assert (origin["prefill_host"], origin["decode_host"]) == ("h7", "h8")
    room = origin["bootstrap_room"]
    prefill_rooms = {str(e.get("bootstrap_room")) for e in events(sb, "h7", "pd-prefill") if e["event"] == "request"}
    assert str(room) in prefill_rooms
    assert any(e["event"] == "kv_transfer" and e["room"] == str(room) for e in events(sb, "h7", "pd-prefill"))

    # A rank that dies after joining breaks the instance: rank 0 exits non-zero.
    assert sb.ssh("h3", "docker kill pp-r1").rc == 0
    st = wait_for("rank 0 to exit", lambda: (s := inspect_state(sb, "h1", "pp-r0"))["Status"] == "exited" and s)
    assert st["ExitCode"] == 1


def test_teardown_leaves_nothing(e2e: Any) -> None:
    from launcher.sandbox import fleet, netns

    sb, routers = e2e
    for r in routers:
        r.terminate()
        r.wait(10)
    routers.clear()
    st = sb.state
    sb.close()
    # Observed, not acted on: the hosts' namespaces, by inode, while they surely are theirs.
    spaces = {(kind, os.stat(f"/proc/{h.sshd.pid}/ns/{kind}").st_ino) for h in st.hosts if h.sshd
              for kind in ("mnt", "net")}  # fmt: skip
    assert _members(spaces), "the hosts should have processes before down"
    assert fleet.down("e2e")
    assert netns.namespaces("e2e") == ()
    # A process down killed may still be exiting on a loaded machine (one was, at load ~79): wait
    # for the namespaces to empty, bounded (a hang bound, not a speed check).
    deadline = time.monotonic() + 60
    while _members(spaces) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _members(spaces) == []
    assert all(not (h.sshd and h.sshd.alive()) and not (h.dockerd and h.dockerd.alive()) for h in st.hosts)
    with open("/proc/self/mountinfo") as f:
        assert st.dir not in f.read()
    assert_slot_released(st)
    assert not os.path.exists(st.dir) and state.load("e2e") is None
    assert not any(Path("/sys/fs/cgroup/memory/fleet-sandbox").glob("e2e-*"))


def _members(spaces: set[tuple[str, int]]) -> list[int]:
    found = []
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            if any(os.stat(f"/proc/{pid}/ns/{kind}").st_ino == ino for kind, ino in spaces):
                found.append(pid)
        except OSError:
            continue
    return found
