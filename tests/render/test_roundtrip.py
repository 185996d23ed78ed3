"""Arbitrary argv tokens and env values survive rendering byte-identical: (a) through a real
shell running the rendered run.sh (``sh`` = dash, as the executor runs it, and bash) with
``docker`` shimmed by a script that dumps its argv and env; (b) through systemd 252's own
parsers (see systemd_ref for exactly what systemd parses here and what is reference code)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import launcher.render as render_mod
from launcher.model import Plan, SecretRef
from launcher.quoting import env_file
from launcher.render import render
from launcher.runtimes import systemd
from launcher.runtimes.container import docker_run_args
from tests.render import factory, systemd_ref

NASTY = (
    "",
    " ",
    "'",
    '"',
    "\\",
    "\\n",
    "$HOME",
    "${HOME}",
    "$$",
    "%n",
    "%%",
    "`id`",
    "$(id)",
    ";rm -rf /",
    "; rm -rf /",
    ";",
    "\\;",
    "-",
    "--",
    "-e",
    "--entrypoint=x",
    "a\nb",
    "\n",
    "trailing\\",
    "tab\there",
    "cr\rlf\n",
    "\x01\x1b[31m\x7f",
    "é漢字🙂",
    "\u200b\u2028\ufeff",
    "a=b",
    "#comment",
    "'\"'\"'",
    '{"json": ["v", 1.5]}',
    "*",
    "~",
    "!event",
)
text = st.one_of(
    st.sampled_from(NASTY),
    st.text(st.characters(codec="utf-8", blacklist_characters="\0"), max_size=24),
    st.lists(st.sampled_from(NASTY), max_size=4).map("".join),
)
env_names = st.from_regex(r"FLEET_T_[A-Z0-9_]{1,6}", fullmatch=True)
argvs = st.lists(text, min_size=1, max_size=8)
envs = st.dictionaries(env_names, text, max_size=6)

# argv and env, NUL-separated (the only byte no argv or env string can hold).
SHIM = """#!/bin/sh
[ "$1" = run ] || exit 1  # stop / rm of a container that does not exist
printf '%s\\0' "$@" > "$FLEET_SHIM_OUT.argv"
/usr/bin/env -0 > "$FLEET_SHIM_OUT.env"
"""


@pytest.fixture(scope="module")
def shim_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("shim")
    (d / "bin").mkdir()
    docker = d / "bin" / "docker"
    docker.write_text(SHIM)
    docker.chmod(0o755)
    return d


@pytest.fixture(scope="module")
def fleet_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("etc-fleet")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(render_mod, "FLEET_ROOT", str(root))
        yield root


def _plan(argv: list[str], env: dict[str, str], secret: str | None) -> Plan:
    secrets = (SecretRef(name="FLEET_T_SECRET", from_env="X"),) if secret is not None else ()
    env = {k: v for k, v in env.items() if k != "FLEET_T_SECRET"}
    return factory.plan(factory.unit(argv=tuple(argv), env=env, secrets=secrets))


def _install(plan: Plan) -> None:
    for host in render(plan, "docker").hosts.values():
        for f in host.files:
            p = Path(f.path)
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(f.content, encoding="utf-8")
            p.chmod(f.mode)


def _run_shell(shell: str, script: str, shim_dir: Path) -> tuple[list[str], dict[str, str]]:
    """(argv, env) the docker shim received."""
    out = shim_dir / "out"
    env = {"PATH": f"{shim_dir / 'bin'}:/usr/bin:/bin", "FLEET_SHIM_OUT": str(out), "LANG": "C.UTF-8"}
    r = subprocess.run([shell, script], env=env, capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    argv = Path(f"{out}.argv").read_bytes().decode("utf-8").split("\0")[:-1]
    pairs = Path(f"{out}.env").read_bytes().decode("utf-8").split("\0")[:-1]
    return argv, dict(p.split("=", 1) for p in pairs)


def _process(docker_argv: list[str], image: str) -> tuple[str, list[str]]:
    """(entrypoint, command args) from a `docker run ...` argv."""
    i = docker_argv.index(image)
    opts = docker_argv[:i]
    return opts[opts.index("--entrypoint") + 1], docker_argv[i + 1 :]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=argvs, env=envs, secret=st.one_of(st.none(), text))
def test_shell_roundtrip(argv: list[str], env: dict[str, str], secret: str | None, shim_dir: Path, fleet_root: Path) -> None:
    plan = _plan(argv, env, secret)
    unit = plan.units[0]
    _install(plan)
    udir = Path(render_mod.unit_dir(plan.deployment, unit.name))
    if secret is not None:
        # The executor writes secrets.env in the same format at deploy time.
        (udir / "secrets.env").write_text(env_file({"FLEET_T_SECRET": secret}), encoding="utf-8")
    for shell in ("sh", "bash"):
        got_argv, got_env = _run_shell(shell, str(udir / "run.sh"), shim_dir)
        assert got_argv == list(docker_run_args(unit, detached=True, render_hash=_hash(plan)))
        assert _process(got_argv, factory.IMAGE) == (argv[0], argv[1:])
        expected = dict(unit.env)
        if secret is not None:
            expected["FLEET_T_SECRET"] = secret
        passed = {got_argv[i + 1] for i, tok in enumerate(got_argv[:-1]) if tok == "-e"}
        assert passed >= set(expected)
        assert {k: got_env.get(k) for k in expected} == expected, shell


def _hash(plan: Plan) -> str:
    return render(plan, "docker").hosts[plan.units[0].host].units[0].render_hash


def test_env_may_set_path(shim_dir: Path, fleet_root: Path) -> None:
    """The container's PATH comes from the env file, yet docker is found on the caller's PATH."""
    plan = _plan(["/bin/x"], {"PATH": "/opt/venv/bin:/nonexistent"}, None)
    _install(plan)
    _, env = _run_shell("sh", str(Path(render_mod.unit_dir("demo", plan.units[0].name)) / "run.sh"), shim_dir)
    assert env["PATH"] == "/opt/venv/bin:/nonexistent"


SD_WORK = Path("/var/tmp") / f"fleet-render-test-{os.getpid()}"


@pytest.fixture(scope="module")
def sd_work() -> Iterator[Path]:
    SD_WORK.mkdir(mode=0o755, exist_ok=True)
    SD_WORK.chmod(0o755)
    try:
        yield SD_WORK
    finally:
        import shutil

        shutil.rmtree(SD_WORK, ignore_errors=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=argvs, env=envs)
def test_systemd_roundtrip(argv: list[str], env: dict[str, str], sd_work: Path) -> None:
    # Docker wrapper unit: the docker argv systemd would exec.
    plan = _plan(argv, env, None)
    unit = plan.units[0]
    host = render(plan, "systemd").hosts[unit.host]
    service = next(f for f in host.files if f.path.endswith(".service"))
    parsed = systemd_ref.parsed_exec(f"{unit.name}.service", service.content, sd_work / "docker")
    exec_start = [systemd_ref.expand_dollars(w) for w in parsed["ExecStart"]]
    assert exec_start == [systemd.SYSTEMD_DOCKER, *docker_run_args(unit, detached=False, render_hash=host.units[0].render_hash)]
    assert _process(exec_start[1:], factory.IMAGE) == (argv[0], argv[1:])
    assert [systemd_ref.expand_dollars(w) for w in parsed["ExecStop"]] == ["/usr/bin/docker", "stop", "-t", "120", unit.name]

    # Native unit: the engine argv itself (argv[0] made absolute, as native units require).
    native = replace(unit, container=None, argv=("/usr/bin/engine", *argv), runtime="systemd")
    nhost = render(factory.plan(native)).hosts[unit.host]
    nservice = next(f for f in nhost.files if f.path.endswith(".service"))
    nparsed = systemd_ref.parsed_exec(f"{unit.name}.service", nservice.content, sd_work / "native")
    assert [systemd_ref.expand_dollars(w) for w in nparsed["ExecStart"]] == ["/usr/bin/engine", *argv]

    # The env file: systemd's env-file grammar gives back every value.
    env_text = next(f for f in host.files if f.path.endswith("/env")).content
    assert systemd_ref.reference_env_file(env_text) == env


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(env=envs)
def test_env_file_reference_matches_systemd(env: dict[str, str], sd_work: Path) -> None:
    """The reference env-file grammar agrees with systemd's own parser (via its environment.d
    generator) on every value the generator does not post-process (no ``$``, not empty)."""
    kept = {k: v for k, v in env.items() if "$" not in v and v != ""}
    text = env_file(kept)
    assert systemd_ref.generator_env(text, sd_work / "gen") == {**{k: v for k, v in systemd_ref.generator_env("", sd_work / "gen0").items()}, **kept}
    assert systemd_ref.reference_env_file(text) == kept


def test_env_file_reference_on_handwritten_syntax(sd_work: Path) -> None:
    """The reference grammar on syntax fleet never writes but systemd accepts, checked against
    systemd itself: double quotes, escapes, blanks, comments, continuation lines."""
    text = (
        "# comment\n"
        "; other comment\n"
        "A =  spaced value  \n"
        'B="dq \\" \\\\ \\x kept"\n'
        "C=esc\\ aped\\\\\n"
        "D=cont\\\nnued\n"
        "E='a'\"b\"'c'\n"
        "F=x'y'\n"
    )
    assert systemd_ref.generator_env(text, sd_work / "hand") == {
        **systemd_ref.generator_env("", sd_work / "hand0"),
        **systemd_ref.reference_env_file(text),
    }
    assert systemd_ref.reference_env_file(text) == {
        "A": "spaced value",
        "B": 'dq " \\ \\x kept',
        "C": "esc aped\\",
        "D": "contnued",
        "E": "abc",
        "F": "x'y'",
    }


def test_env_file_reference_on_nasty_values() -> None:
    env = {f"V{i}": v for i, v in enumerate(NASTY)}
    assert systemd_ref.reference_env_file(env_file(env)) == env
