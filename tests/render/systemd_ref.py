"""Getting systemd 252 itself to parse rendered text, without systemd as PID 1.

* ``Exec*=`` lines: ``systemd --test --system`` (run as an unprivileged user; it refuses root)
  loads the unit with the real unit-file parser (specifiers, quoting, C escapes) and dumps each
  command line, re-escaped C-style.  :func:`parsed_exec` decodes that dump.  The last step,
  ``$$`` -> ``$`` at exec time, is not in the dump; :func:`expand_dollars` applies it as
  systemd.service(5) documents (every ``$`` is rendered doubled, so nothing else expands).
* Env files: the environment.d generator shipped with systemd reads files with the same
  env-file parser that ``EnvironmentFile=`` uses and prints the result, but then expands
  ``$VAR`` and drops empty values (``EnvironmentFile=`` does neither).  :func:`generator_env`
  runs it; :func:`reference_env_file` is the env-file grammar written from the documentation
  (quotes, backslashes, comments, whitespace), checked against the generator on the inputs the
  generator keeps unchanged.

Nothing here runs a unit or needs systemd as PID 1.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

SYSTEMD = "/lib/systemd/systemd"
ENV_GENERATOR = "/usr/lib/systemd/user-environment-generators/30-systemd-environment-d-generator"
NOBODY = 65534

_C_UNESCAPE = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}
STUB_UNITS = {
    # What the rendered units reference, so the dump run loads them without the system's units.
    "docker.service": "[Unit]\nDescription=stub\nDefaultDependencies=no\n[Service]\nExecStart=/bin/true\n",
    "network-online.target": "[Unit]\nDescription=stub\nDefaultDependencies=no\n",
    "multi-user.target": "[Unit]\nDescription=stub\nDefaultDependencies=no\n",
    "sysinit.target": "[Unit]\nDescription=stub\nDefaultDependencies=no\n",
    "basic.target": "[Unit]\nDescription=stub\nDefaultDependencies=no\n",
    "shutdown.target": "[Unit]\nDescription=stub\nDefaultDependencies=no\n",
}


def decode_escaped_words(text: str) -> list[str]:
    """Words as systemd prints them (dump ``Command Line:``, generator output): bare words, or
    double-quoted with backslash escapes (``\\n``, ``\\NNN`` octal, ``\\<c>`` = c)."""
    words: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == " ":
            i += 1
            continue
        if text[i] != '"':
            j = text.find(" ", i)
            j = len(text) if j < 0 else j
            words.append(text[i:j])
            i = j
            continue
        out: list[str] = []
        i += 1
        while text[i] != '"':
            c = text[i]
            if c != "\\":
                out.append(c)
                i += 1
                continue
            nxt = text[i + 1]
            if nxt in _C_UNESCAPE:
                out.append(_C_UNESCAPE[nxt])
                i += 2
            elif nxt in "01234567":
                out.append(chr(int(text[i + 1 : i + 4], 8)))
                i += 4
            else:
                out.append(nxt)
                i += 2
        words.append("".join(out))
        i += 1
    return words


def _unprivileged_dir(path: Path) -> None:
    # systemd --test runs as nobody: every component must be traversable and files readable.
    for p in (path, *path.rglob("*")):
        p.chmod(0o755 if p.is_dir() else 0o644)
    for parent in path.parents:
        if parent == Path("/"):
            break
        if not os.stat(parent).st_mode & 0o001:
            raise RuntimeError(f"{parent} is not traversable by nobody; use a work dir under /var/tmp")


def parsed_exec(unit_name: str, unit_text: str, workdir: Path) -> dict[str, list[str]]:
    """``{"ExecStart": argv, "ExecStop": ..., ...}`` as systemd's own parser reads ``unit_text``
    (before ``$`` expansion)."""
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    for name, text in STUB_UNITS.items():
        (workdir / name).write_text(text)
    (workdir / unit_name).write_text(unit_text, encoding="utf-8")
    _unprivileged_dir(workdir)
    r = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", SYSTEMD, "--test", "--system", f"--unit={unit_name}", "--no-pager"],
        env={"SYSTEMD_UNIT_PATH": str(workdir), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        capture_output=True,
        timeout=60,
    )
    out = r.stdout.decode("utf-8")
    if r.returncode != 0:
        raise AssertionError(f"systemd --test failed ({r.returncode}): {r.stderr.decode(errors='replace')[-2000:]}")
    start = out.find(f"\t-> Unit {unit_name}:\n")
    if start < 0:
        raise AssertionError(f"{unit_name} not in the systemd dump; stderr: {r.stderr.decode(errors='replace')[-2000:]}")
    end = out.find("\t-> Unit ", start + 1)
    section = out[start : end if end > 0 else len(out)]
    found: dict[str, list[str]] = {}
    for m in re.finditer(r"\t\t-> (Exec\w+):\n\t\t\tCommand Line: (.*)\n", section):
        found[m.group(1)] = decode_escaped_words(m.group(2))
    bad = [line for line in r.stderr.decode(errors="replace").splitlines() if unit_name in line]
    if bad:
        raise AssertionError(f"systemd complained about {unit_name}: {bad}")
    return found


def expand_dollars(word: str) -> str:
    """Exec-time variable expansion on a word whose every ``$`` is doubled: ``$$`` -> ``$``."""
    out, i = [], 0
    while i < len(word):
        if word[i] == "$":
            if word[i + 1 : i + 2] != "$":
                raise AssertionError(f"unescaped $ in {word!r}: systemd would expand it")
            out.append("$")
            i += 2
        else:
            out.append(word[i])
            i += 1
    return "".join(out)


def generator_env(env_text: str, workdir: Path) -> dict[str, str]:
    """The env systemd's environment.d generator reads from ``env_text`` (only the names in it)."""
    if workdir.exists():
        shutil.rmtree(workdir)
    (workdir / "environment.d").mkdir(parents=True)
    (workdir / "environment.d" / "50-fleet.conf").write_text(env_text, encoding="utf-8")
    r = subprocess.run([ENV_GENERATOR], env={"XDG_CONFIG_HOME": str(workdir)}, capture_output=True, timeout=30)
    if r.returncode != 0 or r.stderr:
        raise AssertionError(f"generator: rc={r.returncode} {r.stderr.decode(errors='replace')}")
    result: dict[str, str] = {}
    for line in r.stdout.decode("utf-8").split("\n"):
        if not line:
            continue
        name, _, raw = line.partition("=")
        words = decode_escaped_words(raw) if raw.startswith('"') else [raw]
        result[name] = words[0] if words else ""
    return result


