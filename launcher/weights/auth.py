"""Host-to-host authentication for one staging run.  Pure (builds keys, lines and argv).

A receiving host fetches files from another host with rsync over SSH, so it must log in there.
Per run and per model fleet makes a fresh ed25519 key pair; the private key goes to the
receivers only (0600, in a root-only run dir under /run); the public key is authorized on the
hosts that may send that model with ``restrict`` (no shell, no forwarding, no pty),
``from=`` the receivers' data IPs, and a forced ``rsync --server --daemon --config=<file>``:
rsync's own single-use daemon over SSH, whose config (:func:`daemon_config`, in the sender's run
dir) has one read-only module, that model dir.  It confines the key as ``rrsync -ro`` would
(read-only, that one directory, the link-following options refused) without rrsync's Python
start on every transfer (~40 ms of CPU each, bench/README.md §5).  Both are removed when the
run ends, also after a failure or Ctrl-C.  Host keys are checked strictly on every hop against
the keys fleet itself already trusts for the sender.
"""

from __future__ import annotations

import base64
import posixpath
import shlex
from dataclasses import dataclass
from typing import Iterable, Mapping

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from launcher import hostscripts
from launcher.errors import UsageError
from launcher.execute.hostkeys import host_key_name

RUN_DIR_ROOT = "/run"
AUTHORIZED_KEYS = ".ssh/authorized_keys"  # below the login user's home (OpenSSH's default)
MODULE = "weights"  # the one module of a sender's daemon: rsync reads ``user@ip::weights/``
# What ``rrsync -ro`` refuses below "/" beyond writing: options that make the daemon follow a
# symlink out of the model dir, and device contents.
REFUSED = ("copy-links", "copy-dirlinks", "keep-dirlinks", "copy-unsafe-links", "copy-devices", "write-devices")


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyPair:
    private: bytes  # OpenSSH PEM
    public: str  # "ssh-ed25519 AAAA..."


def new_key() -> KeyPair:
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption())  # fmt: skip
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return KeyPair(private=private, public=public.decode())


def run_dir(run_id: str) -> str:
    return posixpath.join(RUN_DIR_ROOT, f"fleet-weights-{run_id}")


def marker(run_id: str) -> str:
    """The comment that tags this run's authorized_keys lines (what the clean-up removes)."""
    return f"fleet-weights-{run_id}"


def daemon_config(model_dir: str, user: str) -> str:
    """The rsyncd.conf of a sender's single-use daemon: :data:`MODULE` is ``model_dir``, read-only.
    ``uid``: the login user, so a daemon started as root keeps root's reading rights instead of
    rsync's default "nobody" (a non-root daemon cannot switch and ignores it).  No chroot (it
    needs root): rsync then sanitizes every path to stay inside the module."""
    if "\n" in model_dir or model_dir != model_dir.strip() or model_dir.endswith("\\"):
        raise UsageError(f"{model_dir!r}: a model path may not hold a newline, end in a backslash "
                         "or start or end with white space (rsyncd.conf cannot say it)")
    return (f"[{MODULE}]\npath = {model_dir.replace('%', '%%')}\nread only = yes\nuse chroot = no\n"
            f"uid = {user}\nrefuse options = {' '.join(REFUSED)}\n")


def authorized_line(key: KeyPair, config: str, from_ips: Iterable[str], run_id: str) -> str:
    """``config``: the sender's :func:`daemon_config` file."""
    ips = ",".join(sorted(set(from_ips)))
    command = shlex.join(("rsync", "--server", "--daemon", f"--config={config}", "."))
    command = command.replace("\\", "\\\\").replace('"', '\\"')
    return f'restrict,from="{ips}",command="{command}" {key.public} {marker(run_id)}'


