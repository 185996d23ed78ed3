"""Check an engine argv against the engine's recorded option snapshot, as its own parser would.

Snapshots (``options/<engine>-<version>.json``) are generated from the engines' real parsers by
tools/snapshot_options.py.  argparse snapshots are checked with CPython 3.11 argparse semantics
(the python the snapshots were taken with): ``--opt=value`` and ``--opt value``, unique-prefix
abbreviations (ambiguous ones are errors), ``-xVALUE`` short forms, nargs, type conversion,
choices, mutually exclusive groups, required options and positionals.  vLLM's
FlexibleArgumentParser additions (``--opt_name``, ``--json-opt.key value``) are applied first.
gflags snapshots (mooncake_master) get gflags semantics.

Contract: ``check_argv`` returns the problems, empty when the real parser would accept the argv.
The first problem is the one the real parser reports (it stops there); later ones are what it
would report once the earlier ones are fixed, as far as that can be told.

Not modelled (accepted as long as argparse itself would accept them): what an engine-specific
``type=`` (snapshot kind "other", e.g. vLLM's dataclass-validated JSON configs) or a custom
Action class checks beyond the strings the snapshot recorded verdicts for, and the contents of
vLLM's ``--config FILE``.  Parse-level only: the engines' post-parse validation is not run, except
vllm-router's reading of ``--prefill URL [BOOTSTRAP_PORT]`` ports, which its launcher does
before the router starts (``RouterArgs.from_cli_args``; a bad port fails the launch).

Pure stdlib and free of launcher imports: the sandbox stand-in copies this one file into its
image and imports it on its own, pointing ``FLEET_ENGINE_OPTIONS`` at a copy of the snapshots.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Any, Mapping, Sequence

__all__ = [
    "Option",
    "Snapshot",
    "SnapshotNotFound",
    "UnknownCommand",
    "check_argv",
    "known_versions",
    "load_snapshot",
    "split_command",
]

_OPTIONS_ENV = "FLEET_ENGINE_OPTIONS"
# Must equal tools/snapshot_options.py PROBES: "other" types recorded their verdicts on these.
_PROBES = (
    "0", "7", "-3", "1.5", "1e3", "abc", "true", "false", "None", "{}", '{"a": 1}', "4k", "",
    "1K", "1Ki", "auto",
)
_NULLS = ("None", "")
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_SI_IEC_INT = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")
_KMGT_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_OPTIONAL, _ZERO_OR_MORE, _ONE_OR_MORE = "?", "*", "+"
_REMAINDER, _PARSER, _SUPPRESS = "...", "A...", "==SUPPRESS=="
_GFLAGS_TRUE = frozenset({"true", "t", "yes", "y", "1"})
_GFLAGS_FALSE = frozenset({"false", "f", "no", "n", "0"})
# gflags' own --help*/--version and tab-completion flags: they print and exit at parse time.
_GFLAGS_EXITING = frozenset({"gflags_reporting.cc", "gflags_completions.cc"})
_GFLAGS_EXIT = "exits at parse time (gflags help/version/completion flag); the program would not start"


class SnapshotNotFound(LookupError):
    """No snapshot for the asked engine/version; the message lists the known versions."""


class UnknownCommand(ValueError):
    """split_command was given a command that starts no known engine."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Option:
    """One parser action (argparse) or flag (gflags: strings == ("--name",), dest == name)."""

    strings: tuple[str, ...]  # option strings in registration order; () for a positional
    dest: str
    metavar: str | None
    action: str  # argparse Action class name; gflags: the source file that defines the flag
    nargs: int | str | None
    choices: tuple[Any, ...] | None
    # argparse: str int float json int-si-iec (SGLang 4k/2Gi) int-kmgt[-auto] (vLLM 4k/2K) other;
    # gflags: bool int32 int64 uint32 uint64 double string
    type_kind: str
    type_name: str  # the type's __name__, as argparse names it in "invalid <name> value"
    type_optional: bool  # "None" and "" convert to None (vLLM optional_type)
    type_accepts: tuple[str, ...]  # kind "other": which _PROBES the real type accepted
    required: bool
    deprecated: bool

    @property
    def name(self) -> str:
        """How argparse names the action in its messages."""
        if self.strings:
            return "/".join(self.strings)
        return self.metavar if self.metavar is not None else self.dest


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """A parsed options/<engine>-<version>.json."""

    engine: str
    version: str
    syntax: str  # "argparse" or "gflags"
    source: str  # "argparse", "gflags-help" or "documented"
    note: str
    flexible: bool  # vLLM FlexibleArgumentParser preprocessing applies
    task_hint: bool  # error() appends vLLM's "--task is not a vllm serve option" hint
    prefix_chars: str
    allow_abbrev: bool
    negative_number_options: bool
    options: tuple[Option, ...]
    by_string: Mapping[str, Option]  # registration order, as argparse scans it for prefixes
    exclusive: tuple[tuple[tuple[int, ...], bool], ...]  # (options indices, required) per group

    @property
    def positionals(self) -> tuple[Option, ...]:
        return tuple(o for o in self.options if not o.strings)


