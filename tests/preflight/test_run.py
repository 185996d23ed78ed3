"""run_preflight's rounds against scripted hosts (no SSH): which command goes where, in which
order, and that the listener is always cleaned up; the hosts answer with outputs captured from
the sandbox (h2: GID at 5; h4: no HCA)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Callable, Sequence

from launcher.errors import UnreachableError
from launcher.execute.command import Command, Token
from launcher.execute.transport import Result
from launcher.model import Host, Inventory
from launcher.model import Playbook
from launcher.preflight import checks as preflight
from launcher.preflight.run import run_preflight
from tests.preflight import factory as f

CAP = Path(__file__).resolve().parents[1] / "facts" / "captured"
H2 = (CAP / "gather-sandbox-h2.txt").read_text()
# A second healthy host: h2's output with another address and no IPv6 ULA pair, so its
# IPv4-mapped RoCE v2 GID sits at the customary index 3.
H6 = "\n".join(
    line.replace("\t4\tIB/RoCE v1", "\t2\tIB/RoCE v1").replace("\t5\tRoCE v2", "\t3\tRoCE v2")
    for line in H2.replace("198.18.48.12", "198.18.48.16").replace("c612:300c", "c612:3010")
    .replace("\nh2\n", "\nh6\n").splitlines()
    if "\tfd00:" not in line
) + "\n"
H4 = (CAP / "gather-sandbox-h4.txt").read_text()



def fresh(output: str) -> str:
    """A captured gather output with its clock reads set to now (the host is in sync)."""
    now = f"{time.time():.9f}"
    return re.sub(r"(### fleet:clock_(?:start|end) rc=0\n)[\d.]+", lambda m: m.group(1) + now, output)


Handler = Callable[[str, tuple[str, ...]], tuple[int, str]]


def claim_kind(args: tuple[str, ...]) -> str:
    """The preflight claim's commands (launcher/preflight/claim.py through deploy/lock.py's
    scripts, ``sh -c SCRIPT sh ARGS``): acquire (LOCK_ROOT DIR OWNER), release (DIR OWNER),
    break (DIR); anything else is "?"."""
    rest = args[4:] if args[:2] == ("sh", "-c") else ()
    if len(rest) == 3 and rest[1].endswith(".preflight"):
        return "claim"
    if rest and rest[0].endswith(".preflight"):
        return "unclaim" if len(rest) == 2 else "break"
    return "?"


class ScriptedTransport:
    def __init__(self, name: str, handler: Handler, log: list[tuple[str, str]]) -> None:
        self._name, self._handler, self._log = name, handler, log

    @property
    def host(self) -> str:
        return self._name

    def run(self, argv: Sequence[Token] | Command, *, timeout: float, stdin: bytes | None = None,
            env: object = None, check: bool = False) -> Result:
        args = Command.of(argv).reveal()
        kind = ("gather" if "fleet:clock_start" in " ".join(args) else "probe" if "fleet:ports" in " ".join(args)
                else "listener" if preflight.LISTENER_MARK in args else "client" if "fleet-preflight-client" in args
                else "cleanup" if "fleet-preflight-cleanup" in args else claim_kind(args))
        self._log.append((self._name, kind))
        rc, out = self._handler(self._name, args)
        return Result(host=self._name, command=kind, exit_status=rc, stdout=out.encode(), stderr=b"")

    def put(self, path: str, data: bytes, mode: int) -> None:
        raise AssertionError("preflight never writes files")

    def get(self, path: str) -> bytes:
        raise AssertionError("preflight never reads files")

    def close(self) -> None:
        pass


class Scripted:
    def __init__(self, handler: Handler, down: dict[str, str] | None = None) -> None:
        self.handler, self.down = handler, down or {}
        self.log: list[tuple[str, str]] = []
        self.closed = False

    def connect(self, host: Host) -> ScriptedTransport:
        if host.name in self.down:
            raise UnreachableError(host.name, self.down[host.name])
        return ScriptedTransport(host.name, self.handler, self.log)

    def close(self) -> None:
        self.closed = True


def inventory(*names: str) -> Inventory:
    ips = {"h2": "198.18.48.12", "h4": "198.18.48.14", "h6": "198.18.48.16"}
    return f.inventory(*(f.host(n, ips[n], nccl_ifname="veth0", gid_index="auto", models_dir="/srv/models",
                                cache_dir="/srv/cache") for n in names))


def probe_output(args: tuple[str, ...], listening: str = "0.0.0.0:22") -> str:
    script = args[2]
    parts = [f"### fleet:ports rc=0\n{listening}\n", "### fleet:units rc=0\n"]
    for i in range(script.count("### fleet:path:") // 1):
        parts.append(f"### fleet:path:{i} rc=0\n0 - -\n### fleet:manifest:{i} rc=0\nnone\n")
    for name in sorted({seg.split("rc=")[0] for seg in script.split("'### fleet:image:")[1:]}):
        parts.append(f"### fleet:image:{name.strip()} rc=0\nrdma_cm\nuverbs0\n")
    return "".join(parts)


def healthy(reach_error: str | None = None) -> Handler:
    def handler(host: str, args: tuple[str, ...]) -> tuple[int, str]:
        if "fleet:clock_start" in " ".join(args):
            return 0, fresh({"h2": H2, "h4": H4, "h6": H6}[host])
        if "fleet:ports" in " ".join(args):
            return 0, probe_output(args)
        if preflight.LISTENER_MARK in args:
            return 0, json.dumps({"pid": 4242, "errors": {}}) + "\n"
        if "fleet-preflight-client" in args:
            jobs = json.loads(args[-1])
            return 0, json.dumps({f"{dst}:{port}": reach_error for _, dst, port, _ in jobs}) + "\n"
        return 0, ""
    return handler


def playbook(pattern: str) -> Playbook:
    """The sandbox hosts cannot pass --gpus (no NVIDIA runtime), as the sandbox playbooks say."""
    return f.playbook({"rank": pattern}, overrides=f.overrides(drop_docker_flags=("--gpus", "--ulimit")))


def run(inv: Inventory, connector: Scripted) -> list[preflight.Check]:
    report = run_preflight(inv, f.catalog(f.multinode()), playbook(":".join(h.name for h in inv.hosts)),
                           connector, cache=False)
    return list(report.checks)


def lines(checks: list[preflight.Check], status: str | None = None) -> list[str]:
    return [c.line() for c in checks if status is None or c.status == status]


def test_rounds_in_order_and_gid_auto_per_host() -> None:
    connector = Scripted(healthy())
    inv = inventory("h2", "h6")
    report = run_preflight(inv, f.catalog(f.multinode()), playbook("h2:h6"), connector, cache=False)
    assert report.plan is not None
    assert {u.host: u.env["NCCL_IB_GID_INDEX"] for u in report.plan.units} == {"h2": "5", "h6": "3"}
    kinds = [k for _, k in connector.log]
    # The claim spans the rounds that bind ports or start probe containers (claim.py).
    assert kinds == ["gather", "gather", "claim", "claim", "probe", "probe", "listener", "client", "cleanup",
                     "unclaim", "unclaim"]
    assert [c.line() for c in report.checks if c.name.startswith(("gid", "reach"))] == [
        "pass: h2/fleet-x-rank0-r0: gid mlx5_0: NCCL_IB_GID_INDEX=5",
        "pass: h6/fleet-x-rank0-r1: gid mlx5_0: NCCL_IB_GID_INDEX=3",
        "pass: h6/fleet-x-rank0-r1: reach dist-init: reaches dist-init 198.18.48.12:20000 on h2",
    ]
    assert report.exit_code == 0 and not report.failed


def test_unreachable_dist_init_still_cleans_up() -> None:
    connector = Scripted(healthy(reach_error="timed out after 3s"))
    checks = run(inventory("h2", "h6"), connector)
    assert lines(checks, "fail") == [
        "fail: h6/fleet-x-rank0-r1: reach dist-init: cannot reach dist-init 198.18.48.12:20000 on h2 (x/rank0): "
        "timed out after 3s (from 198.18.48.16) (fix: open tcp/20000 from this host's data IP to 198.18.48.12 "
        "(routes, firewall))",
    ]
    assert connector.log[-3] == ("h2", "cleanup")


def test_listener_crash_is_reported_and_cleanup_still_runs() -> None:
    base = healthy()

    def handler(host: str, args: tuple[str, ...]) -> tuple[int, str]:
        if "fleet-preflight-client" in args:
            raise UnreachableError(host, "connection lost during reachability client")
        return base(host, args)
    connector = Scripted(handler)
    checks = run(inventory("h2", "h6"), connector)
    assert lines(checks, "warn")[-1] == (
        "warn: h6/fleet-x-rank0-r1: reach dist-init: dist-init 198.18.48.12:20000 on h2 not probed: h6 is unreachable "
        "over SSH (connection lost during reachability client) (fix: check SSH to h6: fleet run -i inv.yaml h6 -- "
        "true)")
    assert connector.log[-3] == ("h2", "cleanup")


def test_port_already_listened_needs_no_listener() -> None:
    base = healthy()

    def handler(host: str, args: tuple[str, ...]) -> tuple[int, str]:
        if "fleet:ports" in " ".join(args) and host == "h2":
            return 0, probe_output(args, listening="0.0.0.0:22\n0.0.0.0:20000")
        return base(host, args)
    connector = Scripted(handler)
    checks = run(inventory("h2", "h6"), connector)
    assert "listener" not in [k for _, k in connector.log] and "cleanup" not in [k for _, k in connector.log]
    assert "fail: h2/fleet-x-rank0-r0: ports: port 20000 (dist_init) already in use (fix: stop what listens there " \
        "(ss -ltnp) or change the playbook's ports)" in lines(checks, "fail")


def test_missing_hca_with_auto_gid_fails_planning_and_names_the_host() -> None:
    connector = Scripted(healthy())
    checks = run(inventory("h2", "h4"), connector)
    assert lines(checks, "fail") == [
        "fail: h4: plan: inv.yaml:3:5: h4/gid_index: gid_index is auto but facts show no RoCE v2 IPv4 GID on mlx5_0 "
        "(fix: check show_gids on h4, or set its gid_index explicitly)",
        "fail: h4: hca mlx5_0: HCA mlx5_0 not found (ibv_devinfo lists none) (fix: fix hcas in the inventory or the "
        "RDMA driver; without it NCCL silently falls back to TCP)",
        "fail: h4: /dev/infiniband: /dev/infiniband is missing on the host (fix: load the RDMA drivers (ib_uverbs, "
        "rdma_ucm))",
    ]
    assert [k for _, k in connector.log] == ["gather", "gather"], "no probe (nor claim) without a plan"


def test_unreachable_host_fails_and_is_not_probed() -> None:
    connector = Scripted(healthy(), down={"h6": "no SSH banner from 198.18.48.16 within 10s"})
    inv = f.inventory(*(f.host(n, ip, nccl_ifname="veth0", gid_index=gid, models_dir="/srv/models")
                        for n, ip, gid in (("h2", "198.18.48.12", 5), ("h6", "198.18.48.16", 3))))
    checks = run(inv, connector)
    assert lines(checks, "fail") == [
        "fail: h6: ssh: unreachable: no SSH banner from 198.18.48.16 within 10s (fix: check SSH to h6: fleet run -i "
        "inv.yaml h6 -- true)",
    ]
    assert connector.log == [("h2", "gather"), ("h2", "claim"), ("h2", "probe"), ("h2", "unclaim")]
    # The hint names the host SSH could not reach and how that was seen (issue 16 item 11).
    assert "warn: h6/fleet-x-rank0-r1: reach dist-init: dist-init 198.18.48.12:20000 on h2 not probed: h6 is " \
        "unreachable over SSH (no SSH banner from 198.18.48.16 within 10s) (fix: check SSH to h6: fleet run -i " \
        "inv.yaml h6 -- true)" in lines(checks)


def test_host_without_python3_is_not_probed() -> None:
    no_py = H6.replace("### fleet:python3 rc=0\n3.11.7", "### fleet:python3 rc=127\nsh: python3: not found")
    base = healthy()

    def handler(host: str, args: tuple[str, ...]) -> tuple[int, str]:
        if "fleet:clock_start" in " ".join(args) and host == "h6":
            return 0, fresh(no_py)
        return base(host, args)
    connector = Scripted(handler)
    checks = run(inventory("h2", "h6"), connector)
    assert "warn: h6/fleet-x-rank0-r1: reach dist-init: dist-init 198.18.48.12:20000 on h2 not probed: python3 is " \
        "not on PATH on h6 (fix: install python3 on both hosts (the probe uses its standard library))" in lines(checks)
    assert "listener" not in [k for _, k in connector.log]


def test_limit_asks_and_checks_only_its_hosts(monkeypatch: object, tmp_path: Path) -> None:
    """``--limit h6``: facts and probes go to h6 alone; h2 (outside) is planned as configured,
    and the report's plan is still the whole deployment's (what ``fleet up`` deploys from)."""
    import pytest

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.setenv("FLEET_FACTS_DIR", str(tmp_path))  # nothing cached
    connector = Scripted(healthy())
    inv = f.inventory(f.host("h2", "198.18.48.12", nccl_ifname="veth0", gid_index=5, models_dir="/srv/models",
                             cache_dir="/srv/cache"),
                      f.host("h6", "198.18.48.16", nccl_ifname="veth0", gid_index="auto", models_dir="/srv/models",
                             cache_dir="/srv/cache"))  # fmt: skip
    pb = f.playbook({"single": "h2:h6"}, replicas={"single": 2},
                    overrides=f.overrides(drop_docker_flags=("--gpus", "--ulimit")))  # fmt: skip
    report = run_preflight(inv, f.catalog(f.recipe()), pb, connector, cache=False, limit="h6")
    assert sorted(set(connector.log)) == [("h6", "claim"), ("h6", "gather"), ("h6", "probe"), ("h6", "unclaim")]
    assert report.plan is not None and [u.host for u in report.plan.units] == ["h2", "h6"]
    assert {c.host for c in report.checks} == {"h6"}


def test_limit_that_splits_a_group_is_refused_before_any_host() -> None:
    import pytest

    from launcher.errors import UsageError

    connector = Scripted(healthy())
    inv = f.inventory(*(f.host(n, ip, nccl_ifname="veth0", gid_index=3, models_dir="/srv/models",
                               cache_dir="/srv/cache") for n, ip in (("h2", "198.18.48.12"), ("h6", "198.18.48.16"))))  # fmt: skip
    with pytest.raises(UsageError) as caught:
        run_preflight(inv, f.catalog(f.multinode()), playbook("h2:h6"), connector, cache=False, limit="h6")
    assert str(caught.value) == "--limit splits group 'x/rank0': it also runs on h2; include those hosts"
    assert connector.log == []
