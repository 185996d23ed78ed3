"""OpenSSH host certificates, checked against a ``@cert-authority`` key as ``ssh`` checks them.

Contract: :func:`cert_problem` returns None for a certificate (OpenSSH's PROTOCOL.certkeys
format) that is a *host* certificate, names the host among its principals (wildcards allowed;
an empty list names every host), is valid now, has no critical options, is signed by the given
CA key with its signature verifying (checked first), and not by ``ssh-rsa`` (SHA-1, which OpenSSH's default
CASignatureAlgorithms leaves out); otherwise the one-line reason it is refused.  paramiko loads
the certificate a server offers but checks none of this.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from launcher.execute.sshlib import paramiko

CERT_SUFFIX = "-cert-v01@openssh.com"
_HOST_CERT = 2
_FOREVER = 2**64 - 1
# The public-key fields after the nonce, per key type: s = string, m = mpint.
_KEY_FIELDS = {"ssh-ed25519": "s", "ssh-rsa": "mm", "ecdsa-sha2-nistp256": "ss", "ecdsa-sha2-nistp384": "ss",
               "ecdsa-sha2-nistp521": "ss"}  # fmt: skip


def glob_match(pattern: str, text: str) -> bool:
    """OpenSSH's ``match_pattern``: ``*`` and ``?`` wildcards, every other character literal
    (``[127.0.0.1]:22`` is not a character class), case-insensitive.  No backtracking across
    stars: the pieces between stars are found leftmost-first, which is enough for ``*``, so a
    match costs at most len(pattern) x len(text) steps whatever the pattern (a regex of
    ``.*`` runs took seconds for a forged certificate's ``?*?*?*...`` principal)."""
    pieces = pattern.lower().split("*")
    text = text.lower()
    first, last = pieces[0], pieces[-1]
    if len(pieces) == 1:
        return len(text) == len(first) and _piece_at(first, text, 0)
    if len(text) < len(first) + len(last) or not _piece_at(first, text, 0) \
            or not _piece_at(last, text, len(text) - len(last)):  # fmt: skip
        return False
    at, end = len(first), len(text) - len(last)
    for piece in pieces[1:-1]:
        found = next((i for i in range(at, end - len(piece) + 1) if _piece_at(piece, text, i)), None)
        if found is None:
            return False
        at = found + len(piece)
    return True


def _piece_at(piece: str, text: str, at: int) -> bool:
    """Whether ``piece`` (literal characters and ``?``) matches ``text`` at ``at``."""
    return at + len(piece) <= len(text) and all(p in ("?", c) for p, c in zip(piece, text[at : at + len(piece)]))


@dataclass(frozen=True, slots=True, kw_only=True)
class HostCert:
    kind: int  # 1 user, 2 host
    key_id: str
    principals: tuple[str, ...]
    valid_after: int
    valid_before: int
    critical: bytes
    signature_key: bytes  # the CA's public key blob
    signed: bytes  # everything the CA signed
    signature: bytes


def parse_cert(blob: bytes) -> HostCert:
    """The fields of an OpenSSH certificate blob (ValueError if it is not one)."""
    m = paramiko.Message(blob)
    cert_type = m.get_text()
    fields = _KEY_FIELDS.get(cert_type.removesuffix(CERT_SUFFIX))
    if not cert_type.endswith(CERT_SUFFIX) or fields is None:
        raise ValueError(f"not a certificate type fleet knows: {cert_type}")
    m.get_string()  # nonce
    for f in fields:
        m.get_mpint() if f == "m" else m.get_string()
    m.get_int64()  # serial
    kind, key_id = m.get_int(), m.get_text()
    names = paramiko.Message(m.get_string())
    principals: list[str] = []
    while names.get_so_far() != names.asbytes():
        principals.append(names.get_text())
    valid_after, valid_before = m.get_int64(), m.get_int64()
    critical = m.get_string()
    m.get_string()  # extensions: none apply to host certificates
    m.get_string()  # reserved
    signature_key = m.get_string()
    signed = m.get_so_far()
    signature = m.get_string()
    if not signature or m.get_remainder():
        raise ValueError("truncated or trailing data")
    return HostCert(kind=kind, key_id=key_id, principals=tuple(principals), valid_after=valid_after,
                    valid_before=valid_before, critical=critical, signature_key=signature_key,
                    signed=signed, signature=signature)  # fmt: skip


def cert_problem(cert: HostCert, hostname: str, ca: paramiko.PKey, now: float | None = None) -> str | None:
    """Why ``cert`` does not prove ``hostname``'s key under ``ca``, or None (see the contract)."""
    at = int(time.time() if now is None else now)
    # The signature first: nothing a forger wrote (principals, dates) is looked at before it.
    if cert.signature_key != ca.asbytes():
        return "it is not signed by this CA"
    sig_type = paramiko.Message(cert.signature).get_text()
    if sig_type == "ssh-rsa":
        return "the CA signed it with ssh-rsa (SHA-1), which OpenSSH no longer accepts"
    if not ca.verify_ssh_sig(cert.signed, paramiko.Message(cert.signature)):
        return "its signature does not verify with the CA key"
    if cert.kind != _HOST_CERT:
        return "it is a user certificate, not a host certificate"
    if cert.principals and not any(glob_match(p, hostname) for p in cert.principals):
        return f"its principals ({', '.join(cert.principals)}) do not name {hostname}"
    if at < cert.valid_after:
        return f"it is not valid before {_when(cert.valid_after)}"
    if cert.valid_before != _FOREVER and at >= cert.valid_before:
        return f"it expired at {_when(cert.valid_before)}"
    if cert.critical:
        return "it carries critical options, which host certificates do not have"
    return None


def _when(seconds: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))
