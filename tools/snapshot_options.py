"""Snapshot an engine's real argument parser; also drive that parser for tests.

Runs with the python of a parser venv made by tools/parser_venvs.sh (NAME = the venv's name,
e.g. ``sglang-0.5.23``)::

    <venv>/bin/python tools/snapshot_options.py probe NAME   # exit 0 when the parser builds
    <venv>/bin/python tools/snapshot_options.py write NAME [--out DIR]
    <venv>/bin/python tools/snapshot_options.py parse NAME   # stdin: JSON list of argvs
    <venv>/bin/python tools/snapshot_options.py dump NAME    # one build's record, to stdout

``write`` creates ``<DIR>/<engine>-<version>.json`` (DIR defaults to launcher/engines/options).
Actions keep the parser's registration order, because argparse reports ambiguous prefixes and
fills positionals in that order; every mapping is written with sorted keys.
``parse`` prints a JSON list with one ``[accepted, message]`` per argv (message = the parser's
own error text, "" when accepted).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import io
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
OPTIONS_DIR = REPO / "launcher" / "engines" / "options"
FORMAT = 1

# Strings fed to each custom `type=` callable; which ones it accepts tells its kind.
PROBES = (
    "0", "7", "-3", "1.5", "1e3", "abc", "true", "false", "None", "{}", '{"a": 1}', "4k", "",
    "1K", "1Ki", "auto",
)
NULLS = ("None", "")  # what vLLM's optional_type() turns into None


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """What one parser venv holds and which snapshot it produces."""

    engine: str
    version: str
    package: str
    build: Callable[[], argparse.ArgumentParser] | None  # None: not an argparse program
    # The parser the real command line goes through, and what precedes the engine args there
    # (`vllm serve ...` is parsed by the top-level `vllm` parser); None = `build`.
    cli: Callable[[], argparse.ArgumentParser] | None = None
    cli_prefix: tuple[str, ...] = ()
    # What the program runs on the parsed namespace before it starts (vllm-router's
    # RouterArgs.from_cli_args reads the --prefill bootstrap ports); its exceptions fail the launch.
    post: Callable[[argparse.Namespace], object] | None = None
    note: str = ""


def _sglang_parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(parser)
    return parser


VLLM_CLI_ARGS_MODULES = (
    "vllm.entrypoints.common.cli_args",  # 0.33
    "vllm.entrypoints.launchers.cli_args",  # 0.30
    "vllm.entrypoints.openai.cli_args",  # 0.23
)


def _vllm_cli() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """(the `vllm` top-level parser, its `serve` subparser), wired as vllm's cli main does."""
    from vllm import platforms
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    if platforms.current_platform.is_unspecified():
        # 0.23 ignores VLLM_TARGET_DEVICE; its own `vllm bench` entry does the same swap.
        from vllm.platforms.cpu import CpuPlatform

        platforms.current_platform = CpuPlatform()

    make_arg_parser = None
    for module in VLLM_CLI_ARGS_MODULES:  # it moved between releases
        try:
            make_arg_parser = importlib.import_module(module).make_arg_parser
            break
        except ModuleNotFoundError as err:
            if err.name is None or not module.startswith(err.name):
                raise  # the module exists but needs a package the venv lacks
            continue
    if make_arg_parser is None:
        raise SystemExit(f"make_arg_parser is in none of {VLLM_CLI_ARGS_MODULES}")
    top = FlexibleArgumentParser(prog="vllm", description="vLLM CLI")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    serve = subparsers.add_parser("serve", usage="vllm serve [model_tag] [options]")
    return top, make_arg_parser(serve)


def _vllm_target(version: str, engine: str = "vllm", note: str = "") -> Target:
    return Target(
        engine=engine,
        version=version,
        package="vllm",
        build=lambda: _vllm_cli()[1],
        cli=lambda: _vllm_cli()[0],
        cli_prefix=("serve",),
        note=note,
    )


def _router_parser() -> argparse.ArgumentParser:
    from sglang_router.launch_router import RouterArgs

    parser = argparse.ArgumentParser(prog="sglang_router.launch_router")
    RouterArgs.add_cli_args(parser, use_router_prefix=False)
    return parser


