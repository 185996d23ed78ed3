"""Prefill/decode with the REAL vLLM on two sandbox hosts, the KV cache moved over NIXL (UCX's
TCP transport between the hosts' data IPs), behind the real vllm-router in PD mode:
``playbooks/sandbox/real-pd.yaml`` -- catalog entry 32's vLLM PD recipe reshaped to 1P1D TP1 on
the Ethernet-only hosts h16 (prefill) and h17 (decode), router on h6.  One deployment (two cold
starts side by side) is shared by the module's tests, in order:

0. preflight alone (nothing deployed): NIXL from the image reads 32 MiB across h16 -> h17 over
   tcp/veth0; on the RoCE-declared hosts h14/h15 pinned to TCP the same read is a warning;
   the same probe for a Mooncake PD deployment (``playbooks/sandbox/real-pd-mooncake.yaml``,
   catalog entry 42's SGLang PD recipe on h16/h17 from this image): Mooncake's transfer engine
   reads 32 MiB across over its TCP protocol, and with the prefill's handshake port refused to
   the decode host (its bootstrap port let through) the verdict quotes Mooncake's own line;
1. ``fleet up`` is healthy only after its canary crossed the deployment: the report's crossing
   names the hosts and the decode's own transfer counters (>= 1 transfer, 0 failed); each rank
   carries its host's UCX_NET_DEVICES / NIXL side channel from the inventory; a chat through the
   router answers, and the decode's log shows vLLM's own ``KV Transfer metrics`` line;
2. ``fleet status --probe``: the same check on the running deployment; ``fleet bench`` through
   the PD router reports the decode's KV-transfer figures beside TTFT/TPOT; the stand-in's PD
   exchange and transfer counters match the real engines' (its contract);
3. the deployment rolled by cohort (``fleet restart --surge h7:h18:h19 --router FRONT``) under a
   checked chat load through a front router: the new cohort's canary passes before it serves,
   0 failed, 0 truncated, every completion id names a prefill and decode of one cohort;
4. on the cohort that now serves: its prefill killed while a stream it prefilled is decoding,
   then its decode restarted while its router lists it: each named by ``status``/``status
   --probe`` in one line, requests fail rather than hang, ``down`` leaves nothing running;
5. decode cannot reach prefill's side channel (the prefill host refuses it): preflight refuses
   (the reachability check and NIXL's own probe); past it (opt-in, FLEET_REAL_ENGINE_PD_FAULTS=1,
   for CI time), ``fleet up``'s canary fails with one line naming router, prefill and decode
   hosts and the engine's error line, and tears the deployment down;
6. a wrong UCX_NET_DEVICES (the decode host's data NIC misnamed in the inventory): preflight
   refuses (the interface check, and NIXL's probe with UCX's own message); past it (opt-in,
   FLEET_REAL_ENGINE_PD_FAULTS=1), the decode's engine fails at start (NIXL cannot create its UCX
   backend), ``fleet up`` fails with one line naming the decode host and the engine's exception,
   and the prefill that came up healthy is torn down with it: nothing left running.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ContextManager, Iterator

import pytest

from launcher.sandbox.client import Sandbox
from tests.real_engine import contract
from tests.real_engine.harness import (
    PLAYBOOKS, REPO, chat, containers, fleet, fleet_env, misnamed_nic_inventory, ok, require_netns, up_on,
    wait_healthy,
)
from tests.real_engine.load import ChatLoad, truncated
from tests.rolling.conftest import Router

pytestmark = pytest.mark.real_engine
# h16..h19: the RTX-6000D hosts without an RDMA fabric (launcher/sandbox/fakehw.py): h16/h17 serve
# the first cohort, h18/h19 the one the cohort roll brings up (its router on h7).
SANDBOX_HOSTS = 19
SANDBOX_REAL_ENGINE = True

PLAYBOOK = PLAYBOOKS / "real-pd.yaml"
MOONCAKE_PLAYBOOK = PLAYBOOKS / "real-pd-mooncake.yaml"  # preflight only: the image has no SGLang
BOOTSTRAP_PORT = 8998  # the Mooncake recipe's (SGLang's default): the Mooncake probe's side channel
DEPLOYMENT = "sb-real-pd"
PREFILL, DECODE, ROUTER = "h16", "h17", "h6"
HOSTS = (ROUTER, PREFILL, DECODE)
SURGE = {ROUTER: "h7", PREFILL: "h18", DECODE: "h19"}  # the second cohort, host for host
PREFILL_UNIT, DECODE_UNIT = f"fleet-{DEPLOYMENT}-prefill0-r0", f"fleet-{DEPLOYMENT}-decode0-r0"
UNITS = {PREFILL: PREFILL_UNIT, DECODE: DECODE_UNIT, SURGE[PREFILL]: PREFILL_UNIT, SURGE[DECODE]: DECODE_UNIT}
ROLL_TIMEOUT_S = 1500  # two cold starts while the first cohort serves the load, then the drain
LOAD_REQUESTS = 30  # the least the load must have sent before it stops (both cohorts serve some)
STREAM_TOKENS = 120  # the load's streams and the fault tests' (~1 token/s per stream at a load average of 50)
ROLLED: dict[str, bool] = {}  # set by the roll test: the later tests run on the second cohort
MODEL = "deepseek-v4-flash"
SIDE_CHANNEL_PORT = 5600
# The engine-level failure cases (past preflight) cost two more cold starts each: opt-in for CI time.
FAULTS = bool(os.environ.get("FLEET_REAL_ENGINE_PD_FAULTS"))
PROBE_TIMEOUT_S = 600  # the canary waits up to 300 s for its answer on a loaded machine


def container_env(sb: Sandbox, host: str) -> dict[str, str]:
    res = sb.ssh(host, f"docker inspect -f '{{{{json .Config.Env}}}}' {UNITS[host]}")
    assert res.rc == 0, res.err
    return dict(kv.split("=", 1) for kv in json.loads(res.out))


def probe(sb: Sandbox) -> tuple[int, dict[str, Any], str]:
    proc = fleet(sb, "status", str(PLAYBOOK), "--probe", "--json", timeout=PROBE_TIMEOUT_S)
    doc: dict[str, Any] = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    return proc.returncode, doc, proc.stderr


@pytest.fixture(scope="module")
def pd(sandbox_fleet: Sandbox) -> Iterator[dict[str, Any]]:
    sb = sandbox_fleet
    require_netns(sb, "prefill/decode across hosts")
    t0 = time.monotonic()
    proc = fleet(sb, "up", str(PLAYBOOK), "--json")
    doc: dict[str, Any] = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    doc["seconds"], doc["rc"], doc["stderr"] = time.monotonic() - t0, proc.returncode, proc.stderr
    yield doc
    fleet(sb, "down", str(PLAYBOOK), "-q", "--break-lock")


def kv_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ": kv-transport: " in ln]


def test_preflight_reads_the_kv_across(sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    """Before anything starts, preflight runs NIXL from the deployment's own image with each
    rank's rendered UCX env: 32 MiB registered on h16 behind its side channel, read across from
    h17 over the transport UCX picked (TCP on veth0, what UCX_NET_DEVICES names there).  The
    same deployment placed on the RoCE-declared hosts h14/h15 with UCX pinned to TCP (a playbook
    env override) reads just as well, and is a warning: those hosts' fabric is RDMA."""
    sb = sandbox_fleet
    require_netns(sb, "prefill/decode across hosts")
    proc = fleet(sb, "preflight", str(PLAYBOOK), "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr
    kv = [c for c in json.loads(proc.stdout)["checks"] if c["check"] == "kv-transport"]
    print(f"preflight's KV transport: {kv}")
    assert [(c["status"], c["host"]) for c in kv] == [("pass", DECODE)], kv
    assert re.fullmatch(rf"NIXL from prefill {PREFILL} \({sb.host(PREFILL).data_ip}\) to decode {DECODE}: read 32 MiB "
                        rf"over tcp/veth0 \(software emulation\) in [\d.]+s \([\d.]+ MiB/s\)", kv[0]["message"]), kv
    roce = tmp_path / "real-pd-roce.yaml"
    text = PLAYBOOK.read_text().replace("hosts: h16", "hosts: h14").replace("hosts: h17", "hosts: h15")
    roce.write_text(text.replace("    VLLM_CPU_OMP_THREADS_BIND: nobind\n", "    VLLM_CPU_OMP_THREADS_BIND: nobind\n"
                                 "    UCX_NET_DEVICES: veth0\n    UCX_TLS: tcp\n"))  # fmt: skip
    proc = fleet(sb, "preflight", str(roce), "--json", timeout=600)
    kv = [c for c in json.loads(proc.stdout)["checks"] if c["check"] == "kv-transport"]
    print(f"preflight's KV transport on RoCE hosts pinned to TCP: {kv}")
    assert [(c["status"], c["host"]) for c in kv] == [("warn", "h15")], kv
    assert "read 32 MiB over tcp/veth0 (software emulation)" in kv[0]["message"], kv
    assert kv[0]["message"].endswith("but the fabric of h14, h15 is RDMA: the KV would move over TCP"), kv
    assert containers(sb, ("h14", "h15", PREFILL, DECODE), "sb-real-pd") == []
    for h in ("h14", "h15", PREFILL, DECODE):  # the probe's containers are gone too
        assert sb.ssh(h, "docker ps -aq --filter name=fleet-preflight-").out.strip() == "", h


def mooncake_kv_checks(sb: Sandbox) -> list[dict[str, Any]]:
    """``fleet preflight`` of the Mooncake PD playbook: its kv-transport checks.  Its exit status
    is not asserted: the image carries Mooncake but not SGLang, so the image-programs check fails
    the deployment whatever the probe says."""
    proc = fleet(sb, "preflight", str(MOONCAKE_PLAYBOOK), "--json", timeout=600)
    assert proc.stdout.strip().startswith("{"), f"rc={proc.returncode}\n{proc.stderr}"
    checks = json.loads(proc.stdout)["checks"]
    kv = [c for c in checks if c["check"] == "kv-transport"]
    others = sorted({f"{c['check']} on {c['host']}" for c in checks if c["status"] == "fail" and c not in kv})
    print(f"preflight's KV transport (Mooncake): rc={proc.returncode} {kv}; other failures: {others}")
    return kv


def test_preflight_reads_the_kv_across_with_mooncake(sandbox_fleet: Sandbox) -> None:
    """A Mooncake PD deployment (catalog entry 42's SGLang recipe, 1P1D TP1 on h16/h17, from the
    real-engine image): preflight runs Mooncake's TransferEngine from that image with each rank's
    rendered MOONCAKE_* env -- 32 MiB registered on h16 at its data IP in P2P-handshake mode,
    behind the bootstrap port, read across from h17's data IP with ``transfer_sync_read`` over
    Mooncake's TCP protocol.  Only the kv-transport verdict is asserted (other rules fail this
    deployment: no SGLang in the image)."""
    sb = sandbox_fleet
    require_netns(sb, "prefill/decode across hosts")
    kv = mooncake_kv_checks(sb)
    assert [(c["status"], c["host"]) for c in kv] == [("pass", DECODE)], kv
    assert re.fullmatch(rf"Mooncake's transfer engine from prefill {PREFILL} \({sb.host(PREFILL).data_ip}\) to decode "
                        rf"{DECODE}: read 32 MiB over tcp in [\d.]+s \([\d.]+ MiB/s\)", kv[0]["message"]), kv  # fmt: skip
    for h in (PREFILL, DECODE):  # the probe's containers are gone
        assert sb.ssh(h, "docker ps -aq --filter name=fleet-preflight-").out.strip() == "", h


@contextmanager
def prefill_rejects(sb: Sandbox, match: str) -> Iterator[None]:
    """The prefill host resets the TCP connections ``match`` (iptables INPUT) while the block runs."""
    rule = f"INPUT {match} -j REJECT --reject-with tcp-reset"
    assert sb.ssh(PREFILL, f"iptables -I {rule}").rc == 0
    try:
        yield
    finally:
        sb.ssh(PREFILL, f"iptables -D {rule}")


def mooncake_handshake_refused(sb: Sandbox) -> ContextManager[None]:
    """The prefill host refuses every TCP port but the bootstrap port to the decode host's data IP:
    the probe's offer comes through, Mooncake's P2P handshake does not."""
    return prefill_rejects(sb, f"-s {sb.host(DECODE).data_ip} -p tcp ! --dport {BOOTSTRAP_PORT}")


def test_mooncake_handshake_refused_by_preflight(sandbox_fleet: Sandbox) -> None:
    """The prefill's Mooncake handshake port unreachable from the decode host: one fail line on
    the decode naming both hosts and Mooncake's own words for the refused handshake."""
    sb = sandbox_fleet
    require_netns(sb, "prefill/decode across hosts")
    ip = re.escape(sb.host(PREFILL).data_ip)
    with mooncake_handshake_refused(sb):
        kv = mooncake_kv_checks(sb)
    assert [(c["status"], c["host"]) for c in kv] == [("fail", DECODE)], kv
    assert re.fullmatch(rf"Mooncake's transfer engine from prefill {PREFILL} \({ip}\) to decode {DECODE}: reading "
                        rf"33554432 bytes with Mooncake from {ip}:(\d+): RuntimeError: transfer_sync_read of 33554432 "
                        rf"bytes from {ip}:\1 failed \(SocketHandShakePlugin: connect\(\){ip}:\1: Connection refused "
                        rf"\[111\]\)", kv[0]["message"]), kv  # fmt: skip
    for h in (PREFILL, DECODE):
        assert sb.ssh(h, "docker ps -aq --filter name=fleet-preflight-").out.strip() == "", h


def test_up_proves_a_kv_transfer(sandbox_fleet: Sandbox, pd: dict[str, Any]) -> None:
    sb = sandbox_fleet
    print(f"real PD up: {pd['seconds']:.1f}s; crossing: {pd.get('crossing')}")
    assert pd["rc"] == 0, pd
    assert {(u["host"], u["outcome"]) for u in pd["units"]} == {(h, "healthy") for h in HOSTS}, pd
    c = pd["crossing"]
    assert (c["ok"], c["router"], c["prefill"], c["decode"], c["error"]) == (True, ROUTER, [PREFILL], [DECODE], ""), c
    moved = c["transfers"][DECODE]
    assert moved["done"] >= 1 and moved["failed"] == 0 and moved["bytes"] > 0, c
    for host in (PREFILL, DECODE):
        env, spec = container_env(sb, host), sb.host(host)
        assert (env["UCX_NET_DEVICES"], env["UCX_TLS"]) == (spec.ifname, "tcp"), env
        assert (env["VLLM_NIXL_SIDE_CHANNEL_HOST"], env["VLLM_NIXL_SIDE_CHANNEL_PORT"]) == (spec.data_ip, "5600"), env
    router = f"http://{sb.host(ROUTER).data_ip}:8300"
    answer = chat(router, MODEL, "prefill here decode there", max_tokens=6, timeout=300)
    assert answer["usage"]["completion_tokens"] == 6, answer
    # vLLM's decode logs its NixlConnector's figures every stats interval (~10 s).
    deadline, logs = time.monotonic() + 120, ""
    while time.monotonic() < deadline:
        logs = sb.ssh(DECODE, f"docker logs {UNITS[DECODE]} 2>&1 | grep 'KV Transfer metrics' | tail -1").out
        if "Num successful transfers=" in logs:
            break
        time.sleep(5)
    print(f"decode's own line: {logs.strip()}")
    assert "Num successful transfers=" in logs and "Num failed transfers=0" in logs, logs


def test_status_probe(sandbox_fleet: Sandbox, pd: dict[str, Any]) -> None:
    rc, doc, err = probe(sandbox_fleet)
    assert rc == 0, (doc, err)
    c = doc["crossing"]
    assert c["ok"] and c["transfers"][DECODE]["done"] >= 1 and c["transfers"][DECODE]["failed"] == 0, c
    assert {(u["host"], u["state"], u["health"]) for u in doc["units"]} == {(h, "running", "ok") for h in HOSTS}, doc


def test_bench_reports_the_decodes_kv_transfers(sandbox_fleet: Sandbox, pd: dict[str, Any], tmp_path: Path) -> None:
    """``fleet bench`` through the PD router (small: the recipe's 8k+1k scaled x0.01, 2 requests
    at concurrency 1, repeated twice): every request completed, and the level carries the
    decode's own transfer figures -- one KV transfer per request of its first repeat, none
    failed.  The report of this real-engine run shows what issue 29 asks of one: the seed (the
    run's and the level's), attainment, the spread over the repeats, per-8-GPU numbers and the
    engine version read from the server (the image's vLLM 0.32, not the recipe's 0.30.0)."""
    from launcher.bench.client import aiperf_path

    if not os.path.isfile(aiperf_path()):
        pytest.skip(f"aiperf not installed at {aiperf_path()} (scripts/install.sh)")
    sb = sandbox_fleet
    proc = subprocess.run(
        ["fleet", "bench", str(PLAYBOOK), "-i", sb.inventory, "--known-hosts", sb.known_hosts, "--shape", "8k+1k",
         "--scale", "0.01", "--concurrency", "1", "--requests", "2", "--repeat", "2", "--slo", "ttft=20000,tpot=5000",
         "--tokenizer", "fleet-words", "--json"],
        capture_output=True, text=True, timeout=900, cwd=REPO, env=fleet_env(FLEET_BENCH_DIR=str(tmp_path)),
    )  # fmt: skip
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    doc = json.loads(proc.stdout)
    level = doc["levels"][0]
    print(f"bench through the PD router: {level}")
    assert (level["completed"], level["failed"], level["repeats"]) == (4, 0, 2), level  # counts summed over repeats
    kv = level["kv_transfers"]
    assert kv["done"] >= 2 and kv["failed"] == 0 and kv["mib"] > 0, kv
    assert isinstance(doc["seed"], int) and isinstance(level["seed"], int), (doc["seed"], level["seed"])
    assert level["attainment"] is not None and 0.0 <= level["attainment"] <= 1.0, level
    assert set(level["spread"]) >= {"output_throughput_tok_s", "ttft_ms_p50", "tpot_ms_p50"}, level["spread"]
    assert all(lo <= hi for lo, hi in level["spread"].values()), level["spread"]
    assert level["output_tok_s_per_8gpu"] is not None and level["output_tok_s_per_8gpu"] > 0, level
    assert str(doc["engine_version"]).startswith("0.32"), doc["engine_version"]


def _standin(role: str, port: int, side_channel: int) -> subprocess.Popen[bytes]:
    kv = json.dumps({"kv_connector": "NixlConnector", "kv_role": role})
    env = {**os.environ, "FLEET_STANDIN_TOKEN_MS": "5", "PYTHONPATH": str(REPO),
           "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1", "VLLM_NIXL_SIDE_CHANNEL_PORT": str(side_channel)}  # fmt: skip
    return subprocess.Popen([sys.executable, "-m", "launcher.sandbox.standin.server", "vllm", "serve", "/models/tiny",
                             "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", str(port),
                             "--kv-transfer-config", kv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def test_standin_honours_the_real_pd_contract(sandbox_fleet: Sandbox, pd: dict[str, Any]) -> None:
    """The exchange a PD router runs (prefill with do_remote_decode, its kv_transfer_params to
    the decode) and the decode's transfer counters fleet's canary reads: the real engines on
    h16/h17, then two stand-ins on loopback, must look the same (tests/real_engine/contract.py)."""
    sb = sandbox_fleet
    real = contract.pd_probe(f"http://{sb.host(PREFILL).data_ip}:8500", f"http://{sb.host(DECODE).data_ip}:8500", MODEL)
    print(f"real PD exchange: {real}")
    assert real == contract.PD_EXPECTED, real
    base = 18000 + os.getpid() % 1000
    procs = [_standin("kv_producer", base, base + 2), _standin("kv_consumer", base + 1, base + 3)]
    try:
        for port in (base, base + 1):
            wait_healthy(f"http://127.0.0.1:{port}")
        standin = contract.pd_probe(f"http://127.0.0.1:{base}", f"http://127.0.0.1:{base + 1}", MODEL)
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
    assert standin == real


# ---------------------------------------------------------------------------------------------
# Rolling the deployment by cohort under load, then the engine faults on the cohort that serves


def surge_playbook(tmp: Path) -> Path:
    """real-pd.yaml placed on the second cohort's hosts: what the operator sets after the roll
    (the roll's own note says so), and what ``status``/``down`` of the rolled deployment read."""
    text = PLAYBOOK.read_text()
    for old, new in SURGE.items():
        text = re.sub(rf"(?m)^(    hosts: ){old}$", rf"\g<1>{new}", text)
    path = tmp / "real-pd-surge.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def rolled(sandbox_fleet: Sandbox, pd: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The surge playbook; at the module's end the second cohort is taken down (the module's
    own fixture downs the first)."""
    path = surge_playbook(tmp_path_factory.mktemp("surge"))
    yield path
    fleet(sandbox_fleet, "down", str(path), "-q", "--break-lock")


@pytest.fixture(scope="module")
def front(sandbox_fleet: Sandbox, pd: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Router]:
    """A front router in regular mode on this machine's loopback (the real sglang-router of the
    sandbox's router venv), whose one worker is the first cohort's PD router: what clients send
    to while the deployment rolls by cohort (launcher/rolling/cohort.py)."""
    if pd["rc"] != 0:
        pytest.skip(f"the deployment did not come up: {' | '.join(pd['stderr'].strip().splitlines()[-3:])}")
    r = Router(("--worker-urls", f"http://{sandbox_fleet.host(ROUTER).data_ip}:8300"),
               tmp_path_factory.mktemp("front") / "router-front.log")  # fmt: skip
    try:
        r.wait_workers(1)
        yield r
    finally:
        r.stop()


def cohort_of(ip: dict[str, str], completion_id: str) -> tuple[str, str]:
    """The (prefill, decode) hosts vllm-router names in a completion id
    (``chatcmpl-___prefill_addr_IP:PORT___decode_addr_IP:PORT_...``)."""
    m = re.search(r"prefill_addr_([\d.]+):\d+___decode_addr_([\d.]+):\d+", completion_id)
    assert m, completion_id
    host = {v: k for k, v in ip.items()}
    return host.get(m.group(1), m.group(1)), host.get(m.group(2), m.group(2))


def test_cohort_roll_under_load_never_pairs_generations(sandbox_fleet: Sandbox, pd: dict[str, Any], front: Router,
                                                         rolled: Path) -> None:  # fmt: skip
    """``fleet restart --surge h7:h18:h19 --router FRONT`` under a chat load through the front
    router (streams and short answers, each checked whole): the new cohort comes up on h7/h18/h19,
    proves its KV crosses (its canary) before the front sends it anything, takes the traffic, and
    the first cohort drains and retires.  0 failed, 0 truncated; every answer's completion id
    names a prefill and a decode of the same cohort, and both cohorts served."""
    sb = sandbox_fleet
    ip = {h: sb.host(h).data_ip for h in (*HOSTS, *SURGE.values())}
    load = ChatLoad(front.url, model=MODEL, workers=3, stream_every=3, stream_tokens=STREAM_TOKENS,
                    max_seconds=ROLL_TIMEOUT_S + 300).start()  # fmt: skip
    t0 = time.monotonic()
    try:
        roll = fleet(sb, "restart", str(PLAYBOOK), "--surge", ":".join(SURGE.values()), "--router", front.url, "--json",
                     timeout=ROLL_TIMEOUT_S)  # fmt: skip
    finally:
        results = load.stop(at_least=LOAD_REQUESTS, timeout=600)
    seconds = time.monotonic() - t0
    failed = [r for r in results if not r.ok]
    pairs = Counter(cohort_of(ip, r.origin["id"]) for r in results if r.ok)
    print(f"PD cohort roll: {seconds:.1f}s rc={roll.returncode}; {len(results)} requests "
          f"({sum(r.kind == 'stream' for r in results)} streams), {sum(truncated(r) for r in results)} truncated, "
          f"{len(failed)} failed {Counter(r.error[:80] for r in failed).most_common(3)}; served by {dict(pairs)}")
    assert roll.returncode == 0, f"{roll.stdout[-4000:]}\n{roll.stderr}"  # --json: the errors are on stdout
    report = json.loads(roll.stdout)
    ROLLED["done"] = True
    assert {(g["group"], g["outcome"], tuple(g["hosts"])) for g in report["groups"]} == {
        *((f"{DEPLOYMENT}/{g}", "retired", (h,)) for g, h in (("prefill0", PREFILL), ("decode0", DECODE), ("router", ROUTER))),
        *((f"{DEPLOYMENT}/{g}", "restarted", (SURGE[h],)) for g, h in (("prefill0", PREFILL), ("decode0", DECODE),
                                                                     ("router", ROUTER))),
    }, report["groups"]  # fmt: skip
    c = report["crossing"]  # the new cohort's canary, before the front sent it anything
    assert (c["ok"], c["router"], c["prefill"], c["decode"]) == (True, SURGE[ROUTER], [SURGE[PREFILL]], [SURGE[DECODE]]), c
    assert c["transfers"][SURGE[DECODE]]["done"] >= 1 and c["transfers"][SURGE[DECODE]]["failed"] == 0, c
    assert [w["url"] for w in front.workers()] == [f"http://{ip[SURGE[ROUTER]]}:8300"]
    # The old cohort drained on the router's own stage gauges too (the requests between a
    # prefill and its decode, which no engine counts), all at 0 in one round.
    drains = [n for n in report["notes"] if n.startswith("old cohort drained together")]
    print(*drains)
    assert len(drains) == 1 and re.search(rf"fleet-{DEPLOYMENT}-router-r0 drained \d+->0", drains[0]), report["notes"]
    assert containers(sb, HOSTS, DEPLOYMENT) == [], "the first cohort is retired"
    # The load: nothing failed or cut; each answer crossed one cohort; both cohorts served.
    assert len(results) >= LOAD_REQUESTS and failed == [], failed[:5]
    assert set(pairs) == {(PREFILL, DECODE), (SURGE[PREFILL], SURGE[DECODE])}, pairs


def rolled_status(sb: Sandbox, playbook: Path, *extra: str) -> tuple[int, Any, str]:
    proc = fleet(sb, "status", str(playbook), "--json", *extra, timeout=PROBE_TIMEOUT_S)
    doc: Any = json.loads(proc.stdout) if proc.stdout.strip()[:1] in ("{", "[") else None
    return proc.returncode, doc, proc.stderr


def stream_until_first_token(base: str, max_tokens: int) -> tuple[threading.Event, dict[str, Any], threading.Thread]:
    """A chat stream through ``base`` in a thread; the event is set once its first token came
    (the decode has the KV then: it pulled it before its first step)."""
    first, out = threading.Event(), dict[str, Any]()

    def run() -> None:
        import http.client

        host, port = base.removeprefix("http://").rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=600)
        body = {"model": MODEL, "messages": [{"role": "user", "content": "a long answer please"}],
                "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}  # fmt: skip
        tokens, done, finish, usage = 0, False, None, None
        try:
            conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            out["status"] = resp.status
            for raw in resp:
                line = raw.decode(errors="replace").strip()
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: "):
                    chunk = json.loads(line[6:])
                    choices = chunk.get("choices") or [{}]
                    finish = choices[0].get("finish_reason") or finish
                    usage = (chunk.get("usage") or {}).get("completion_tokens", usage)
                    if choices[0].get("delta", {}).get("content"):
                        tokens += 1
                        first.set()
        except (OSError, ValueError, http.client.HTTPException) as err:
            out["error"] = repr(err)
        finally:
            out.update(chunks=tokens, done=done, finish=finish, usage=usage)
            first.set()
            conn.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return first, out, t


def post_status(base: str) -> int:
    """One short chat through ``base``: its HTTP status (0: no answer)."""
    try:
        chat(base, MODEL, "are you there", max_tokens=2, timeout=300)
        return 200
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return 0


def test_prefill_killed_mid_request(sandbox_fleet: Sandbox, rolled: Path) -> None:
    """The serving cohort's prefill engine killed (SIGKILL) while a stream it prefilled is
    decoding: that stream finishes whole (the decode pulled the KV before its first token), a new
    request through the PD router fails at once with an error status instead of hanging, and
    ``status`` (the prefill restarted by its runtime, failing) / ``status --probe`` (one line
    naming the router, prefill and decode hosts and the router's own error) exit non-zero."""
    if not ROLLED:
        pytest.skip("the cohort roll did not pass: no second cohort to break")
    sb = sandbox_fleet
    prefill, decode, router = SURGE[PREFILL], SURGE[DECODE], f"http://{sb.host(SURGE[ROUTER]).data_ip}:8300"
    first, out, thread = stream_until_first_token(router, STREAM_TOKENS)
    assert first.wait(300) and out.get("status") == 200, out
    t0 = time.monotonic()
    # The engine's main process dies as in a crash (docker restarts it: unless-stopped); a
    # `docker kill` would count as a manual stop, which docker does not restart.
    assert sb.ssh(prefill, f"kill -9 $(docker inspect -f '{{{{.State.Pid}}}}' {PREFILL_UNIT})").rc == 0
    thread.join(600)
    print(f"stream in flight when its prefill was killed: {out} ({time.monotonic() - t0:.1f}s after the kill)")
    assert not thread.is_alive(), "the stream ended"
    # The decode had pulled the KV before its first token: the stream it was decoding finishes whole.
    assert (out["usage"], out["finish"], out["done"], out.get("error")) == (STREAM_TOKENS, "length", True, None), out
    after = post_status(router)
    print(f"a request while the prefill restarts: HTTP {after}")
    assert after != 200
    rc, doc, err = rolled_status(sb, rolled)
    rows = {(r["host"], r["unit"]): r for r in doc}
    print(f"status after the kill: rc={rc} {rows[(prefill, PREFILL_UNIT)]}")
    assert rc != 0 and rows[(prefill, PREFILL_UNIT)]["health"] != "ok", doc
    assert [(h, r["health"]) for (h, _), r in rows.items() if r["health"] != "ok"] in (
        [(prefill, "failing")], [(prefill, "-")]), doc  # the prefill alone: restarting, or not running yet
    rc, doc, err = rolled_status(sb, rolled, "--probe")
    print(f"status --probe after the kill: rc={rc} {err.strip().splitlines()[-1:]}")
    assert rc != 0 and doc is not None and not doc["crossing"]["ok"], doc
    assert doc["crossing"]["error"].startswith(f"PD canary through the router on {SURGE[ROUTER]} (prefill {prefill} -> "
                                               f"decode {decode}): no KV transfer: "), doc["crossing"]  # fmt: skip


def test_decode_restarted_while_the_router_lists_it(sandbox_fleet: Sandbox, rolled: Path) -> None:
    """The serving cohort's decode restarted (``docker restart``) while its PD router still
    lists it (and the prefill killed above is still starting again): a request through the router
    fails at once with an error status instead of hanging, ``status --probe`` names the decode
    host in one line, and ``down`` leaves nothing running.  Neither fault waits for a cold start."""
    if not ROLLED:
        pytest.skip("the cohort roll did not pass: no second cohort to break")
    sb = sandbox_fleet
    prefill, decode, router = SURGE[PREFILL], SURGE[DECODE], f"http://{sb.host(SURGE[ROUTER]).data_ip}:8300"
    assert sb.ssh(decode, f"docker restart -t 0 {DECODE_UNIT}", timeout=120).rc == 0
    after = post_status(router)
    print(f"a request while the decode restarts: HTTP {after}")
    assert after != 200
    rc, doc, err = rolled_status(sb, rolled, "--probe")
    print(f"status --probe while the decode restarts: rc={rc} {doc['crossing'] if doc else err}")
    assert rc != 0 and doc is not None and not doc["crossing"]["ok"], doc
    # Read before the canary is sent: the decode's own counters are gone with it.
    assert doc["crossing"]["error"] == (f"PD canary through the router on {SURGE[ROUTER]} (prefill {prefill} -> decode "
                                        f"{decode}): no KV transfer: decode {decode} serves no KV-transfer counters at "
                                        f"/metrics"), doc["crossing"]  # fmt: skip
    ok(fleet(sb, "down", str(rolled), "-q", "--break-lock"))
    assert containers(sb, tuple(SURGE.values()), DEPLOYMENT) == [], "nothing of the deployment left running"


def errors(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [ln.removeprefix("fleet: error: ") for ln in proc.stderr.splitlines() if ln.startswith("fleet: error: ")]


def side_channel_refused(sb: Sandbox) -> ContextManager[None]:
    """The prefill host refuses its NIXL side channel (tcp/5600)."""
    return prefill_rejects(sb, f"-p tcp --dport {SIDE_CHANNEL_PORT}")


def test_side_channel_unreachable_refused_by_preflight(sandbox_fleet: Sandbox, pd: dict[str, Any]) -> None:
    """Preflight's reachability check names the side channel, its hosts and the refusal before
    anything starts."""
    sb = sandbox_fleet
    ok(fleet(sb, "down", str(PLAYBOOK), "-q", "--break-lock"))
    with side_channel_refused(sb):
        refused = up_on(sb, PLAYBOOK, sb.inventory)
    assert refused.returncode != 0 and containers(sb, HOSTS, DEPLOYMENT) == [], refused.stderr
    assert any(f"cannot reach nixl-side-channel {sb.host(PREFILL).data_ip}:{SIDE_CHANNEL_PORT} on {PREFILL}" in ln
               for ln in refused.stderr.splitlines()), refused.stderr  # fmt: skip
    # NIXL's own probe, from the decode's image: the same refusal, naming both hosts.
    assert [ln.split(": kv-transport: ", 1)[1].split(" (fix: ")[0] for ln in kv_lines(refused)] == [
        f"NIXL from prefill {PREFILL} ({sb.host(PREFILL).data_ip}) to decode {DECODE}: side channel "
        f"{sb.host(PREFILL).data_ip}:{SIDE_CHANNEL_PORT} (from {sb.host(DECODE).data_ip}): connection refused"
    ], refused.stderr


@pytest.mark.skipif(not FAULTS, reason="the engine-level failure cases are opt-in for CI time "
                    "(FLEET_REAL_ENGINE_PD_FAULTS=1, ~6 min each: two more cold starts); preflight's refusal runs")
def test_side_channel_unreachable_past_preflight(sandbox_fleet: Sandbox, pd: dict[str, Any]) -> None:
    """With --skip-preflight every rank comes up healthy (/health does not touch the side
    channel), the canary's KV transfer fails on the decode's handshake, and ``up`` names the
    hosts and the engine's error line, tears everything down and exits non-zero."""
    sb = sandbox_fleet
    ok(fleet(sb, "down", str(PLAYBOOK), "-q", "--break-lock"))
    t0 = time.monotonic()
    with side_channel_refused(sb):
        failed = up_on(sb, PLAYBOOK, sb.inventory, "--skip-preflight")
    print(f"up with the side channel refused: {time.monotonic() - t0:.1f}s rc={failed.returncode} {errors(failed)}")
    assert failed.returncode != 0, failed.stdout
    assert errors(failed)[-1].startswith(f"PD canary through the router on {ROUTER} (prefill {PREFILL} -> decode "
                                         f"{DECODE}): no KV transfer: "), failed.stderr  # fmt: skip
    assert f"; {DECODE}: " in errors(failed)[-1] and "handshake" in errors(failed)[-1], "the decode engine's own line"
    assert containers(sb, HOSTS, DEPLOYMENT) == [], "the deployment that never crossed is torn down"


def test_wrong_ucx_net_devices_refused_by_preflight(sandbox_fleet: Sandbox, pd: dict[str, Any], tmp_path: Path) -> None:
    """The decode host's data NIC misnamed in the inventory (its UCX_NET_DEVICES with it):
    preflight refuses it, nothing starts."""
    sb = sandbox_fleet
    ok(fleet(sb, "down", str(PLAYBOOK), "-q", "--break-lock"))
    refused = up_on(sb, PLAYBOOK, misnamed_nic_inventory(sb, DECODE, tmp_path))
    assert refused.returncode != 0 and containers(sb, HOSTS, DEPLOYMENT) == [], refused.stderr
    assert f"{DECODE}: interface: interface ens9 not found (host has veth0)" in refused.stderr, refused.stderr
    # NIXL's own probe with the rendered UCX_NET_DEVICES=ens9: UCX's own words, both hosts named.
    kv = kv_lines(refused)
    assert len(kv) == 1 and f"NIXL from prefill {PREFILL} ({sb.host(PREFILL).data_ip}) to decode {DECODE}: creating " \
        f"NIXL's UCX backend on {sb.host(DECODE).data_ip}: nixlBackendError: NIXL_ERR_BACKEND (UCX: network device " \
        "'ens9' is not available" in kv[0], refused.stderr


@pytest.mark.skipif(not FAULTS, reason="the engine-level failure cases are opt-in for CI time "
                    "(FLEET_REAL_ENGINE_PD_FAULTS=1, ~6 min each: two more cold starts); preflight's refusal runs")
def test_wrong_ucx_net_devices_past_preflight(sandbox_fleet: Sandbox, pd: dict[str, Any], tmp_path: Path) -> None:
    """Past preflight, the decode's engine fails at start (NIXL cannot create its UCX backend):
    ``fleet up`` fails with one line naming the decode host and the engine's exception, and the
    prefill that came up healthy is torn down with it: nothing left running."""
    sb = sandbox_fleet
    ok(fleet(sb, "down", str(PLAYBOOK), "-q", "--break-lock"))
    t0 = time.monotonic()
    failed = up_on(sb, PLAYBOOK, misnamed_nic_inventory(sb, DECODE, tmp_path), "--skip-preflight")
    print(f"up with UCX_NET_DEVICES=ens9 on {DECODE}: {time.monotonic() - t0:.1f}s rc={failed.returncode} {errors(failed)}")
    assert failed.returncode != 0, failed.stdout
    # NIXL cannot create its UCX backend on the decode: the engine's own exception, measured
    # "nixl_cu12._bindings.nixlBackendError: NIXL_ERR_BACKEND" (vllm-cpu 0.32.0, nixl-cu12 1.5.1).
    assert len(errors(failed)) == 1 and errors(failed)[0].startswith(f"{DECODE}: "), failed.stderr
    assert "NIXL_ERR_BACKEND" in errors(failed)[0], failed.stderr
    assert containers(sb, HOSTS, DEPLOYMENT) == [], "the healthy prefill is torn down with its failed decode"