def reference_env_file(text: str) -> dict[str, str]:
    """systemd's ``EnvironmentFile=`` grammar (systemd.exec(5)): ``KEY=VALUE`` lines; ``#``/``;``
    comment lines; unquoted values lose leading/trailing blanks and take ``\\`` as an escape
    (backslash-newline continues the line); ``'...'`` is literal; ``"..."`` unescapes only
    ``\\" \\\\ \\` \\$`` (and drops backslash-newline); quoted pieces concatenate; nothing is
    expanded."""
    env: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t\n\r":
            i += 1
        if i >= n:
            break
        if text[i] in "#;":
            while i < n and text[i] not in "\n\r":
                i += 1
            continue
        j = i
        while j < n and text[j] not in "=\n\r":
            j += 1
        if j >= n or text[j] != "=":
            i = j
            continue
        key = text[i:j].rstrip(" \t")
        i = j + 1
        value: list[str] = []
        unquoted_end = 0  # length of value up to its last non-blank unquoted char
        in_unquoted = False
        while i < n and text[i] not in "\n\r":
            c = text[i]
            if not in_unquoted and c == "'":
                k = text.index("'", i + 1)
                value.append(text[i + 1 : k])
                i = k + 1
                unquoted_end = len("".join(value))
            elif not in_unquoted and c == '"':
                i += 1
                while text[i] != '"':
                    if text[i] == "\\":
                        nxt = text[i + 1]
                        if nxt in "\"\\`$":
                            value.append(nxt)
                        elif nxt != "\n":
                            value.append("\\" + nxt)
                        i += 2
                    else:
                        value.append(text[i])
                        i += 1
                i += 1
                unquoted_end = len("".join(value))
            elif not in_unquoted and c in " \t":
                i += 1
            else:
                in_unquoted = True
                if c == "\\":
                    if text[i + 1 : i + 2] not in ("\n", "\r"):
                        value.append(text[i + 1 : i + 2])
                    i += 2
                    unquoted_end = len("".join(value))
                else:
                    value.append(c)
                    i += 1
                    if c not in " \t":
                        unquoted_end = len("".join(value))
        joined = "".join(value)
        env[key] = joined[:unquoted_end] if in_unquoted else joined
    return env
