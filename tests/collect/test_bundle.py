"""The bundle the control node writes from what hosts send (recorded transports, no SSH):
layout per host/unit, manifest, unreachable hosts recorded, secrets never in the bundle."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from launcher.execute.fake import FakeConnector, Reply
from launcher.model import SecretRef
from launcher.preflight import collect
from tests.preflight import factory as f

INSPECT = json.dumps([{"Name": "/fleet-x-rank0-r0", "Config": {"Env": [
    "HF_TOKEN=hf_abcdefsecret", "NCCL_DEBUG=INFO", "MY_API_KEY=k-123", "PATH=/usr/bin"]}}])


def host_stream(extra: dict[str, bytes] | None = None) -> bytes:
    files = {
        "./host/facts.txt": b"### fleet:hostname rc=0\nh1\n### fleet:kernel rc=0\n6.1.0\n",
        "./host/nvidia-smi-topo.txt": b"GPU0 X NV18\n",
        "./units/fleet-x-rank0-r0/docker-logs.txt": b"2026-01-01T00:00:00Z started\n",
        "./units/fleet-x-rank0-r0/docker-inspect.json": INSPECT.encode(),
        "./units/fleet-x-rank0-r0/nccl.log": b"h1:1:1 [0] NCCL INFO Bootstrap : Using veth0\n",
        "./units/fleet-x-rank0-r0/files/etc/fleet/x/fleet-x-rank0-r0/env": b"NCCL_DEBUG=INFO\n",
        "./units/fleet-x-rank0-r0/files/etc/fleet/x/fleet-x-rank0-r0/secrets.env": b"HF_TOKEN=hf_abcdefsecret\n",
        "./units/fleet-x-rank0-r0/files/etc/fleet/x/fleet-x-rank0-r0/prev/secrets.env.bak": b"HF_TOKEN=old\n",
        "../../etc/passwd": b"root:x:0:0\n",
        "./collect.log": b"",
    }
    files.update(extra or {})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("./units/fleet-x-rank0-r0/evil")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/shadow"
        tar.addfile(link)
    return buf.getvalue()


def test_bundle_layout_manifest_and_secret_hygiene(tmp_path: Path) -> None:
    inv = f.inventory(f.host("h1", "10.0.0.1"), f.host("h2", "10.0.0.2"))
    recipe = f.multinode()
    pb = f.playbook({"rank": "h1:h2"}, secrets=(SecretRef(name="HF_TOKEN", from_env="X"),))
    connector = FakeConnector(replies=[Reply(match="fleet-collect", stdout=host_stream())],
                              unreachable={"h2": "no SSH banner from 10.0.0.2 within 10s"})
    out = tmp_path / "bundle.tar.gz"
    report = collect.collect(inv, f.catalog(recipe), pb, connector, out, tail=50, now=1_800_000_000.0)
    root = "fleet-collect-x-20270115T080000Z"
    assert (report.root, report.exit_code) == (root, 3)
    assert [(h.host, h.status, h.units) for h in report.hosts] == [
        ("h1", "ok", ("fleet-x-rank0-r0",)), ("h2", "unreachable", ())]
    with tarfile.open(out) as tar:
        names = sorted(tar.getnames())
        read = {n: (tar.extractfile(n) or io.BytesIO()).read() for n in names}
    assert names == sorted([
        f"{root}/h1/collect.log",
        f"{root}/h1/facts.json",
        f"{root}/h1/facts.txt",
        f"{root}/h1/fleet-x-rank0-r0/docker-inspect.json",
        f"{root}/h1/fleet-x-rank0-r0/docker-logs.txt",
        f"{root}/h1/fleet-x-rank0-r0/files/etc/fleet/x/fleet-x-rank0-r0/env.names",
        f"{root}/h1/fleet-x-rank0-r0/nccl.log",
        f"{root}/h1/nvidia-smi-topo.txt",
        f"{root}/h2/UNREACHABLE.txt",
        f"{root}/manifest.json",
        f"{root}/plan.json",
    ])
    assert not any(b"hf_abcdefsecret" in data or b"HF_TOKEN=old" in data for data in read.values())
    env = json.loads(read[f"{root}/h1/fleet-x-rank0-r0/docker-inspect.json"])[0]["Config"]["Env"]
    assert env == ["HF_TOKEN=***", "NCCL_DEBUG=INFO", "MY_API_KEY=***", "PATH=/usr/bin"]
    assert json.loads(read[f"{root}/h1/facts.json"])["hostname"] == "h1"
    assert read[f"{root}/h2/UNREACHABLE.txt"] == b"no SSH banner from 10.0.0.2 within 10s\n"
    manifest = json.loads(read[f"{root}/manifest.json"])
    assert manifest == collect.manifest_of(out)
    assert {k: manifest[k] for k in ("deployment", "recipe", "tail_lines", "plan_error", "created_utc")} == {
        "deployment": "x", "recipe": "fam/v", "tail_lines": 50, "plan_error": None,
        "created_utc": "2027-01-15T08:00:00Z"}
    assert manifest["hosts"] == {
        "h1": {"status": "ok", "error": None, "units": ["fleet-x-rank0-r0"], "files": 8},
        "h2": {"status": "unreachable", "error": "no SSH banner from 10.0.0.2 within 10s", "units": [], "files": 0},
    }
    plan = json.loads(read[f"{root}/plan.json"])
    assert [u["host"] for u in plan["units"]] == ["h1", "h2"]
    # one remote command per host, carrying the deployment name and the tail
    (cmd,) = connector.transports["h1"].commands
    assert "fleet-collect x 50 " in cmd


def test_a_host_that_sends_no_archive_is_recorded_as_failed(tmp_path: Path) -> None:
    inv = f.inventory(f.host("h1", "10.0.0.1"))
    pb = f.playbook({"single": "h1"})
    connector = FakeConnector(replies=[Reply(match="fleet-collect", exit_status=1, stderr=b"mktemp failed\n")])
    report = collect.collect(inv, f.catalog(f.recipe()), pb, connector, tmp_path / "b.tar.gz")
    assert [(h.status, h.error) for h in report.hosts] == [("failed", "collect script: exit 1: mktemp failed")]
    assert report.exit_code == 1
    assert collect.manifest_of(tmp_path / "b.tar.gz")["hosts"]["h1"]["status"] == "failed"


def test_redact_inspect_leaves_other_text_alone() -> None:
    assert collect.redact_inspect("not json", frozenset()) == "not json"
    doc = json.loads(collect.redact_inspect(json.dumps([{"Config": {"Env": ["A=1", "DB_PASSWORD=x"]}}]), frozenset()))
    assert doc[0]["Config"]["Env"] == ["A=1", "DB_PASSWORD=***"]


def test_the_bundle_is_0600_and_env_files_keep_their_names_only(tmp_path: Path) -> None:
    """Issue 25 item 5: the bundle was written 0644 and carried the units' 0600 env files."""
    inv = f.inventory(f.host("h1", "10.0.0.1"))
    pb = f.playbook({"single": "h1"})
    env = b"NCCL_DEBUG=INFO\nDB_URL='postgres://u:pw@db\nsecond line'\nEMPTY=''\n"
    unit_env = "./units/fleet-x-rank0-r0/files/etc/fleet/x/fleet-x-rank0-r0/env"
    connector = FakeConnector(replies=[Reply(match="fleet-collect", stdout=host_stream({unit_env: env}))])
    out = tmp_path / "bundle.tar.gz"
    collect.collect(inv, f.catalog(f.recipe()), pb, connector, out)
    assert out.stat().st_mode & 0o777 == 0o600
    with tarfile.open(out) as tar:
        read = {n: (tar.extractfile(n) or io.BytesIO()).read() for n in tar.getnames()}
    (names,) = [data for n, data in read.items() if n.endswith("/env.names")]
    assert names == b"NCCL_DEBUG\nDB_URL\nEMPTY\n"
    assert not [n for n, data in read.items() if b"postgres://" in data or n.endswith("/env")]


