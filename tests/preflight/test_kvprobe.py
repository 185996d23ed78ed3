"""Preflight's KV-transport probe (launcher/preflight/kvprobe.py): which host pairs it probes
on plans made by the real planner, the docker commands it runs there, its parsers and verdicts,
and its host script against the real Mooncake transfer engine on loopback (the parser venv of
tools/parser_venvs.sh).  NIXL inside the real-engine image, between two sandbox hosts, is
tests/real_engine/test_real_pd.py's."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import subprocess
from pathlib import Path
from typing import Any, Callable

import pytest

from launcher import hostscripts
from launcher.errors import UnreachableError
from launcher.execute.fake import FakeConnector, FakeTransport, Reply
from launcher.execute.fanout import FanoutInterrupted, FanoutResult
from launcher.execute.transport import Result
from launcher.model import Host, Inventory, Plan, Recipe, RoleImages
from launcher.plan import plan
from launcher.preflight import kvprobe
from launcher.preflight.kvprobe import Outcome
from tests.preflight import factory as f

MOONCAKE_PY = Path(os.environ.get("FLEET_PARSER_CACHE", "/var/cache/fleet-parsers")) / "mooncake-0.3.13.post1/bin/python"


def fleet(n: int = 6, **spec: object) -> Inventory:
    return f.inventory(*(f.host(f"h{i}", f"10.0.0.{i}", **spec) for i in range(1, n + 1)))


def nixl_plan(inv: Inventory) -> tuple[Plan, Recipe]:
    """A vLLM NIXL PD plan: prefills on h1, h2, the decode on h3, the router on h4."""
    recipe = f.pd(transfer="nixl", engine="vllm", engine_version="0.11.0", image="vllm/vllm-openai:v0.11.0",
                  images=RoleImages(router="vllm/vllm-router:nightly"))  # fmt: skip
    return plan(inv, f.catalog(recipe), f.playbook({"prefill": "h1:h2", "decode": "h3", "router": "h4"})), recipe


def nixl_pairs(inv: Inventory) -> tuple[kvprobe.Pair, ...]:
    p, recipe = nixl_plan(inv)
    return kvprobe.pairs(p, inv, recipe)


def test_nixl_pairs_read_from_each_prefill_side_channel() -> None:
    inv = fleet()
    got = nixl_pairs(inv)
    assert [(p.backend, p.prefill.host, p.decode.host, p.ip, p.port, p.src) for p in got] == [
        ("nixl", "h1", "h3", "10.0.0.1", 5600, "10.0.0.3"),
        ("nixl", "h2", "h3", "10.0.0.2", 5600, "10.0.0.3"),
    ]


def test_mooncake_pairs_every_prefill_rank_with_every_decode_rank() -> None:
    inv = fleet()
    recipe = f.pd(nodes=2)
    got = kvprobe.pairs(plan(inv, f.catalog(recipe), f.playbook({"prefill": "h1:h2", "decode": "h3:h4"})), inv, recipe)
    # The leader's bootstrap port is the side channel; the other prefill rank has none (any port).
    assert [(p.backend, p.prefill.host, p.decode.host, p.port) for p in got] == [
        ("mooncake", "h1", "h3", 8998), ("mooncake", "h1", "h4", 8998), ("mooncake", "h2", "h3", 0),
        ("mooncake", "h2", "h4", 0),
    ]  # fmt: skip


def test_no_pairs_without_pd() -> None:
    inv = fleet()
    recipe = f.multinode()
    assert kvprobe.pairs(plan(inv, f.catalog(recipe), f.playbook({"rank": "h1:h2"})), inv, recipe) == ()


def test_the_probe_runs_the_units_image_with_its_transport_env_on_the_host_network() -> None:
    pair = nixl_pairs(fleet())[0]
    argv = kvprobe._docker_run(pair.decode, "read", ("nixl", pair.ip, "5600", pair.src, "120"), detach=False)
    env = {argv[i + 1] for i, a in enumerate(argv) if a == "-e"}
    assert {k: v for k, v in pair.decode.env.items() if k.startswith("UCX_")} == dict(e.split("=", 1) for e in env)
    assert "UCX_NET_DEVICES=mlx5_0:1" in env, env  # the HCAs of an RDMA host, as rendered
    assert argv[argv.index("--network") + 1] == "host" and "--device" in argv  # the rendered RDMA flags
    assert pair.decode.container is not None
    at = argv.index(pair.decode.container.image)
    assert argv[at - 2:at] == ("--entrypoint", "python3") and argv[at + 1:at + 3] == ("-c", hostscripts.text("kv-probe.py"))
    assert argv[at + 3:] == ("read", "nixl", "10.0.0.1", "5600", "10.0.0.3", "120")


def test_parse() -> None:
    mark = kvprobe.MARK
    assert kvprobe.parse(0, f"{mark}{{\"listening\": 5600}}\n") == Outcome(bytes=5600)
    assert kvprobe.parse(0, "noise\n" + mark + json.dumps({"transport": "tcp/veth0", "how": "software emulation",
                                                          "seconds": 0.5, "bytes": 1024})) == Outcome(
        transport="tcp/veth0", how="software emulation", seconds=0.5, bytes=1024)  # fmt: skip
    assert kvprobe.parse(1, mark + json.dumps({"error": "no nixl in the image: x", "missing": True})).missing
    assert kvprobe.parse(3, "fleet: image not present\n").no_image
    assert kvprobe.parse(125, "docker: Error response from daemon: boom.\n") == Outcome(
        error="the probe container failed: boom.")


def test_verdicts() -> None:
    inv = fleet(fabric="none", hcas=())
    pair = nixl_pairs(inv)[0]
    ok = kvprobe.verdict(pair, Outcome(transport="tcp/eth1", how="software emulation", seconds=0.25, bytes=32 << 20), inv)
    assert (ok.status, ok.host, ok.unit, ok.message) == (
        "pass", "h3", pair.decode.name, "NIXL from prefill h1 (10.0.0.1) to decode h3: read 32 MiB over tcp/eth1 "
        "(software emulation) in 0.250s (128.0 MiB/s)")  # fmt: skip
    bad = kvprobe.verdict(pair, Outcome(error="side channel 10.0.0.1:5600 (from 10.0.0.3): connection refused"), inv)
    assert (bad.status, bad.message) == (
        "fail", "NIXL from prefill h1 (10.0.0.1) to decode h3: side channel 10.0.0.1:5600 (from 10.0.0.3): "
        "connection refused")  # fmt: skip
    missing = kvprobe.verdict(pair, Outcome(error="no nixl in the image: No module named 'nixl'", missing=True), inv)
    assert (missing.status, missing.message) == (
        "warn", "NIXL not probed in vllm/vllm-openai:v0.11.0: the image has no nixl (No module named 'nixl')")


def test_mooncake_verdicts() -> None:
    """Mooncake's lines name its library; a failure's fix names its env and the ports it needs
    (not NIXL's)."""
    inv = fleet(fabric="none", hcas=())
    recipe = f.pd()
    pair = kvprobe.pairs(plan(inv, f.catalog(recipe), f.playbook({"prefill": "h1:h2", "decode": "h3"})), inv, recipe)[0]
    ok = kvprobe.verdict(pair, Outcome(transport="tcp", seconds=0.5, bytes=32 << 20), inv)
    assert (ok.status, ok.message) == (
        "pass", "Mooncake's transfer engine from prefill h1 (10.0.0.1) to decode h3: read 32 MiB over tcp in 0.500s "
        "(64.0 MiB/s)")  # fmt: skip
    bad = kvprobe.verdict(pair, Outcome(error="reading 1 bytes with Mooncake from 10.0.0.1:15455: RuntimeError: x"), inv)
    assert (bad.status, bad.message, bad.fix) == (
        "fail", "Mooncake's transfer engine from prefill h1 (10.0.0.1) to decode h3: reading 1 bytes with Mooncake "
        "from 10.0.0.1:15455: RuntimeError: x", "check MOONCAKE_PROTOCOL / MOONCAKE_DEVICE and that the prefill host "
        "accepts TCP from the decode host on the bootstrap port and on the ports Mooncake picks at start (handshake, "
        "transfers)")  # fmt: skip


def test_rdma_fabric_but_tcp_is_a_warning() -> None:
    inv = fleet()  # roce hosts
    pair = nixl_pairs(inv)[0]
    tcp = kvprobe.verdict(pair, Outcome(transport="tcp/eth1", seconds=1.0, bytes=1 << 20), inv)
    assert tcp.status == "warn" and tcp.message.endswith("but the fabric of h1, h3 is RDMA: the KV would move over TCP")
    rc = kvprobe.verdict(pair, Outcome(transport="rc_mlx5/mlx5_0:1", how="zero-copy", seconds=0.01, bytes=1 << 20), inv)
    assert rc.status == "pass"


# ---------------------------------------------------------------------------------------------
# The host script itself


def script_functions() -> dict[str, Any]:
    ns: dict[str, Any] = {"__name__": "kv_probe_under_test"}
    exec(compile(hostscripts.text("kv-probe.py"), "kv-probe.py", "exec"), ns)
    return ns


UCX_TABLES = """\
[1.0] [vm:1:0]   +--------+-------------+-----------------------------------+
[1.0] [vm:1:0]   | init self cfg#0                                          |
[1.0] [vm:1:0]   | remote memory read by ucp_get* into host memory from host |
[1.0] [vm:1:0]   +--------+-------------+-----------------------------------+
[1.0] [vm:1:0]   | Range  | Description |              Config               |
[1.0] [vm:1:0]   +--------+-------------+-----------------------------------+
[1.0] [vm:1:0]   | 0..inf | zero-copy   | tcp/lo                            |
[1.0] [vm:1:0]   +--------+-------------+-----------------------------------+
[2.0] [vm:1:0]   +--------+--------------------+------------------------------------+
[2.0] [vm:1:0]   | init intra-node cfg#1                                           |
[2.0] [vm:1:0]   | remote memory read by ucp_get*(multi) into host memory from host |
[2.0] [vm:1:0]   +--------+--------------------+------------------------------------+
[2.0] [vm:1:0]   | Range  |    Description     |               Config               |
[2.0] [vm:1:0]   +--------+--------------------+------------------------------------+
[2.0] [vm:1:0]   | 0..inf | software emulation | tcp/veth0                          |
[2.0] [vm:1:0]   +--------+--------------------+------------------------------------+
[3.0] [vm:1:0]   +------------+--------------------+---------------+
[3.0] [vm:1:0]   | init intra-node cfg#1                           |
[3.0] [vm:1:0]   | active message by ucp_am_send* from host memory |
[3.0] [vm:1:0]   +------------+--------------------+---------------+
[3.0] [vm:1:0]   |          0 | short              | tcp/lo        |
[3.0] [vm:1:0]   +------------+--------------------+---------------+
"""


def test_ucx_transport_is_the_peer_lanes_remote_read_table() -> None:
    """UCX 1.19's UCX_PROTO_INFO tables (as the nixl-cu12 1.5.1 wheel prints them): the last
    remote-read table is the peer's; other operations' tables are not read."""
    fns = script_functions()
    assert fns["ucx_transport"](UCX_TABLES) == ("tcp/veth0", "software emulation")
    assert fns["ucx_transport"]("nothing\n") is None


def test_own_lines_quote_ucx() -> None:
    text = ("[1796203440.470696] [vm:13608:0]     ucp_context.c:1508 UCX  WARN  network device 'ens9' is not "
            "available, please use one or more of: 'lo'(tcp), 'veth0'(tcp)\n"
            "E1202 09:24:00.474878   13608 nixl_agent.cpp:342] createBackend: backend creation failed for 'UCX'\n")  # fmt: skip
    assert script_functions()["own_lines"](text) == (
        "UCX: network device 'ens9' is not available, please use one or more of: 'lo'(tcp), 'veth0'(tcp)")
    nixl_only = "E1202 09:24:00.474878   13608 nixl_agent.cpp:342] createBackend: backend creation failed for 'UCX'\n"
    assert script_functions()["own_lines"](nixl_only) == "createBackend: backend creation failed for 'UCX'"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _run(python: Path, *args: str, wait: bool = True) -> subprocess.Popen[str]:
    proc = subprocess.Popen([str(python), "-c", hostscripts.text("kv-probe.py"), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    if wait:
        proc.wait(timeout=120)
    return proc


def _first_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    return proc.stdout.readline()


needs_mooncake: Callable[[Any], Any] = pytest.mark.skipif(
    not MOONCAKE_PY.is_file(), reason=f"no Mooncake parser venv at {MOONCAKE_PY} (tools/parser_venvs.sh)")


@needs_mooncake
def test_mooncake_read_across_loopback() -> None:
    """The real transfer engine (mooncake-transfer-engine-non-cuda) over its TCP protocol: the
    serving side registers the buffer and listens, the reading side reads it across and checks
    it, both exit."""
    port = _free_port()
    serve = _run(MOONCAKE_PY, "serve", "mooncake", "127.0.0.1", str(port), str(4 << 20), "60", "1", wait=False)
    try:
        assert kvprobe.parse(0, _first_line(serve)) == Outcome(bytes=port)
        read = _run(MOONCAKE_PY, "read", "mooncake", "127.0.0.1", str(port), "127.0.0.1", "60")
        assert read.stdout is not None
        got = kvprobe.parse(read.returncode, read.stdout.read())
        assert (read.returncode, got.error, got.transport, got.bytes) == (0, "", "tcp", 4 << 20), got
        assert serve.wait(timeout=60) == 0  # it served its one client and left
    finally:
        serve.kill()
        serve.wait()


@needs_mooncake
def test_side_channel_refused() -> None:
    """Nothing listens on the side channel (a closed port on loopback): one line naming the
    address and the refusal, exit 1."""
    port = _free_port()
    read = _run(MOONCAKE_PY, "read", "mooncake", "127.0.0.1", str(port), "127.0.0.1", "10")
    assert read.stdout is not None
    got = kvprobe.parse(read.returncode, read.stdout.read())
    assert read.returncode == 1 and got.error == f"side channel 127.0.0.1:{port} (from 127.0.0.1): connection refused"


@needs_mooncake
def test_mooncake_handshake_refused_quotes_mooncakes_own_line() -> None:
    """The side channel answers but the serving engine's P2P-handshake port refuses (a firewall
    between the hosts letting the bootstrap port through): the read fails with Mooncake's own
    line of that step only -- not the E-line every initialize logs ("Local segment descriptor
    not found") -- and exits 1."""
    closed = _free_port()
    with socket.socket() as side:
        side.bind(("127.0.0.1", 0))
        side.listen(1)
        side.settimeout(60)
        port = side.getsockname()[1]
        read = _run(MOONCAKE_PY, "read", "mooncake", "127.0.0.1", str(port), "127.0.0.1", "30", wait=False)
        try:
            conn, _ = side.accept()
            with conn:
                offer = {"session": f"127.0.0.1:{closed}", "addr": 1 << 40, "bytes": 1 << 20, "sha": "", "ip": "127.0.0.1"}
                conn.sendall((json.dumps(offer) + "\n").encode())
                assert read.wait(timeout=120) == 1
        finally:
            read.kill()
            read.wait()
    assert read.stdout is not None
    got = kvprobe.parse(1, read.stdout.read())
    assert got.error == (f"reading 1048576 bytes with Mooncake from 127.0.0.1:{closed}: RuntimeError: transfer_sync_read "
                         f"of 1048576 bytes from 127.0.0.1:{closed} failed (SocketHandShakePlugin: "
                         f"connect()127.0.0.1:{closed}: Connection refused [111])"), got  # fmt: skip


@needs_mooncake
def test_serving_side_beside_a_held_side_channel() -> None:
    """Our own running engine holds the side channel (fleet preflight of a running deployment):
    the probe listens on another port of the same address."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        serve = _run(MOONCAKE_PY, "serve", "mooncake", "127.0.0.1", str(port), str(1 << 20), "5", "1", wait=False)
        try:
            got = kvprobe.parse(0, _first_line(serve))
            assert got.bytes not in (0, port) and not got.error
        finally:
            serve.kill()
            serve.wait()


def test_missing_library() -> None:
    """An image without the library: one line saying so (a warning in preflight), exit 1."""
    proc = _run(Path("python3"), "serve", "mooncake", "127.0.0.1", str(_free_port()), "1024", "5", "1")
    assert proc.stdout is not None
    got = kvprobe.parse(proc.returncode, proc.stdout.read())
    assert proc.returncode == 1 and got.missing and re.search(r"No module named 'mooncake'", got.error), got


def test_a_probe_killed_by_a_signal_is_named_as_such() -> None:
    """Session 15's ci6: the reading container exited 137 with nothing said, shown as "exited 137"."""
    assert kvprobe.parse(137, "") == Outcome(killed=True, error="the probe container was killed by signal 9")
    assert kvprobe.parse(137, f"{kvprobe.KILLED}true\n") == Outcome(
        killed=True, error="the probe container was killed by signal 9 (OOM-killed: the host is out of memory)")
    assert not kvprobe.parse(1, "").killed


DOCKER = """#!/bin/sh
for a; do last=$a; done
echo "$1 $2 $last" >> "$LOG"
case "$1 $2" in
"run "*) exit 137 ;;
"inspect -f") printf '%s\\n' "$3" | sed 's/{{.State.OOMKilled}}/true/' ;;
esac
exit 0
"""


def test_a_killed_read_is_inspected_then_removed_and_keeps_its_status(tmp_path: Path) -> None:
    """The decode host's script, run by sh against a stand-in docker whose container dies of
    SIGKILL: it asks whether the OOM killer did it, removes the container, exits 137."""
    (tmp_path / "docker").write_text(DOCKER)
    (tmp_path / "docker").chmod(0o755)
    pair = nixl_pairs(fleet())[0]
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "LOG": str(tmp_path / "log")}
    done = subprocess.run(("sh", "-c", kvprobe.read_script(pair, 5600)), capture_output=True, text=True, env=env)
    name = f"fleet-preflight-kv-read-{pair.decode.name}"
    calls = [c.split(" ") for c in (tmp_path / "log").read_text().splitlines()]
    assert calls == [["rm", "-f", f"fleet-preflight-kv-read-{pair.decode.name}"], ["image", "inspect", pair.decode.container.image],  # type: ignore[union-attr]
                     ["run", "--name", "120"], ["inspect", "-f", name], ["rm", "-f", name]]  # fmt: skip
    assert done.returncode == 137
    assert kvprobe.parse(done.returncode, done.stdout + done.stderr).error.endswith("(OOM-killed: the host is out of memory)")


class _Decode(FakeTransport):
    """The decode host: its first reading container is killed (exit 137), the second reads."""

    def run(self, argv: Any, *, timeout: float, stdin: bytes | None = None, env: Any = None, check: bool = False) -> Result:
        res = super().run(argv, timeout=timeout, stdin=stdin, env=env, check=check)
        reads = [c for c in self.commands if "kv-read" in c and "docker run" in c]
        if "docker run" not in res.command or "kv-read" not in res.command:
            return res
        if len(reads) == 1:
            return dataclasses.replace(res, exit_status=137, stdout=b"")
        done = {"transport": "tcp/veth0", "how": "software emulation", "seconds": 0.5, "bytes": 32 << 20}
        return dataclasses.replace(res, exit_status=0, stdout=(kvprobe.MARK + json.dumps(done) + "\n").encode())


class _Connector(FakeConnector):
    """A new transport per connect (each phase of the probe connects again); all are kept."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[FakeTransport] = []

    def connect(self, host: Host) -> FakeTransport:
        t = _Decode(host.name) if host.name == "h3" else FakeTransport(
            host.name, [Reply(match="kv-serve", stdout=(kvprobe.MARK + '{"listening": 5600}\n').encode())])
        self.made.append(t)
        return t

    def commands(self, host: str) -> list[str]:
        return [c for t in self.made if t.host == host for c in t.commands]


def test_a_read_killed_from_outside_is_taken_once_more() -> None:
    """A probe killed by a signal says nothing of the KV path: the read is run again (noted), and
    its second answer is the verdict; each serving side takes one more client per read for it."""
    inv = fleet()
    p, recipe = nixl_plan(inv)
    notes: list[str] = []
    conn = _Connector()
    checks = kvprobe.probe(p, inv, recipe, conn, 4, lambda h: True, notes.append)
    assert [(c.host, c.status) for c in checks] == [("h3", "warn"), ("h3", "warn")], checks  # RDMA fabric, TCP read
    assert [n for n in notes if "probing again" in n] == [
        "preflight: h3: the probe container was killed by signal 9 before it read from h1; probing again"], notes
    reads = [c for c in conn.commands("h3") if "kv-read" in c and "docker run" in c]
    assert len(reads) == 3  # h1's twice, h2's once
    serve = next(c for c in conn.commands("h1") if "kv-serve" in c and "docker run" in c)
    m = re.search(r" serve nixl \S+ \d+ \d+ \d+ (\d+) >/dev/null", serve)
    assert m is not None and m.group(1) == "2", serve  # CLIENTS: one read of h3, taken at most twice



class _Closing(_Connector):
    """Closed by a Ctrl-C (run_all closes it): a connect after that is refused; ``reopened()``
    gives a new connector, as SSH's does."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False
        self.fresh: list[_Connector] = []

    def connect(self, host: Host) -> FakeTransport:
        if self.closed:
            raise UnreachableError(host.name, "connections were closed (interrupted)")
        return super().connect(host)

    def close(self) -> None:
        self.closed = True

    def reopened(self) -> _Connector:
        self.fresh.append(_Connector())
        return self.fresh[-1]


def test_after_a_ctrl_c_the_probe_containers_are_removed_over_new_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    """A serving container left running would hold the prefill's side-channel port for minutes
    (``fleet up --skip-preflight`` right after would find it taken).  The Ctrl-C comes during
    the reads, as run_all meets one: it closes the connector and raises FanoutInterrupted."""
    real, rounds = kvprobe.run_all, []

    def run_all(hosts: Any, fn: Any, *, connector: Any, forks: int = 4) -> Any:
        rounds.append(len(rounds))
        if len(rounds) == 2:  # serve, then read: interrupted
            connector.close()
            raise FanoutInterrupted(FanoutResult(outcomes=()))
        return real(hosts, fn, connector=connector, forks=forks)

    monkeypatch.setattr(kvprobe, "run_all", run_all)
    inv = fleet()
    p, recipe = nixl_plan(inv)
    conn = _Closing()
    with pytest.raises(KeyboardInterrupt):
        kvprobe.probe(p, inv, recipe, conn, 4, lambda h: True, lambda _: None)
    assert conn.closed and len(conn.fresh) == 1
    removed = {h: [c for c in conn.fresh[0].commands(h) if "docker rm -f" in c] for h in ("h1", "h2", "h3")}
    assert all(len(cs) == 1 for cs in removed.values()), removed
    assert "fleet-preflight-kv-serve-" in removed["h1"][0], removed