# ----------------------------------------------------------------------------- loading


def _options_dir() -> Path:
    env = os.environ.get(_OPTIONS_ENV)
    return Path(env) if env else Path(__file__).with_name("options")


def _version_key(version: str) -> tuple[int | str, ...]:
    parts: list[int | str] = []
    for part in re.split(r"[.+]", version.removeprefix("v")):
        parts.append(int(part) if part.isdigit() else part)
    while len(parts) > 1 and parts[-1] == 0:  # "0.23" names the same release as "0.23.0"
        parts.pop()
    return tuple(parts)


def known_versions(engine: str) -> tuple[str, ...]:
    """Versions with a snapshot for ``engine``, oldest first."""
    found = []
    for path in _options_dir().glob(f"{engine}-*.json"):
        version = path.name[len(engine) + 1 : -len(".json")]
        if version[:1].isdigit():  # "vllm-ascend-0.23.0.json" is not a "vllm" version
            found.append(version)
    return tuple(sorted(found, key=lambda v: tuple(str(p).zfill(8) for p in _version_key(v))))


def load_snapshot(engine: str, version: str) -> Snapshot:
    """The snapshot for ``engine`` at ``version`` ("v0.23" and "0.23.0" name the same release)."""
    wanted = _version_key(version)
    for known in known_versions(engine):
        if _version_key(known) == wanted:
            return _load(engine, known, str(_options_dir()))
    listed = ", ".join(known_versions(engine)) or "none"
    raise SnapshotNotFound(f"no option snapshot for {engine} {version} (known: {listed})")


@lru_cache(maxsize=None)
def _load(engine: str, version: str, directory: str) -> Snapshot:
    raw = json.loads(Path(directory, f"{engine}-{version}.json").read_text(encoding="utf-8"))
    if raw["syntax"] == "gflags":
        flags = tuple(
            Option(
                strings=("--" + f["name"],),
                dest=f["name"],
                metavar=None,
                action=f["defined_in"],
                nargs=0 if f["type"] == "bool" else None,
                choices=None,
                type_kind=f["type"],
                type_name=f["type"],
                type_optional=False,
                type_accepts=(),
                required=False,
                deprecated=False,
            )
            for f in raw["flags"]
        )
        return Snapshot(
            engine=raw["engine"],
            version=raw["version"],
            syntax="gflags",
            source=raw["source"],
            note=raw.get("note", ""),
            flexible=False,
            task_hint=False,
            prefix_chars="-",
            allow_abbrev=False,
            negative_number_options=False,
            options=flags,
            by_string={f.dest: f for f in flags},
            exclusive=(),
        )
    parser = raw["parser"]
    options = tuple(_option(a) for a in parser["actions"])
    by_string = {string: options[i] for string, i in parser["option_string_actions"]}
    return Snapshot(
        engine=raw["engine"],
        version=raw["version"],
        syntax="argparse",
        source=raw["source"],
        note=raw.get("note", ""),
        flexible=parser["class"] == "FlexibleArgumentParser",
        task_hint=parser["task_hint"],
        prefix_chars=parser["prefix_chars"],
        allow_abbrev=parser["allow_abbrev"],
        negative_number_options=parser["has_negative_number_optionals"],
        options=options,
        by_string=by_string,
        exclusive=tuple(
            (tuple(g["actions"]), bool(g["required"])) for g in parser["mutually_exclusive"]
        ),
    )