def test_a_gzip_bomb_is_unpacked_only_to_the_per_host_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25 item 5: a host's stream was unpacked whole into memory."""
    monkeypatch.setattr(collect, "MAX_HOST_BYTES", 1 << 20)
    inv = f.inventory(f.host("h1", "10.0.0.1"))
    pb = f.playbook({"single": "h1"})
    bomb = host_stream({"./host/a-bomb.txt": bytes(4 << 20)})  # 4 MiB of zeros, ~4 KB gzipped
    connector = FakeConnector(replies=[Reply(match="fleet-collect", stdout=bomb)])
    out = tmp_path / "bundle.tar.gz"
    collect.collect(inv, f.catalog(f.recipe()), pb, connector, out)
    with tarfile.open(out) as tar:
        names = tar.getnames()
        truncated = next(n for n in names if n.endswith("/h1/TRUNCATED.txt"))
        note = (tar.extractfile(truncated) or io.BytesIO()).read()
    assert not [n for n in names if n.endswith("a-bomb.txt")]
    assert note == b"./host/a-bomb.txt and what followed it: over the 1048576 bytes fleet unpacks per host\n"


def test_a_secrets_value_is_masked_under_any_name_and_wherever_it_occurs(tmp_path: Path) -> None:
    """Issue 25 (left item 4): env values were masked only by name; the same token under an
    innocuous name (or in the command line, a label, a log line) went into the bundle."""
    token = 'tok-"7f3a\\9c'  # JSON-escaped in inspect output: masked in the parsed strings
    inspect = json.dumps([{"Name": "/fleet-x-rank0-r0", "Args": ["--api-key", token],
                           "Config": {"Env": [f"WORKER_ARG={token}", f"HF_TOKEN={token}", "PATH=/usr/bin",
                                              f"NOT_IT={token}x"],
                                      "Labels": {"note": f"key {token}"}}}])  # fmt: skip
    unit = "./units/fleet-x-rank0-r0"
    stream = host_stream({f"{unit}/docker-inspect.json": inspect.encode(),
                          f"{unit}/docker-logs.txt": f"loaded key {token} from env\n".encode()})  # fmt: skip
    inv = f.inventory(f.host("h1", "10.0.0.1"))
    pb = f.playbook({"single": "h1"}, secrets=(SecretRef(name="HF_TOKEN", from_env="X"),))
    connector = FakeConnector(replies=[Reply(match="fleet-collect", stdout=stream)])
    out = tmp_path / "bundle.tar.gz"
    collect.collect(inv, f.catalog(f.recipe()), pb, connector, out, secret_values=(token,))
    with tarfile.open(out) as tar:
        read = {n: (tar.extractfile(n) or io.BytesIO()).read() for n in tar.getnames()}
    assert not [n for n, data in read.items() if token.encode() in data or b"7f3a" in data]
    (doc,) = [json.loads(data) for n, data in read.items() if n.endswith("/docker-inspect.json")]
    assert doc[0]["Config"]["Env"] == ["WORKER_ARG=***", "HF_TOKEN=***", "PATH=/usr/bin", "NOT_IT=***x"]
    assert (doc[0]["Args"], doc[0]["Config"]["Labels"]) == (["--api-key", "***"], {"note": "key ***"})
    (logs,) = [data for n, data in read.items() if n.endswith("/docker-logs.txt")]
    assert logs == b"loaded key *** from env\n"
