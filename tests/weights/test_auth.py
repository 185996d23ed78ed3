"""The run's host-to-host key against a real sshd (loopback): with the authorized line and daemon
config fleet writes, a receiver can pull files of the model dir the way stage does -- and nothing
else: no path outside the dir, no writes, no removal of what it read, no link following, no shell."""

from __future__ import annotations

import getpass
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

from launcher.weights import auth
from tests.execute.sshd import SSHD, Sshd, SshdFactory


@pytest.fixture(scope="module")
def sender(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Sshd, Path, Path, str]]:
    """An sshd whose only authorized key is a run key with fleet's line; yields it, the model
    dir it serves, the key file and rsync's ``-e``."""
    if shutil.which("rsync") is None or not os.path.exists(SSHD):
        pytest.fail("rsync and openssh-server are required (scripts/install.sh)")
    os.makedirs("/run/sshd", exist_ok=True)
    root = tmp_path_factory.mktemp("wauth")
    model = root / "models" / "org" / "m"
    model.mkdir(parents=True)
    (model / "a.bin").write_bytes(b"weights")
    (root / "models" / "secret").write_text("not for receivers")
    (model / "out").symlink_to(root / "models" / "secret")
    config = root / "rsyncd.conf"
    config.write_text(auth.daemon_config(str(model), getpass.getuser()))
    key = auth.new_key()
    key_file = root / "key"
    key_file.write_bytes(key.private)
    key_file.chmod(0o600)
    authorized = root / "authorized_keys"
    authorized.write_text(auth.authorized_line(key, str(config), ["127.0.0.1"], "t1") + "\n")
    (root / "sshd").mkdir()
    factory = SshdFactory(root / "sshd")
    try:
        sshd = factory.start("sender", authorized_keys=authorized)
        known = root / "known_hosts"
        known.write_text(f"{sshd.known_line}\n")
        yield sshd, model, key_file, auth.ssh_command(str(key_file), str(known), sshd.port, control=str(root / "cm"))
    finally:
        subprocess.run(auth.close_masters_argv(str(root)), capture_output=True, timeout=60)
        factory.stop_all()


def _rsync(e: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["rsync", "-a", "-e", e, *args], input=stdin, capture_output=True, timeout=60)


def test_a_receiver_pulls_files_of_the_model_dir(sender: tuple[Sshd, Path, Path, str], tmp_path: Path) -> None:
    sshd, model, _, e = sender
    r = _rsync(e, "-I", "--from0", "--files-from=-", f"root@127.0.0.1::{auth.MODULE}/", f"{tmp_path}/", stdin=b"a.bin\0")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "a.bin").read_bytes() == b"weights"


def test_hops_prefer_aes_gcm(sender: tuple[Sshd, Path, Path, str]) -> None:
    _, _, _, e = sender
    r = subprocess.run([*shlex.split(e), "-G", "127.0.0.1"], capture_output=True, text=True, timeout=60)
    assert "ciphers aes128-gcm@openssh.com,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com" in r.stdout.splitlines()


def test_nothing_outside_the_dir_is_readable(sender: tuple[Sshd, Path, Path, str], tmp_path: Path) -> None:
    _, _, _, e = sender
    r = _rsync(e, f"root@127.0.0.1::{auth.MODULE}/../secret", f"{tmp_path}/")
    assert r.returncode != 0 and not (tmp_path / "secret").exists()
    # A symlink is sent as a symlink; following it (-L, --copy-unsafe-links) is refused.
    r = _rsync(e, f"root@127.0.0.1::{auth.MODULE}/out", f"{tmp_path}/")
    assert r.returncode == 0 and (tmp_path / "out").is_symlink()
    for opt in ("--copy-links", "--copy-unsafe-links", "--copy-dirlinks"):
        r = _rsync(e, opt, f"root@127.0.0.1::{auth.MODULE}/out", f"{tmp_path}/o2")
        assert b"The server is configured to refuse " + opt.encode() in r.stderr, r.stderr
        assert r.returncode != 0 and not (tmp_path / "o2").exists()


def test_the_dir_is_read_only(sender: tuple[Sshd, Path, Path, str], tmp_path: Path) -> None:
    _, model, _, e = sender
    (tmp_path / "new.bin").write_bytes(b"x")
    r = _rsync(e, str(tmp_path / "new.bin"), f"root@127.0.0.1::{auth.MODULE}/")
    assert r.returncode != 0 and b"read only" in r.stderr
    r = _rsync(e, "--remove-source-files", f"root@127.0.0.1::{auth.MODULE}/a.bin", f"{tmp_path}/")
    assert r.returncode != 0 and b"--remove-source-files cannot be used with a read-only module" in r.stderr
    assert sorted(os.listdir(model)) == ["a.bin", "out"]


def test_the_key_runs_no_other_command(sender: tuple[Sshd, Path, Path, str]) -> None:
    sshd, _, key_file, _ = sender
    r = subprocess.run(["ssh", "-p", str(sshd.port), "-i", str(key_file), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                        "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "root@127.0.0.1",
                        "echo shell"], input=b"", capture_output=True, timeout=60)  # fmt: skip
    assert b"shell" not in r.stdout
    assert r.stdout.startswith(b"@RSYNCD: ")  # the forced daemon answered, whatever was asked


def test_a_push_with_keys_only_in_the_agent_logs_in(tmp_path: Path) -> None:
    """Issue 25 item 15: a control host whose key lives only in its ssh-agent (no key file in the
    inventory or ssh config) pushes with ssh's own identities and the agent: no ``-i ''`` with
    ``IdentitiesOnly=yes``, which offers no key at all (the old command line, shown failing)."""
    (tmp_path / "sshd").mkdir()
    factory = SshdFactory(tmp_path / "sshd")
    short = Path(tempfile.mkdtemp(prefix="fw-"))  # sockets: pytest's tmp paths are too long for one
    sock = short / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        sshd = factory.start("pushed")
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock), "HOME": str(tmp_path)}  # no ~/.ssh/id_* to fall back on
        deadline = time.monotonic() + 60  # a bound on a failure: the agent's start on a loaded machine
        while not sock.exists():  # the agent's socket appears once it listens
            assert agent.poll() is None and time.monotonic() < deadline, "ssh-agent did not listen"
            time.sleep(0.05)
        subprocess.run(["ssh-add", str(factory.client_key)], env=env, check=True, capture_output=True, timeout=30)
        known = tmp_path / "known_hosts"
        known.write_text(f"{sshd.known_line}\n")

        def login(e: str) -> subprocess.CompletedProcess[bytes]:
            return subprocess.run([*shlex.split(e), "root@127.0.0.1", "true"], env=env, capture_output=True,
                                  timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip

        e = auth.ssh_command(None, str(known), sshd.port, control=str(short / "cm"))
        assert "-i" not in shlex.split(e) and "IdentitiesOnly=yes" not in e
        r = login(e)
        assert r.returncode == 0, r.stderr
        old = e.replace("ssh -p", "ssh -i '' -o IdentitiesOnly=yes -p", 1).replace(str(short / "cm"), str(short / "old"))
        assert login(old).returncode == 255
    finally:
        subprocess.run(auth.close_masters_argv(str(short)), capture_output=True, timeout=60)
        agent.kill()
        agent.wait()
        factory.stop_all()
        shutil.rmtree(short, ignore_errors=True)
