"""Secret sources resolved on the control node; exact messages for bad flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.deploy.secrets import resolve
from launcher.errors import UsageError
from launcher.model import SecretRef

REFS = (SecretRef(name="HF_TOKEN", from_env="HF_TOKEN"),)


def test_playbook_source_and_flag_overrides(tmp_path: Path) -> None:
    f = tmp_path / "tok"
    f.write_text("from-file\n")
    f.chmod(0o600)
    assert resolve(REFS, (), {"HF_TOKEN": "from-env"}) == {"HF_TOKEN": "from-env"}
    assert resolve(REFS, (f"HF_TOKEN=@{f}",), {}) == {"HF_TOKEN": "from-file"}
    assert resolve(REFS, ("HF_TOKEN=env:OTHER",), {"OTHER": "x"}) == {"HF_TOKEN": "x"}


@pytest.mark.parametrize(
    ("flag", "env", "message"),
    [
        ("HF_TOKEN=hf_literal", {}, "--secret HF_TOKEN=...: give @FILE or env:VAR (a value on the command line would show in ps)"),
        ("NOPE=env:X", {}, "--secret NOPE: the playbook declares no such secret"),
        ("1BAD", {}, "--secret '1BAD': not a valid environment variable name"),
        ("HF_TOKEN=@/nonexistent/tok", {}, "secret HF_TOKEN: cannot read /nonexistent/tok: No such file or directory"),
        ("HF_TOKEN", {}, "secret HF_TOKEN: environment variable HF_TOKEN is not set"),
        ("HF_TOKEN", {"HF_TOKEN": ""}, "secret HF_TOKEN: empty value"),
    ],
)
def test_bad_sources(flag: str, env: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError) as err:
        resolve(REFS, (flag,), env)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x89PNG\r\n\x1a\n\xff\xfe", "secret HF_TOKEN: {f} is not UTF-8 text (byte 0); a secret is text"),
        (b"hf_abc\x00def\n", "secret HF_TOKEN: {f} contains a NUL byte, which no env file can carry"),
        (b"\r\n", "secret HF_TOKEN: empty value"),
    ],
)
def test_bad_secret_files(tmp_path: Path, content: bytes, message: str) -> None:
    f = tmp_path / "tok"
    f.write_bytes(content)
    f.chmod(0o600)
    with pytest.raises(UsageError) as err:
        resolve(REFS, (f"HF_TOKEN=@{f}",), {})
    assert str(err.value) == message.format(f=f)


def test_a_crlf_file_leaves_no_carriage_return(tmp_path: Path) -> None:
    f = tmp_path / "tok"
    f.write_bytes(b"hf_abc\r\n")
    f.chmod(0o600)
    assert resolve(REFS, (f"HF_TOKEN=@{f}",), {}) == {"HF_TOKEN": "hf_abc"}


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o644, 0o666])
def test_a_file_group_or_others_may_access_is_refused_as_ssh_refuses_a_private_key(tmp_path: Path, mode: int) -> None:
    """Issue 25 item 7: accepted silently before."""
    f = tmp_path / "tok"
    f.write_text("hf_abc\n")
    f.chmod(mode)
    with pytest.raises(UsageError) as err:
        resolve(REFS, (f"HF_TOKEN=@{f}",), {})
    assert str(err.value) == (f"secret HF_TOKEN: {f} is accessible by group or others (mode {mode:04o}); run chmod 600 "
                              f"{f}, as ssh requires of a private key")  # fmt: skip
    f.chmod(0o400)
    assert resolve(REFS, (f"HF_TOKEN=@{f}",), {}) == {"HF_TOKEN": "hf_abc"}