def _vllm_router_parser() -> argparse.ArgumentParser:
    """As vllm_router.launch_router.parse_router_args builds it (prog: the console script)."""
    from vllm_router.router_args import RouterArgs

    parser = argparse.ArgumentParser(prog="vllm-router")
    RouterArgs.add_cli_args(parser, use_router_prefix=False)
    return parser


def _vllm_router_post(namespace: argparse.Namespace) -> object:
    from vllm_router.router_args import RouterArgs

    return RouterArgs.from_cli_args(namespace, use_router_prefix=False)


TARGETS: dict[str, Target] = {
    "sglang-0.5.23": Target(engine="sglang", version="0.5.23", package="sglang", build=_sglang_parser),
    "vllm-0.33.0": _vllm_target("0.33.0"),
    "vllm-0.30.0": _vllm_target("0.30.0"),
    "vllm-0.23.0": _vllm_target(
        "0.23.0",
        engine="vllm-ascend",
        note="upstream vLLM 0.23.0 parser standing in for vllm-ascend 0.23, which needs CANN and"
        " torch_npu and cannot be installed here; anything the Ascend plugin changes is not covered",
    ),
    "sglang-router-0.3.2": Target(
        engine="sglang-router", version="0.3.2", package="sglang-router", build=_router_parser
    ),
    "vllm-router-0.1.17": Target(
        engine="vllm-router",
        version="0.1.17",
        package="vllm-router",
        build=_vllm_router_parser,
        post=_vllm_router_post,
    ),
    "mooncake-0.3.13.post1": Target(
        engine="mooncake",
        version="0.3.13.post1",
        package="mooncake-transfer-engine-non-cuda",
        build=None,
    ),
}


def _nargs(action: argparse.Action) -> int | str | None:
    nargs = action.nargs
    if nargs == argparse.SUPPRESS:
        return "==SUPPRESS=="
    return nargs if nargs is None or isinstance(nargs, (int, str)) else str(nargs)


def _accepts(func: Callable[[str], Any], text: str) -> bool:
    try:
        func(text)
    except Exception:  # any failure is a rejection, exactly as argparse treats it
        return False
    return True


def _sglang_int(text: str) -> int:  # SGLang human_readable_int's shape: 4k, 2Gi
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", text.strip())
    return int(float(m.group(1))) if m else int(text)


def _vllm_int(text: str) -> int:  # vLLM human_readable_int's shape: 4k, 2K (binary)
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", text.strip())
    return int(float(m.group(1))) if m else int(text)


def _vllm_int_or_auto(text: str) -> int:
    return -1 if text.strip().lower() == "auto" else _vllm_int(text)


# Kinds argcheck knows how to convert, each with a conversion of the same shape.
_REFERENCE_KINDS: tuple[tuple[str, Callable[[str], Any]], ...] = (
    ("str", str),
    ("int", int),
    ("float", float),
    ("json", json.loads),
    ("int-si-iec", _sglang_int),
    ("int-kmgt", _vllm_int),
    ("int-kmgt-auto", _vllm_int_or_auto),
)


def _returns_none(func: Callable[[str], Any], text: str) -> bool:
    try:
        return func(text) is None
    except Exception:
        return False


def _type_info(action: argparse.Action) -> dict[str, Any]:
    """Kind of the action's `type=` (see _REFERENCE_KINDS), found from what it accepts.

    "optional": "None" and "" become None (vLLM's optional_type).  Unknown conversions are
    kind "other", with the probe strings they accepted.
    """
    func = action.type
    if func is None or func is str:
        return {"kind": "str", "name": "str", "optional": False}
    name = getattr(func, "__name__", repr(func))
    optional = all(_returns_none(func, n) for n in NULLS)  # type: ignore[arg-type]
    probes = tuple(p for p in PROBES if not (optional and p in NULLS))
    accepted = tuple(p for p in probes if _accepts(func, p))  # type: ignore[arg-type]
    for kind, ref in _REFERENCE_KINDS:
        if accepted == tuple(p for p in probes if _accepts(ref, p)):
            return {"kind": kind, "name": name, "optional": optional}
    return {"kind": "other", "name": name, "optional": optional, "accepts": list(accepted)}


