"""Ansible Vault values (``!vault |`` in YAML), decrypted as ansible-vault decrypts them.

Contract: :func:`decrypt` turns a ``$ANSIBLE_VAULT;1.1;AES256`` (or ``1.2;AES256;<vault-id>``)
envelope into its text with the operator's password, or raises :class:`InputError` at the
value's position (wrong password, damaged envelope, another cipher).  The format is Ansible's
VaultAES256: hex of ``salt\\nhmac\\nciphertext``; PBKDF2-HMAC-SHA256 (10000 rounds) gives the
AES-256-CTR key, the HMAC-SHA256 key and the counter's start; PKCS#7 padding.
:func:`read_password` reads a ``--vault-password-file`` as Ansible does: an executable file is
run and its output is the password, another file's contents are (trailing whitespace stripped).
"""

from __future__ import annotations

import binascii
import hmac
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import hashes, padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

from launcher.config.yamlpos import Vaulted
from launcher.errors import InputError
from launcher.model import Source

HEADER = "$ANSIBLE_VAULT"


@dataclass(frozen=True, slots=True, kw_only=True)
class Password:
    """The vault password and the file it came from (named in errors)."""

    secret: bytes
    path: str


def read_password(path: str) -> Password:
    p = Path(path).expanduser()
    if not p.is_file():
        raise InputError(None, f"vault password file {path}: no such file")
    if os.access(p, os.X_OK):
        proc = subprocess.run([str(p)], capture_output=True, check=False)  # noqa: S603 - the operator's own script
        if proc.returncode != 0:
            tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
            raise InputError(None, f"vault password script {path} failed (exit {proc.returncode}) {tail[0]}".rstrip())
        secret = proc.stdout.strip()
    else:
        secret = p.read_bytes().strip()
    if not secret:
        raise InputError(None, f"vault password file {path} is empty")
    return Password(secret=secret, path=path)


def decrypt(value: Vaulted, password: Password, source: Source, key_path: str) -> str:
    def bad(message: str) -> InputError:
        return InputError(source, message, key_path)

    lines = value.envelope.strip().splitlines()
    header = lines[0].strip().split(";") if lines else []
    if len(header) < 3 or header[0] != HEADER:
        raise bad("!vault value does not start with $ANSIBLE_VAULT;1.1;AES256")
    if header[2].strip() != "AES256":
        raise bad(f"!vault cipher {header[2].strip()!r} is not supported (only AES256)")
    try:
        body = binascii.unhexlify("".join(line.strip() for line in lines[1:]))
        salt, mac, ciphertext = (binascii.unhexlify(part) for part in body.split(b"\n", 2))
    except (binascii.Error, ValueError):
        raise bad("!vault value is damaged (not the hex Ansible writes)") from None
    kdf = PBKDF2HMAC(algorithm=hashes.SHA256(), length=80, salt=salt, iterations=10000)
    material = kdf.derive(password.secret)
    key, mac_key, iv = material[:32], material[32:64], material[64:80]
    expected = hmac.new(mac_key, ciphertext, "sha256").digest()
    if not hmac.compare_digest(expected, mac):
        raise bad(f"!vault value does not decrypt with the password in {password.path}")
    decryptor = Cipher(algorithms.AES(key), modes.CTR(iv)).decryptor()
    padded = decryptor.update(ciphertext) + decryptor.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    try:
        plain = unpadder.update(padded) + unpadder.finalize()
        return plain.decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        raise bad("!vault value decrypts to something that is not UTF-8 text") from None
