"""``--diff`` of a secrets file: one line per secret name, never a value (issue 16 item 2)."""

from __future__ import annotations

from launcher.deploy.diff import file_diff
from launcher.quoting import env_file

P = "/etc/fleet/d/u/secrets.env"


def env(**values: str) -> bytes:
    return env_file(values).encode()


def test_each_secret_name_says_what_happens_to_it_and_no_value_shows() -> None:
    old = env(A="same\nlines", B="it's old", C="gone $(x)")
    new = env(A="same\nlines", B='it"s new\nsecond', D="fresh")
    out = file_diff("h1", P, old, new, ["it's old", 'it"s new\nsecond'], secrets_file=True)
    assert out == (
        f"h1:{P}: secret A: unchanged\n"
        f"h1:{P}: secret B: changed\n"
        f"h1:{P}: secret C: removed\n"
        f"h1:{P}: secret D: added\n"
    )


def test_a_new_and_a_removed_secrets_file() -> None:
    assert file_diff("h1", P, None, env(A="x"), ["x"], secrets_file=True) == f"h1:{P}: secret A: added\n"
    assert file_diff("h1", P, env(A="x"), None, ["x"], secrets_file=True) == f"h1:{P}: secret A: removed\n"


def test_a_current_file_fleet_did_not_write_counts_as_changed_and_is_not_shown() -> None:
    for old in (b"A='unterminated\nhunter2\n", b"not an assignment hunter2\n", b"\xff\xfehunter2"):
        assert file_diff("h1", P, old, env(A="x"), ["x"], secrets_file=True) == f"h1:{P}: secret A: changed\n"


def test_equal_secrets_files_show_nothing() -> None:
    assert file_diff("h1", P, env(A="x"), env(A="x"), ["x"], secrets_file=True) == ""