def _choices(action: argparse.Action) -> list[Any] | None:
    if action.choices is None:
        return None
    out: list[Any] = []
    for choice in action.choices:
        out.append(choice if isinstance(choice, (str, int, float)) else str(choice))
    return out


def _action_record(action: argparse.Action) -> dict[str, Any]:
    help_text = action.help if isinstance(action.help, str) else ""
    return {
        "option_strings": list(action.option_strings),
        "dest": action.dest,
        "metavar": action.metavar if isinstance(action.metavar, str) else None,
        "action": type(action).__name__,
        "nargs": _nargs(action),
        "takes_value": action.nargs != 0,
        "choices": _choices(action),
        "choices_unordered": False,  # set by _stable()
        "type": _type_info(action),
        "required": bool(action.required),
        "help_suppressed": action.help == argparse.SUPPRESS,
        "deprecated": bool(getattr(action, "deprecated", False))
        or "deprecated" in help_text.lower(),
    }


def _adds_task_hint(parser: argparse.ArgumentParser) -> bool:
    """Whether error() appends vLLM's "--task is not a vllm serve option" hint."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.suppress(SystemExit):
        parser.error("unrecognized arguments: --task x")
    return "Hint: --task" in err.getvalue()


def _parser_record(parser: argparse.ArgumentParser) -> dict[str, Any]:
    index = {id(a): i for i, a in enumerate(parser._actions)}
    groups = [
        {"actions": [index[id(a)] for a in group._group_actions], "required": group.required}
        for group in parser._mutually_exclusive_groups
    ]
    return {
        "task_hint": _adds_task_hint(parser),
        "prog": parser.prog,
        "class": type(parser).__name__,
        "prefix_chars": parser.prefix_chars,
        "allow_abbrev": parser.allow_abbrev,
        "fromfile_prefix_chars": parser.fromfile_prefix_chars,
        "has_negative_number_optionals": bool(parser._has_negative_number_optionals),
        "mutually_exclusive": groups,
        # The parser's own string -> action table, in its order: it can hold strings that the
        # action no longer lists (vLLM's hidden --no-enable-x), and prefix matching scans it.
        "option_string_actions": [
            [string, index[id(a)]] for string, a in parser._option_string_actions.items()
        ],
        "actions": [_action_record(a) for a in parser._actions],
    }


def _gflags_binary() -> Path:
    import mooncake  # the console script is a wrapper; gflags lives in the packaged binary

    return Path(mooncake.__file__).parent / "mooncake_master"


def _mooncake_record() -> dict[str, Any]:
    """Flags (name, gflags type) from the installed mooncake_master's ``--helpfull``."""
    out = subprocess.run(
        [str(_gflags_binary()), "--helpfull"], capture_output=True, text=True, timeout=60, check=False
    )
    # "  Flags from <file>:" heads each section; an entry is "    -name (help...)" and,
    # possibly lines later, "type: T default: D".
    text = re.sub(r"\n\s{6,}", " ", out.stdout + out.stderr)
    flags = []
    for section in re.split(r"^  Flags from ", text, flags=re.M)[1:]:
        source = Path(section.split(":", 1)[0]).name
        for name, kind in re.findall(r"^    -(\w+) \(.*?\) type: (\w+) default:", section, re.M):
            flags.append({"name": name, "type": kind, "defined_in": source})
    if not flags:
        raise SystemExit(f"mooncake_master --helpfull listed no flags: {out.stderr[:300]}")
    return {"flags": sorted(flags, key=lambda f: f["name"])}


SENTINELS = ("--zz_fleet_sentinel_a", "--zz_fleet_sentinel_b")


def _gflags_parse(argv: list[str]) -> tuple[bool, str]:
    """Parse-only run of mooncake_master: unknown sentinel flags placed first make gflags exit 1
    after reporting every error, before the master starts (first, so that no flag can take
    them as its value and a `--` in argv cannot hide them).  Accepted = only they complain."""
    out = subprocess.run(
        [str(_gflags_binary()), *SENTINELS, *argv],
        capture_output=True, text=True, timeout=60, check=False,
    )
    expected = {f"ERROR: unknown command line flag '{s[2:]}'" for s in SENTINELS}
    errors = [line for line in out.stderr.splitlines() if line.startswith("ERROR:")]
    if not expected <= set(errors):
        if "Check failure" in out.stderr:  # the program's own validator aborted the parse
            return False, "failed a flag validator: " + out.stderr.split("] ", 1)[-1].split("\n")[0]
        return False, "exits at parse time (gflags help/version/completion flag); the program would not start"  # gflags' help/version flags print and exit first
    # gflags lists errors by flag name, not argv order: give them all, one per line.
    own = [e.split("; flag description:", 1)[0] for e in errors if e not in expected]
    return not own, "\n".join(own)


