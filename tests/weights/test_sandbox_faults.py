"""``fleet weights stage`` when things go wrong, on the sandbox fleet through the real CLI (issue
25 items 3, 8, 9; the weights part of "Faults, every step").  Four H100 hosts (h1-h4) run the
EAGLE deployment; each case is one function on the one sandbox fleet.

- A Hugging Face cache as the source (the model dir a link to ``snapshots/<rev>``, its files
  links into ``blobs/``): from a directory here, and from ``HOST:PATH`` on a host (sent from a
  view of hard links, removed afterwards), every copy holds regular files with the content.
- A holder the other hosts cannot reach (its SSH port dropped for everyone but the control
  host, nft in its namespace -- a partitioned data network; fleet itself still reaches it):
  it is retired after failing two receivers, and all three receivers complete from the source.
- SIGKILL while files spread: the run's authorized lines (with ``expiry-time=``) and run dirs
  stay; the next run from this control host sweeps them and finishes.  SIGTERM while files
  spread: exit 143, ``terminated by SIGTERM``, nothing of the run left on any host.
- A receiver (h4) hung at the first step, and dropped or hung just before each later step (the
  step hook holds fleet there): exit 1 naming h4, nothing of the run left on the others, and
  staging again completes every copy with nothing of either run left anywhere.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from launcher.sandbox.client import Sandbox
from tests.cli_process import CliProcess, until
from tests.weights.test_sandbox import DRAFT, MB, PLAYBOOK, REPO, TARGET, _digest, _model, _on_host

pytestmark = pytest.mark.sandbox

HOSTS = ("h1", "h2", "h3", "h4")
LEFT = "cat ~/.ssh/authorized_keys 2>/dev/null | grep -c fleet-weights-; ls /run | grep -c fleet-weights-"


@pytest.fixture(scope="module", autouse=True)
def _left_clean(sandbox_fleet: Sandbox) -> Iterator[None]:
    """Every host's models dir as the module found it empty: later modules (tests/weights/
    test_sandbox.py counts what the source sends) expect no copies left."""
    yield
    _wipe(sandbox_fleet, *HOSTS)


def _playbook(tmp_path: Path, hosts: str) -> Path:
    pb = tmp_path / f"{hosts.replace(':', '-')}.yaml"
    pb.write_text(PLAYBOOK.read_text().replace("hosts: h100", f"hosts: {hosts}"))
    return pb


def _stage(sb: Sandbox, pb: Path, source: str, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["fleet", "weights", "stage", str(pb), "--source", source, "-i", sb.inventory,
                           "--known-hosts", sb.known_hosts, *more], capture_output=True, text=True, timeout=600,
                          cwd=REPO, env={**os.environ, "FLEET_FACTS_DIR": "/nonexistent-facts"})  # fmt: skip


def _wipe(sb: Sandbox, *hosts: str) -> None:
    for h in hosts:
        assert sb.ssh(h, "rm -rf /srv/models/openai /srv/models/lmsys").rc == 0


def _hf_cache(root: Path) -> Path:
    """A Hugging Face cache holding TARGET (files are links into blobs/) and DRAFT (plain), as
    ``<root>/models/<org>/<name>``; returns ``<root>/models``."""
    plain = root / "plain"
    _model(plain / TARGET, shards=2, floats=MB)
    (plain / TARGET / "original").mkdir()
    (plain / TARGET / "original" / "blob.bin").write_bytes(os.urandom(MB))
    repo = root / "hub" / "models--openai--gpt-oss-120b"
    snap = repo / "snapshots" / "rev1"
    (repo / "blobs").mkdir(parents=True)
    for i, f in enumerate(sorted(p for p in (plain / TARGET).rglob("*") if p.is_file())):
        rel = f.relative_to(plain / TARGET)
        blob = repo / "blobs" / f"blob{i}"
        f.rename(blob)
        link = snap / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    models = root / "models"
    (models / "openai").mkdir(parents=True)
    (models / TARGET).symlink_to(os.path.relpath(snap, models / "openai"))
    _model(models / DRAFT, shards=1, floats=MB)
    return models


def _regular_copy(sb: Sandbox, host: str, want: Path) -> None:
    copy = _on_host(sb, host, f"/srv/models/{TARGET}")
    assert not any(p.is_symlink() for p in copy.rglob("*")), f"{host}: a link arrived"
    assert _digest(copy) == _digest(want), host


def test_a_hugging_face_cache_is_staged_as_its_files(sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    sb = sandbox_fleet
    _wipe(sb, *HOSTS)
    models = _hf_cache(tmp_path / "cache")
    r = _stage(sb, _playbook(tmp_path, "h1:h2"), str(models))
    assert r.returncode == 0, r.stderr
    for h in ("h1", "h2"):
        _regular_copy(sb, h, models / TARGET)
    # The same cache on h1, staged from there to h3 and h4.
    hf = _on_host(sb, "h1", "/srv/hf")
    subprocess.run(["cp", "-a", f"{tmp_path / 'cache'}/.", str(hf)], check=True)
    r = _stage(sb, _playbook(tmp_path, "h3:h4"), "h1:/srv/hf/models")
    assert r.returncode == 0, r.stderr
    for h in ("h3", "h4"):
        _regular_copy(sb, h, models / TARGET)
    assert not list((hf / "hub").rglob(".fleet-view-*")), "the source's view is removed"
    assert (hf / "models" / TARGET / "config.json").is_symlink(), "the source is left as it was"
    subprocess.run(["rm", "-rf", str(hf)], check=True)


def _partition(sb: Sandbox, host: str, on: bool) -> None:
    """``host``'s SSH port dropped for every address but the control host's (nft in its namespace)."""
    from launcher.sandbox.netns import Slot

    assert sb.state.slot is not None
    h = sb.host(host)
    script = (f"add table inet fleetpart\nadd chain inet fleetpart in {{ type filter hook input priority 0; }}\n"
              f"add rule inet fleetpart in ip saddr != {Slot(index=sb.state.slot).root_address} tcp dport {h.port} drop\n"
              if on else "delete table inet fleetpart\n")  # fmt: skip
    proc = subprocess.run(("ip", "netns", "exec", h.netns, "nft", "-f", "-"), input=script, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _netns_fleet(sb: Sandbox, tmp_path: Path, shards: int) -> tuple[Path, Path]:
    """A source (TARGET in ``shards`` 4 MiB shards, DRAFT) and the h1-h4 playbook, every host
    wiped; skips outside the netns sandbox (network faults need it)."""
    if sb.state.slot is None:
        pytest.skip("network faults need the netns sandbox")
    src = tmp_path / "src"
    _model(src / TARGET, shards=shards, floats=MB)
    _model(src / DRAFT, shards=1, floats=MB)
    _wipe(sb, *HOSTS)
    return src, _playbook(tmp_path, "h1:h2:h3:h4")


def test_an_unreachable_holder_is_retired_and_every_receiver_completes(sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    sb = sandbox_fleet
    src, pb = _netns_fleet(sb, tmp_path, 3)
    assert _stage(sb, _playbook(tmp_path, "h1"), str(src)).returncode == 0  # h1 holds everything
    _partition(sb, "h1", True)
    try:
        r = _stage(sb, pb, str(src), "--json")
    finally:
        _partition(sb, "h1", False)
    assert r.returncode == 0, r.stderr
    hosts = {h["host"]: h for h in json.loads(r.stdout)["hosts"]}
    assert {h: v["status"] for h, v in hosts.items()} == dict.fromkeys(HOSTS, "ok")
    n_files = sum(1 for p in src.rglob("*") if p.is_file())
    for h in ("h2", "h3", "h4"):
        assert hosts[h]["files_transferred"] == n_files and "h1" not in hosts[h]["received_from"], hosts[h]
        assert _digest(_on_host(sb, h, f"/srv/models/{TARGET}")) == _digest(src / TARGET)
    for h in HOSTS:
        assert sb.ssh(h, LEFT).out.split() == ["0", "0"], h


def test_killed_runs_are_swept_and_sigterm_cleans_up(sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    sb = sandbox_fleet
    src = tmp_path / "src"
    _model(src / TARGET, shards=8, floats=3 * MB)
    _model(src / DRAFT, shards=1, floats=MB)
    pb = _playbook(tmp_path, "h1:h2:h3:h4")

    def spreading(sig: signal.Signals) -> CliProcess:
        _wipe(sb, *HOSTS)
        cli = CliProcess(["fleet", "weights", "stage", str(pb), "--source", str(src), "-i", sb.inventory,
                          "--known-hosts", sb.known_hosts], tmp_path, sig.name)  # fmt: skip
        first = [_on_host(sb, h, f"/srv/models/{TARGET}/model-00001-of-00008.safetensors") for h in HOSTS]
        until("files are spreading", lambda: any(p.exists() for p in first), timeout=180)
        cli.sigint(sig)
        cli.proc.wait(timeout=90)
        return cli

    cli = spreading(signal.SIGKILL)
    cli.close()
    left = {h: sb.ssh(h, "cat ~/.ssh/authorized_keys; ls /run").out for h in HOSTS}
    assert any('expiry-time="' in text for text in left.values()), left
    assert _stage(sb, pb, str(src)).returncode == 0
    for h in HOSTS:
        assert sb.ssh(h, LEFT).out.split() == ["0", "0"], f"{h}: the killed run's keys were not swept"

    cli = spreading(signal.SIGTERM)
    try:
        assert cli.proc.returncode == 143, cli.stderr
        assert cli.stderr.endswith("fleet: terminated by SIGTERM\n"), cli.stderr
    finally:
        cli.close()
    for h in HOSTS:
        assert sb.ssh(h, LEFT).out.split() == ["0", "0"], h
    assert _stage(sb, pb, str(src)).returncode == 0


def test_a_receiver_lost_at_the_first_step(sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    """h4 hung (sshd and its sessions SIGSTOPped; a dropped one fails the same first step, at its
    connect deadline instead of the banner's) when staging starts: exit 1 naming h4, h1-h3 complete with their manifests and nothing of the run left
    on them; with h4 back, staging again fills h4 alone."""
    from tests.deploy.test_sandbox_faults import Fault

    sb = sandbox_fleet
    src, pb = _netns_fleet(sb, tmp_path, 2)
    with Fault(sb, "h4", "hang"):
        r = _stage(sb, pb, str(src), "--json")
        assert r.returncode == 1, r.stderr
        hosts = {h["host"]: h for h in json.loads(r.stdout)["hosts"]}
        assert hosts["h4"]["status"] == "unreachable" and r.stderr.strip().splitlines()[-1].endswith("failed: h4")
        for h in ("h1", "h2", "h3"):
            assert hosts[h]["status"] == "ok", hosts[h]
            assert _on_host(sb, h, f"/srv/models/{TARGET}/fleet-weights.json").exists()
            assert sb.ssh(h, LEFT).out.split() == ["0", "0"], h
    r = _stage(sb, pb, str(src), "--json")
    assert r.returncode == 0, r.stderr
    moved = {h["host"]: h["files_transferred"] for h in json.loads(r.stdout)["hosts"]}
    assert moved == {"h1": 0, "h2": 0, "h3": 0, "h4": sum(1 for p in src.rglob("*") if p.is_file())}
    assert sb.ssh("h4", LEFT).out.split() == ["0", "0"]


# Each step of staging (launcher/stephook.py names them) with h4, a receiver, broken just before
# it; the kinds take turns (both at every step with FLEET_FAULTS_EVERY_STEP=1).
STAGE_STEPS = ("scan", "prepare", "spread", "verify", "cleanup")
STAGE_CASES = [(s, k) for i, s in enumerate(STAGE_STEPS)
               for k in (("drop", "hang") if os.environ.get("FLEET_FAULTS_EVERY_STEP") == "1" else (("drop", "hang")[i % 2],))]


@pytest.mark.parametrize(("step", "kind"), STAGE_CASES, ids=[f"{s}-{k}" for s, k in STAGE_CASES])
def test_a_receiver_lost_at_each_step(sandbox_fleet: Sandbox, tmp_path: Path, step: str, kind: str) -> None:
    """Issue 25 "Faults, every step" for ``weights stage``: exit 1 whose last line names h4;
    nothing of the run left on h1-h3 (keys, run dirs); with h4 back, staging again completes every
    copy (h4's included, a killed run's lines swept) and leaves nothing of either run anywhere."""
    from tests.deploy.test_sandbox_faults import faulted_at

    sb = sandbox_fleet
    src, pb = _netns_fleet(sb, tmp_path, 2)
    argv = ["weights", "stage", str(pb), "--source", str(src)]
    r, fault = faulted_at(sb, argv, step, "h4", kind, tmp_path, {"FLEET_FACTS_DIR": "/nonexistent-facts"})
    with fault:
        assert r.returncode == 1, r.stdout + r.stderr
        assert "h4" in r.stderr.strip().splitlines()[-1] and "Traceback" not in r.stderr, r.stderr
        for h in ("h1", "h2", "h3"):
            assert sb.ssh(h, LEFT).out.split() == ["0", "0"], f"{h}: the run's keys or dirs were left\n{r.stderr}"
    again = _stage(sb, pb, str(src))
    assert again.returncode == 0, again.stderr
    for h in HOSTS:
        assert _digest(_on_host(sb, h, f"/srv/models/{TARGET}")) == _digest(src / TARGET), h
        assert sb.ssh(h, LEFT).out.split() == ["0", "0"], h