def _option(a: Mapping[str, Any]) -> Option:
    kind = a["type"]
    return Option(
        strings=tuple(a["option_strings"]),
        dest=a["dest"],
        metavar=a.get("metavar"),
        action=a["action"],
        nargs=a["nargs"],
        choices=None if a["choices"] is None else tuple(a["choices"]),
        type_kind=kind["kind"],
        type_name=kind["name"],
        type_optional=kind["optional"],
        type_accepts=tuple(kind.get("accepts", ())),
        required=a["required"],
        deprecated=a["deprecated"],
    )


# ----------------------------------------------------------------------------- commands

_PYTHON = re.compile(r"python(\d+(\.\d+)?)?$")
_MODULES = {
    "sglang.launch_server": "sglang",
    "sglang_router.launch_router": "sglang-router",
    "vllm_router.launch_router": "vllm-router",
}
_PROGRAMS = {"mooncake_master": "mooncake", "vllm-router": "vllm-router"}  # no subcommand
_SCRIPTS = {
    ("sglang", "serve"): "sglang",
    ("vllm", "serve"): "vllm",
    ("sglang-router", "launch"): "sglang-router",
    ("smg", "launch"): "sglang-router",
}


def split_command(argv: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """Split a full command into (engine, engine arguments).

    Recognised (any directory prefix on the program): ``python[3[.N]] -m sglang.launch_server``,
    ``sglang serve``, ``vllm serve`` (also vllm-ascend's entrypoint), ``python -m
    sglang_router.launch_router``, ``sglang-router launch``, ``smg launch``, ``vllm-router``,
    ``python -m vllm_router.launch_router``, ``mooncake_master``.
    Raises UnknownCommand for anything else.
    """
    if not argv:
        raise UnknownCommand("empty command")
    program = PurePosixPath(argv[0]).name
    if _PYTHON.fullmatch(program) and len(argv) >= 3 and argv[1] == "-m":
        engine = _MODULES.get(argv[2])
        if engine is not None:
            return engine, tuple(argv[3:])
    elif program in _PROGRAMS:
        return _PROGRAMS[program], tuple(argv[1:])
    elif len(argv) >= 2 and (program, argv[1]) in _SCRIPTS:
        return _SCRIPTS[program, argv[1]], tuple(argv[2:])
    raise UnknownCommand(f"not an engine command: {' '.join(argv[:3])}")


# ----------------------------------------------------------------------------- checking


def check_argv(engine: str, version: str, argv: Sequence[str]) -> tuple[str, ...]:
    """Problems the engine's parser would report for ``argv`` (its arguments only); () = accepted.

    Raises SnapshotNotFound when no snapshot exists for engine/version.
    """
    snapshot = load_snapshot(engine, version)
    if snapshot.syntax == "gflags":
        return _check_gflags(snapshot, tuple(argv))
    args = tuple(argv)
    problems: list[str] = []
    if snapshot.flexible:
        args, problems = _flexible(snapshot, args)
    run = _ArgparseRun(snapshot, args)
    problems += run.run()
    if not problems and snapshot.engine == "vllm-router":
        problems += _bootstrap_ports(run.taken.get("prefill", []))
    return tuple(problems)


class _ParseError(Exception):
    """One argparse error (the real parser would exit here)."""


class _TypeError(Exception):
    """A `type=` function's argparse.ArgumentTypeError: its text is the whole message."""


def _convert(option: Option, text: str) -> Any:
    """The option's `type=` applied to text; raises _ParseError with argparse's message."""
    kind = option.type_kind
    if option.type_optional and text in _NULLS:
        return None
    try:
        if kind == "str":
            return text
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if kind == "json":
            return json.loads(text)
        if kind == "int-si-iec":
            return _si_iec_int(text)
        if kind == "int-kmgt":
            return _kmgt_int(text)
        if kind == "int-kmgt-auto":
            value = text.strip()
            return -1 if value == "-1" or value.lower() == "auto" else _kmgt_int(value)
    except _TypeError as err:  # the type's own ArgumentTypeError text
        raise _ParseError(f"argument {option.name}: {err}") from None
    except (TypeError, ValueError):
        raise _ParseError(
            f"argument {option.name}: invalid {option.type_name} value: {text!r}"
        ) from None
    # "other": an engine-specific conversion; only its verdicts on the probe strings are known,
    # and that it takes JSON objects only when those are all it accepted (vLLM's configs).
    rejected = text in _PROBES and text not in option.type_accepts
    if not rejected and option.type_accepts and all(map(_json_object, option.type_accepts)):
        rejected = not _json_object(text)
    if rejected:
        raise _ParseError(f"argument {option.name}: invalid {option.type_name} value: {text!r}")
    return text


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _si_iec_int(text: str) -> int:
    """SGLang's human_readable_int: plain int, or SI (1.5k) / IEC (2Gi) suffixed."""
    value = text.strip()
    m = _SI_IEC_INT.fullmatch(value)
    if m:
        number, suffix = m.groups()
        if suffix in _IEC:
            if "." in number:
                raise _TypeError(
                    f"Decimals are not allowed with IEC suffixes like"
                    f" '{suffix}'. Use an integer IEC value such as '{int(Decimal(number))}{suffix}',"
                    f" or an SI value such as '{number}{suffix[0]}'."
                )
            return int(number) * _IEC[suffix]
        return int(Decimal(number) * _SI[suffix])
    try:
        return int(value)
    except ValueError:
        raise _TypeError(
            f"Invalid integer value: '{value}'. Use a plain integer,"
            " SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). Suffixes are case-sensitive."
        ) from None


def _kmgt_int(text: str) -> int:
    """vLLM's human_readable_int: plain int, or 1.5k (decimal) / 2K (binary) suffixed."""
    value = text.strip()
    m = _KMGT_INT.fullmatch(value)
    if m:
        number, suffix = m.groups()
        if suffix.islower():
            return int(float(number) * _SI[suffix if suffix == "k" else suffix.upper()])
        if "." in number:
            raise _TypeError(
                f"Decimals are not allowed with binary suffixes like"
                f" {suffix}. Did you mean to use {number}{suffix.lower()} instead?"
            )
        return int(number) * _IEC[suffix + "i"]
    return int(value)


class _ArgparseRun:
    """One emulated ``parser.parse_args(args)`` (CPython 3.11 argparse)."""

    def __init__(self, snapshot: Snapshot, args: tuple[str, ...]) -> None:
        self.snap = snapshot
        self.args = args
        self.problems: list[str] = []
        self.seen: set[int] = set()  # indices (in snapshot.options) of the actions taken
        self.extras: list[str] = []
        self.taken: dict[str, list[list[str]]] = {}  # dest -> the values of each occurrence
        self._index = {option: i for i, option in enumerate(snapshot.options)}

    def run(self) -> tuple[str, ...]:
        indices: dict[int, tuple[Option | None, str, str | None]] = {}
        pattern = []
        after_dashdash = False
        for i, arg in enumerate(self.args):
            if after_dashdash:
                pattern.append("A")
            elif arg == "--":
                pattern.append("-")
                after_dashdash = True
            else:
                found = self._classify(arg)
                if found is None:
                    pattern.append("A")
                else:
                    indices[i] = found
                    pattern.append("O")
        self.pattern = "".join(pattern)
        if self.problems:  # ambiguous prefixes: the real parser stops at the first
            return tuple(self.problems)
        self.positionals = list(self.snap.positionals)
        start = 0
        last = max(indices) if indices else -1
        while start <= last:
            next_option = min(i for i in indices if i >= start)
            if start != next_option:
                end = self._consume_positionals(start)
                if end > start:
                    start = end
                    continue
            if start not in indices:
                self.extras.extend(self.args[start:next_option])
                start = next_option
            start = self._consume_optional(start, indices[start])
        stop = self._consume_positionals(start)
        self.extras.extend(self.args[stop:])
        self._check_required()
        if self.extras:
            message = "unrecognized arguments: " + " ".join(self.extras)
            if self.snap.task_hint and _TASK.search(message):  # vLLM's error() adds this hint
                message += (
                    "\n\nHint: --task is not a vllm serve option. For embedding, reranking, or"
                    " reward models, use --runner pooling. To adapt a generative model for"
                    " pooling, also use --convert embed, --convert classify, or --convert reward."
                )
            self.problems.append(message)
        return tuple(self.problems)

    # -- classification (argparse _parse_optional / _get_option_tuples)

    def _classify(self, arg: str) -> tuple[Option | None, str, str | None] | None:
        chars = self.snap.prefix_chars
        if not arg or arg[0] not in chars:
            return None
        if arg in self.snap.by_string:
            return self.snap.by_string[arg], arg, None
        if len(arg) == 1:
            return None
        if "=" in arg:
            string, explicit = arg.split("=", 1)
            if string in self.snap.by_string:
                return self.snap.by_string[string], string, explicit
        matches = self._prefix_matches(arg)
        if len(matches) > 1:
            names = ", ".join(m[1] for m in matches)
            self.problems.append(f"ambiguous option: {arg} could match {names}")
            return None
        if len(matches) == 1:
            return matches[0]
        if _NEGATIVE_NUMBER.match(arg) and not self.snap.negative_number_options:
            return None
        if " " in arg:
            return None
        return None, arg, None

    def _prefix_matches(self, arg: str) -> list[tuple[Option | None, str, str | None]]:
        chars = self.snap.prefix_chars
        found: list[tuple[Option | None, str, str | None]] = []
        if arg[1] in chars:
            if self.snap.allow_abbrev:
                prefix, explicit = arg.split("=", 1) if "=" in arg else (arg, None)
                for string, option in self.snap.by_string.items():
                    if string.startswith(prefix):
                        found.append((option, string, explicit))
        else:
            short, short_explicit = arg[:2], arg[2:]
            for string, option in self.snap.by_string.items():
                if string == short:
                    found.append((option, string, short_explicit))
                elif string.startswith(arg):
                    found.append((option, string, None))
        return found

    # -- consumption

    def _nargs_pattern(self, option: Option) -> str:
        nargs = option.nargs
        if nargs is None:
            pattern = "(-*A-*)"
        elif nargs == _OPTIONAL:
            pattern = "(-*A?-*)"
        elif nargs == _ZERO_OR_MORE:
            pattern = "(-*[A-]*)"
        elif nargs == _ONE_OR_MORE:
            pattern = "(-*A[A-]*)"
        elif nargs == _REMAINDER:
            pattern = "([-AO]*)"
        elif nargs == _PARSER:
            pattern = "(-*A[-AO]*)"
        elif nargs == _SUPPRESS:
            pattern = "(-*-*)"
        else:
            pattern = "(-*%s-*)" % "-*".join("A" * int(nargs))
        if option.strings:
            pattern = pattern.replace("-*", "").replace("-", "")
        return pattern

    def _match_count(self, option: Option, pattern: str) -> int:
        m = re.match(self._nargs_pattern(option), pattern)
        if m is None:
            nargs = option.nargs
            if nargs is None:
                msg = "expected one argument"
            elif nargs == _OPTIONAL:
                msg = "expected at most one argument"
            elif nargs == _ONE_OR_MORE:
                msg = "expected at least one argument"
            else:
                msg = f"expected {nargs} argument" + ("" if nargs == 1 else "s")
            raise _ParseError(f"argument {option.name}: {msg}")
        return len(m.group(1))

    def _consume_optional(self, start: int, found: tuple[Option | None, str, str | None]) -> int:
        option, string, explicit = found
        taken: list[tuple[Option, list[str]]] = []
        stop = start + 1
        try:
            while True:
                if option is None:
                    self.extras.append(self.args[start])
                    return start + 1
                if explicit is not None:
                    count = self._match_count(option, "A")
                    chars = self.snap.prefix_chars
                    if count == 0 and string[1] not in chars and explicit != "":
                        taken.append((option, []))
                        string = string[0] + explicit[0]
                        rest = explicit[1:] or None
                        if string in self.snap.by_string:
                            option, explicit = self.snap.by_string[string], rest
                        else:
                            raise _ParseError(
                                f"argument {option.name}: ignored explicit argument {explicit!r}"
                            )
                    elif count == 1:
                        taken.append((option, [explicit]))
                        break
                    else:
                        raise _ParseError(
                            f"argument {option.name}: ignored explicit argument {explicit!r}"
                        )
                else:
                    count = self._match_count(option, self.pattern[start + 1 :])
                    stop = start + 1 + count
                    taken.append((option, list(self.args[start + 1 : stop])))
                    break
            for option, values in taken:
                self._take(option, values)
        except _ParseError as err:
            # Go on after the values taken (none when they were missing), so that later
            # problems are reported too.
            self.problems.append(str(err))
            self.seen.update(self._index[o] for o, _ in taken)
        return stop

    def _consume_positionals(self, start: int) -> int:
        counts: list[int] = []
        for i in range(len(self.positionals), 0, -1):
            chunk = "".join(self._nargs_pattern(o) for o in self.positionals[:i])
            m = re.match(chunk, self.pattern[start:])
            if m is not None:
                counts = [len(g) for g in m.groups()]
                break
        for option, count in zip(self.positionals, counts):
            values = list(self.args[start : start + count])
            start += count
            try:
                self._take(option, values)
            except _ParseError as err:
                self.problems.append(str(err))
        del self.positionals[: len(counts)]
        return start

    def _take(self, option: Option, values: list[str]) -> None:
        """argparse take_action: convert, check choices and mutual exclusion, record."""
        index = self._index[option]
        self.seen.add(index)
        if option.action in ("_HelpAction", "_VersionAction"):
            raise _ParseError(f"argument {option.name}: prints and exits; the engine would not start")
        if option.nargs not in (_PARSER, _REMAINDER) and "--" in values:
            values.remove("--")
        if option.nargs == 0 or (not values and option.nargs in (_OPTIONAL, _ZERO_OR_MORE)):
            converted: list[Any] = []  # flags and defaults: nothing to convert
        else:
            converted = [_convert(option, v) for v in values]
        for value in converted:
            if option.choices is not None and value not in option.choices:
                choices = ", ".join(repr(c) for c in option.choices)
                raise _ParseError(
                    f"argument {option.name}: invalid choice: {value!r} (choose from {choices})"
                )
        for members, _required in self.snap.exclusive:
            if index in members:
                for other in members:
                    if other != index and other in self.seen:
                        name = self.snap.options[other].name
                        raise _ParseError(f"argument {option.name}: not allowed with argument {name}")
        self.taken.setdefault(option.dest, []).append(values)

    def _check_required(self) -> None:
        options = self.snap.options
        missing = [o.name for i, o in enumerate(options) if o.required and i not in self.seen]
        if missing:
            self.problems.append("the following arguments are required: " + ", ".join(missing))
        for members, required in self.snap.exclusive:
            if required and not any(i in self.seen for i in members):
                names = " ".join(options[i].name for i in members)
                self.problems.append(f"one of the arguments {names} is required")


# ----------------------------------------------------------------------------- vllm-router


def _bootstrap_ports(prefills: list[list[str]]) -> list[str]:
    """vllm-router's RouterArgs._parse_prefill_urls: a prefill's second value is a bootstrap port
    (Python ``int``) or ``none`` in any case; values after it are ignored.  The first bad one
    raises before the router starts."""
    for values in prefills:
        if len(values) >= 2 and values[1].lower() != "none":
            try:
                int(values[1])
            except ValueError:
                return [
                    f"ValueError: Invalid bootstrap port: {values[1]}. Must be a number or 'none'"
                ]
    return []


# ----------------------------------------------------------------------------- vLLM


_MODEL_OPTION = re.compile(r"^--model(=.+|$)")
_SERVED_NAME = re.compile(r"^--served[-_]model[-_]name(=.+|$)")
_CONFIG_OPTION = re.compile(r"^--config(=.+|$)")
_OPTION_KEY = re.compile(r"(?<=--)[^\.]*")  # from the first "--" up to the first "."
_TASK = re.compile(r"(^|\s)--task(=|\s|$)")
_MISSING_VALUE = "IndexError: list index out of range"  # what vLLM's rewriting raises


def _flexible(snapshot: Snapshot, args: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """vLLM FlexibleArgumentParser.parse_args's rewriting of ``vllm serve`` args, before argparse.

    ``--model M`` moves to the front as the positional; ``--key_name`` becomes ``--key-name``;
    ``-O3``/``-O 3`` become ``--optimization-level 3``; ``--cfg.a.b v`` (``+`` appends to a list)
    are gathered into one ``--cfg '{"a": {"b": v}}'`` at the end.  ``--config FILE`` is not
    read: its contents are not checked.  Returns (rewritten args, problems that stop the parse).
    """
    out = list(args)
    at = next((i for i, a in enumerate(out) if _MODEL_OPTION.match(a)), None)
    if at is not None:
        if out[at] == "--model":
            if at + 1 >= len(out):
                return (), [_MISSING_VALUE]
            tag, rest = out[at + 1], at + 2
        else:
            tag, rest = out[at].removeprefix("--model="), at + 1
        out = [tag, *out[:at], *out[rest:]]
    if (
        out
        and out[0].startswith("-")
        and not any(_CONFIG_OPTION.match(a) for a in out)
        and any(_SERVED_NAME.match(a) for a in out)
    ):
        return (), [
            "ValueError: `model` should be provided as the first positional argument when using"
            " `vllm serve`. i.e. `vllm serve <model> --<arg> <value>`."
        ]
    renamed: list[str] = []
    for i, arg in enumerate(out):
        if arg.startswith("--help="):
            renamed.append("--help")
        elif arg.startswith("--"):
            name, eq, tail = arg.partition("=")
            dashed = _OPTION_KEY.sub(lambda m: m.group(0).replace("_", "-"), name, count=1)
            renamed.append(dashed + eq + tail)
        elif arg.startswith("-O") and arg != "-O":
            renamed += ["--optimization-level", arg[3:] if arg[2] == "=" else arg[2:]]
        elif arg == "-O" and i + 1 < len(out) and out[i + 1] in {"0", "1", "2", "3"}:
            renamed.append("--optimization-level")
        else:
            renamed.append(arg)
    dotted: dict[str, dict[str, Any]] = {}
    dropped: set[int] = set()
    for i, arg in enumerate(renamed):
        if i in dropped or not arg.startswith("-") or "." not in arg:
            continue
        if "=" in arg:
            arg, text = arg.split("=", 1)
            if "." not in arg:
                continue
        elif i + 1 < len(renamed):
            text = renamed[i + 1]
            dropped.add(i + 1)
        else:
            return (), [_MISSING_VALUE]
        if arg.endswith("+"):
            arg, text = arg[:-1], json.dumps(text.split(","))
        key, *keys = arg.split(".")
        value: Any
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            try:
                value = _kmgt_int(text)
            except (ValueError, _TypeError):
                value = text
        for part in reversed(keys):
            value = {part: value}
        _merge(dotted.setdefault(key, {}), value)
        dropped.add(i)
    kept = [a for i, a in enumerate(renamed) if i not in dropped]
    for key, tree in dotted.items():
        kept += [key, json.dumps(tree)]
    return tuple(kept), []


def _merge(into: dict[str, Any], update: dict[str, Any]) -> None:
    """vLLM's recursive_dict_update: dicts merge, lists concatenate, anything else replaces."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        elif isinstance(value, list) and isinstance(into.get(key), list):
            into[key] += value
        else:
            into[key] = value


# ----------------------------------------------------------------------------- gflags


def _check_gflags(snapshot: Snapshot, args: tuple[str, ...]) -> tuple[str, ...]:
    """gflags ParseCommandLineFlags: exact names (``-`` read as ``_``), ``--name=v`` or
    ``--name v`` (the next argument, whatever it is), ``--noBOOL``; arguments that are not
    flags are left to the program; ``--`` ends the flags.  gflags keeps one error per flag (the
    last) and prints them ordered by flag name, so the order here is not gflags' order."""
    problems: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            break
        if not arg.startswith("-") or arg == "-":
            continue
        body = arg[2:] if arg.startswith("--") else arg[1:]
        name, _, value = body.partition("=")
        has_value = "=" in body
        flag = snapshot.by_string.get(name.replace("-", "_"))  # gflags reads - as _
        if flag is None and name.startswith("no"):
            negated = snapshot.by_string.get(name[2:].replace("-", "_"))
            if negated is not None:  # --noFLAG: false, whatever "=value" follows
                if negated.type_kind != "bool":
                    problems[negated.dest] = (
                        f"ERROR: boolean value ({name}) specified for {negated.type_kind}"
                        " command line flag"
                    )
                continue
        if flag is None:
            problems[name] = f"ERROR: unknown command line flag '{name}'"
            continue
        if flag.action in _GFLAGS_EXITING:
            problems[flag.dest] = _GFLAGS_EXIT
            continue
        if flag.type_kind == "bool":
            if has_value and value.lower() not in _GFLAGS_TRUE | _GFLAGS_FALSE:
                problems[flag.dest] = (
                    f"ERROR: illegal value '{value}' specified for bool flag '{flag.dest}'"
                )
            continue
        if not has_value:
            if i >= len(args):
                problems[flag.dest] = f"ERROR: flag '{arg}' is missing its argument"
                continue
            value = args[i]
            i += 1
        if not _gflags_value_ok(flag.type_kind, value):
            problems[flag.dest] = (
                f"ERROR: illegal value '{value}' specified for {flag.type_kind} flag '{flag.dest}'"
            )
    return tuple(problems.values())


_GFLAGS_INT = re.compile(r"\s*[+-]?[0-9]+|0[xX][0-9a-fA-F]+")  # strtol: leading blanks only
_GFLAGS_UINT = re.compile(r" *\s*\+?[0-9]+|0[xX][0-9a-fA-F]+")


def _gflags_value_ok(kind: str, value: str) -> bool:
    """gflags' own value parsing (strtol/strtod must consume the whole value)."""
    if kind == "string":
        return True
    if kind == "double":
        if value != value.rstrip() or "_" in value or not value:
            return False
        try:
            float(value)
        except ValueError:
            try:
                float.fromhex(value)
            except ValueError:
                return False
        return True
    bits = {"int32": 32, "int64": 64, "uint32": 32, "uint64": 64}.get(kind)
    if bits is None:
        return True
    unsigned = kind.startswith("u")
    if not (_GFLAGS_UINT if unsigned else _GFLAGS_INT).fullmatch(value):
        return False
    number = int(value, 16) if value[:2].lower() == "0x" else int(value)
    if unsigned:
        return 0 <= number < 1 << bits
    return -(1 << (bits - 1)) <= number < 1 << (bits - 1)