def snapshot(name: str) -> dict[str, Any]:
    target = TARGETS[name]
    installed = importlib.metadata.version(target.package)
    if installed != target.version and not installed.startswith(target.version + "+"):
        raise SystemExit(f"{name}: venv has {target.package} {installed}, expected {target.version}")
    record: dict[str, Any] = {
        "format": FORMAT,
        "engine": target.engine,
        "version": target.version,
        "package": target.package,
        "package_version": installed,
        "generated_by": f"<venv {name}>/bin/python tools/snapshot_options.py write {name}",
        "note": target.note,
    }
    if target.build is None:
        record.update(source="gflags-help", syntax="gflags", **_mooncake_record())
    else:
        record.update(source="argparse", syntax="argparse", parser=_parser_record(target.build()))
    return record


def _stable(name: str) -> dict[str, Any]:
    """The snapshot, from two fresh processes: choices whose order differs between them (the
    router's come from a Rust hash map) are sorted and marked unordered."""
    runs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, __file__, "dump", name], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise SystemExit(done.stderr[-3000:])
        runs.append(json.loads(done.stdout))
    first, second = runs
    if first.get("syntax") == "argparse":
        for action, other in zip(first["parser"]["actions"], second["parser"]["actions"]):
            if action["choices"] != other["choices"]:
                action["choices"] = sorted(action["choices"], key=str)
                action["choices_unordered"] = True
    return first


def render(record: dict[str, Any]) -> str:
    return json.dumps(record, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def parse_many(name: str, argvs: list[list[str]]) -> list[tuple[bool, str]]:
    """Run each argv through the real parser; argparse errors become (False, message)."""
    target = TARGETS[name]
    build = target.cli or target.build
    if build is None:
        return [_gflags_parse(argv) for argv in argvs]
    parser = build()
    results: list[tuple[bool, str]] = []
    for argv in argvs:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                namespace = parser.parse_args([*target.cli_prefix, *argv])
                if target.post is not None:
                    target.post(namespace)
        except SystemExit as exc:
            if exc.code == 0:  # --help / --version: printed and exited, nothing launched
                results.append((False, "exited 0 (help/version)"))
                continue
            text = err.getvalue()
            # argparse prints "<usage>\n<prog>: error: <message>\n"
            results.append((False, text.split(": error: ", 1)[-1].removesuffix("\n")))
        except Exception as exc:  # custom actions/types may raise anything; the launch would fail
            results.append((False, f"{type(exc).__name__}: {exc}"))
        else:
            results.append((True, ""))
    return results


def main(argv: list[str]) -> int:
    if os.environ.get("PYTHONHASHSEED") != "0":
        # Engines build some choices lists from sets: pin the hash seed so their order (and
        # so the snapshot and the "choose from" messages) is the same on every run.
        env = dict(os.environ, PYTHONHASHSEED="0")
        os.execve(sys.executable, [sys.executable, __file__, *argv], env)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("command", choices=("probe", "write", "parse", "dump"))
    cli.add_argument("name", choices=sorted(TARGETS))
    cli.add_argument("--out", type=Path, default=OPTIONS_DIR)
    args = cli.parse_args(argv)
    if args.command == "probe":
        snapshot(args.name)
    elif args.command == "write":
        record = _stable(args.name)
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"{record['engine']}-{record['version']}.json"
        path.write_text(render(record), encoding="utf-8")
        print(path)
    else:
        # Engines log to stdout (vLLM's logger holds the stream): keep fd 1 for the JSON only.
        out = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)
        if args.command == "dump":
            out.write(render(snapshot(args.name)))
        else:
            json.dump(parse_many(args.name, json.load(sys.stdin)), out)
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
