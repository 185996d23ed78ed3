"""Hostile known_hosts lines and host certificates (issue 25 items 4 and 12).

- A hashed name with a salt of the wrong length (``|1|AAAA|AAAA``) made every connection fail
  with paramiko's ``AssertionError``; OpenSSH skips such a line, and so does fleet now (against a
  real sshd, the line before the host's real one).
- A certificate's principal patterns were matched with a backtracking regex before its signature
  was checked: a forged certificate with ``?*?*...`` stalled every check.  The signature is
  checked first now, and patterns match without backtracking (the bound is checked with
  ``RLIMIT_CPU`` on a child process, not with a clock).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from launcher.execute.hostcert import HostCert, cert_problem, glob_match
from launcher.execute.hostkeys import KnownHosts, names_match
from launcher.execute.sshlib import paramiko
from launcher.execute.ssh import SshConnector

from .sshd import TEST_OPTIONS, Sshd

BAD_SALTS = ("|1|AAAA|AAAA", "|1|AAAA|" + "A" * 28, "|1|" + "A" * 28 + "|AAAA", "|1|%%%|AAAA", "|1|x")


def test_a_hashed_name_with_a_bad_salt_is_skipped_as_openssh_does(fleet: tuple[Sshd, ...], tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("".join(f"{salt} {fleet[0].host_key}\n" for salt in BAD_SALTS) + f"{fleet[0].known_line}\n")
    with SshConnector(KnownHosts((known,), record_to=tmp_path / "rec"), TEST_OPTIONS) as c:
        assert c.connect(fleet[0].host()).run(["true"], timeout=10).ok


def test_names_match_refuses_bad_hashed_fields() -> None:
    for salt in BAD_SALTS:
        assert not names_match(salt, "127.0.0.1")
    good = paramiko.HostKeys.hash_host("127.0.0.1")
    assert names_match(good, "127.0.0.1") and not names_match(good, "127.0.0.2")


def _ca_key(tmp_path: Path) -> paramiko.PKey:
    key = tmp_path / "ca"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(key)], check=True)
    kind, blob = Path(f"{key}.pub").read_text().split()[:2]
    import base64

    return paramiko.PKey.from_type_string(kind, base64.b64decode(blob))


def test_a_forged_certificate_is_refused_for_its_signature_before_its_principals_are_read(tmp_path: Path) -> None:
    ca = _ca_key(tmp_path)
    forged_sig = paramiko.Message()
    forged_sig.add_string("ssh-ed25519")
    forged_sig.add_string(b"\0" * 64)
    cert = HostCert(kind=2, key_id="forged", principals=("?*" * 9,), valid_after=0, valid_before=2**64 - 1,
                    critical=b"", signature_key=ca.asbytes(), signed=b"anything", signature=forged_sig.asbytes())  # fmt: skip
    assert cert_problem(cert, "h.local", ca) == "its signature does not verify with the CA key"


# Each of these took seconds or more with the regex (?*?*... grows several-fold per wildcard).
STALLS = (("?*" * 40, "a" * 39), ("*a" * 30 + "b", "a" * 200), ("*?" * 60 + "!", "x" * 400))
PROBE = """
import resource, sys
from launcher.execute.hostcert import glob_match
resource.setrlimit(resource.RLIMIT_CPU, (2, 3))
print([glob_match(p, t) for p, t in %r])
"""


def test_principal_patterns_match_in_bounded_time() -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE % (STALLS,)], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (0, "[False, False, False]\n"), proc.stderr[-500:]



def _regex(pattern: str, text: str) -> bool:
    """The former matcher: right, but backtracking."""
    rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern.lower())
    return re.fullmatch(rx, text.lower(), re.DOTALL) is not None


@given(st.text("ab*?.A", max_size=8), st.text("abAB.", max_size=10))
def test_glob_match_agrees_with_the_regex_it_replaces(pattern: str, text: str) -> None:
    assert glob_match(pattern, text) == _regex(pattern, text)
