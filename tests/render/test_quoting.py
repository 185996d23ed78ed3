"""Exact text per target and exact errors for what no target can carry."""

from __future__ import annotations

import pytest

from launcher.quoting import QuotingError, env_file, env_line, shell_join, systemd_exec, systemd_token, systemd_value


@pytest.mark.parametrize(
    "token, text",
    [
        ("plain-token_1.2,a=b:c/d@e+f", "plain-token_1.2,a=b:c/d@e+f"),
        ("", '""'),
        ("a b", '"a b"'),
        ("100%", "100%%"),
        ("$HOME", "$$HOME"),
        ("${X}", '"$${X}"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("back\\slash", '"back\\\\slash"'),
        ("two\nlines\tand\rcr", '"two\\nlines\\tand\\rcr"'),
        ("\x01\x7f", '"\\x01\\x7f"'),
        ("é漢🙂", '"é漢🙂"'),
        (";", '";"'),
        ("'", '"\'"'),
        ('"device=0,1"', '"\\"device=0,1\\""'),
    ],
)
def test_systemd_token(token: str, text: str) -> None:
    assert systemd_token(token) == text


def test_systemd_exec_needs_an_absolute_program() -> None:
    assert systemd_exec(("/usr/bin/docker", "run", "a b")) == '/usr/bin/docker run "a b"'
    with pytest.raises(QuotingError) as err:
        systemd_exec(("docker", "run"))
    assert str(err.value) == "systemd command ('docker',): the program must be an absolute path"


def test_systemd_value_is_one_line_with_specifiers_escaped() -> None:
    assert systemd_value("fleet 100% ready") == "fleet 100%% ready"
    with pytest.raises(QuotingError) as err:
        systemd_value("a\nb")
    assert str(err.value) == "systemd setting 'a\\nb': must be one line"


def test_shell_join_and_env_lines() -> None:
    assert shell_join(("--gpus", '"device=0,1"', "a b", "")) == "--gpus '\"device=0,1\"' 'a b' ''"
    assert env_line("A", "it's $x") == "A='it'\"'\"'s $x'\n"
    assert env_file({"B": "", "A": "1"}) == "A=1\nB=''\n"


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: shell_join(("ok", "nul\0")), "argv[1]: contains a NUL character, which no command line or env file can carry"),
        (lambda: systemd_exec(("/bin/x", "\ud800")), "argv[1]: is not valid Unicode text (lone surrogate)"),
        (lambda: env_line("A", "x\0"), "env A: contains a NUL character, which no command line or env file can carry"),
        (lambda: env_line("1A", "x"), "env name '1A': must match [A-Za-z_][A-Za-z0-9_]*"),
        (lambda: env_line("A-B", "x"), "env name 'A-B': must match [A-Za-z_][A-Za-z0-9_]*"),
        (lambda: env_line("IFS", "x"), "env name 'IFS': is reserved by the shell that loads the env file"),
        (lambda: env_line("BASH_ENV", "x"), "env name 'BASH_ENV': is reserved by the shell that loads the env file"),
    ],
)
def test_errors(call: object, message: str) -> None:
    assert callable(call)
    with pytest.raises(QuotingError) as err:
        call()
    assert str(err.value) == message