# Each hop's SSH master (ssh_command's ControlPersist) is asked to exit before its socket goes.
_CLOSE_MASTERS = 'for s in "$2"/*.cm-*; do [ ! -S "$s" ] || ssh -o ControlPath="$s" -O exit fleet >/dev/null 2>&1; done; '
CONTROL_PERSIST_S = 60  # an idle hop's master outlives a lost clean-up by at most this
# OpenSSH's own ciphers, AES-GCM before its default chacha20-poly1305: with AES-NI (every x86
# server) it moves the bytes for less CPU (a 128 MiB pull on this machine: 0.20 s vs 0.25 s of
# CPU for ssh, sshd and both rsyncs); chacha20-poly1305 stays for hosts without it.
CIPHERS = "aes128-gcm@openssh.com,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com"


KEY_TTL_S = 24 * 3600  # a run's keys stop working this long after it began, clean-up or not


def begin_argv(run_id: str, owner: str, lines: Iterable[str] = ()) -> tuple[str, ...]:
    """Makes the run dir (owner, expiry), sweeps expired runs, authorizes ``lines`` with
    ``expiry-time=``; prints ``<run id> <owner>`` of the other runs on the host
    (``hostscripts/weights-keys.sh``)."""
    return ("sh", "-c", hostscripts.text("weights-keys.sh"), "weights-keys", RUN_DIR_ROOT, "begin", run_id, owner,
            str(KEY_TTL_S), *lines)


def runs_argv() -> tuple[str, ...]:
    """Prints ``<run id> <owner>`` of every run on the host, changing nothing."""
    return ("sh", "-c", hostscripts.text("weights-keys.sh"), "weights-keys", RUN_DIR_ROOT, "runs")


def other_runs(stdout: str) -> dict[str, str]:
    """``begin``'s (or ``runs``') output: run id -> owner line."""
    return dict(line.split(" ", 1) for line in stdout.splitlines() if " " in line)


def cleanup_argv(run_ids: Iterable[str], more: Iterable[str] = ()) -> tuple[str, ...]:
    """Ends the runs' SSH masters, removes their authorized_keys lines (and any of a run that is
    gone or expired), their run dirs and the dirs in ``more`` (idempotent)."""
    return ("sh", "-c", hostscripts.text("weights-keys.sh"), "weights-keys", RUN_DIR_ROOT, "end", *run_ids, "--", *more)


def close_masters_argv(directory: str) -> tuple[str, ...]:
    """Ends the SSH masters whose sockets are in ``directory`` (the control host's pushes)."""
    return ("sh", "-c", _CLOSE_MASTERS, "fleet-weights", "-", directory)


def known_hosts_lines(address: str, port: int, keys: Mapping[str, object]) -> list[str]:
    """known_hosts entries for a sender's data address, with the keys fleet knows for it
    (``keys``: key type -> paramiko key)."""
    name = host_key_name(address, port)
    return [f"{name} {t} {base64.b64encode(k.asbytes()).decode()}"  # type: ignore[attr-defined]
            for t, k in sorted(keys.items())]


def ssh_command(key_file: str | None, known_hosts: str, port: int, *, control: str) -> str:
    """rsync's ``-e``: strict host keys, only the run's key (``key_file``; None: ssh's own
    identities and agent, as for a control host whose keys live only in its ssh-agent), never a
    prompt.  One login per hop:
    the first transfer's ssh becomes a master (socket ``<control>.cm-<hash of the hop>``, so two
    models' keys never share one) that later transfers of that hop open sessions on.  AES-GCM
    first (:data:`CIPHERS`)."""
    identity = ("-i", key_file, "-o", "IdentitiesOnly=yes") if key_file else ()
    return shlex.join(("ssh", "-p", str(port), *identity, "-o", "BatchMode=yes",
                       "-o", f"Ciphers={CIPHERS}",
                       "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known_hosts}",
                       "-o", "GlobalKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10",
                       "-o", "ControlMaster=auto", "-o", f"ControlPath={control}.cm-%C",
                       "-o", f"ControlPersist={CONTROL_PERSIST_S}"))  # fmt: skip
