"""Plan-time check of an engine's command line against the pinned version's option snapshot.

Contract: :func:`argv_error` returns the one problem the pinned engine's own parser would stop
at (:func:`launcher.engines.argcheck.check_argv`), said for an operator: an unknown flag with
the closest flag of that version (and the versions that have it, among the recorded
snapshots), a flag that version renamed or removed with what replaced it (:data:`RENAMED`), any
other parser error as the parser words it; None when the argv is accepted or no snapshot
exists for the version.  :func:`argv_warnings` says what the parser accepts but an operator
should hear: a flag the version deprecates (with its replacement when known), a version with no
snapshot (the argv then goes unchecked).  :func:`image_warning` compares an image reference's
engine and version with the recipe's pin.  :func:`flag_of` names the flag a problem is about
(the planner blames the file that wrote it).  Pure; snapshots are read once per version.
"""

from __future__ import annotations

import difflib
import re
from typing import Sequence

from launcher.engines import images
from launcher.engines.argcheck import SnapshotNotFound, UnknownCommand, check_argv, known_versions, load_snapshot
from launcher.engines.argcheck import split_command

# Flags an engine version removed or deprecated, and what replaced them (by snapshot name).
# Source: shared/reference/engines.md §0 rows 3-5 (SGLang 0.5.23 source, cross-checked with 0.5.5).
RENAMED: dict[str, dict[str, str]] = {
    "sglang": {
        "--cuda-graph-max-bs": "--cuda-graph-max-bs-decode / --cuda-graph-max-bs-prefill",
        "--cuda-graph-bs": "--cuda-graph-bs-decode / --cuda-graph-bs-prefill",
        "--enable-dp-attention": "--attn-dp-size N",
        "--disable-cuda-graph": "--cuda-graph-backend-decode=disabled --cuda-graph-backend-prefill=disabled",
        "--enable-ep-moe": "--ep-size N",
        "--enable-deepep-moe": "--moe-a2a-backend deepep",
    },
}

_UNRECOGNIZED = "unrecognized arguments: "
_AMBIGUOUS = re.compile(r"^ambiguous option: (--?[^\s=]+)")
_ARGUMENT = re.compile(r"^argument ([^:\s]+)")


def _flags(args: Sequence[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in args if a.startswith("-") and len(a) > 1 and not a[1:2].isdigit()]


def _split(argv: Sequence[str], engine: str) -> tuple[str, tuple[str, ...]] | None:
    """(snapshot name, the program's arguments): ``engine``'s own snapshots where it has some
    (vllm-ascend runs ``vllm serve`` with its own options), else the program's."""
    try:
        program, args = split_command(argv)
    except UnknownCommand:
        return None
    return (engine if known_versions(engine) else program), args


def argv_error(argv: Sequence[str], engine: str, version: str) -> str | None:
    """What the argv of an ``engine`` unit (pinned at ``version``) would be refused for, or None."""
    split = _split(argv, engine)
    if split is None:
        return None
    engine, args = split
    try:
        problems = check_argv(engine, version, args)
    except SnapshotNotFound:
        return None
    renamed = RENAMED.get(engine, {})
    snapshot = load_snapshot(engine, version)
    for flag in _flags(args):
        if flag in renamed and flag not in snapshot.by_string:
            return f"{flag} was removed in {engine} {version}: use {renamed[flag]}"
    if not problems:
        return None
    first = problems[0]
    if first.startswith(_UNRECOGNIZED):
        unknown = [f for f in _flags(first[len(_UNRECOGNIZED) :].split()) if f not in snapshot.by_string]
        if unknown:
            return _unknown(engine, version, unknown[0], tuple(snapshot.by_string))
    return f"{engine} {version} would refuse the command: {first}"


def _unknown(engine: str, version: str, flag: str, known: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
    elsewhere = [v for v in known_versions(engine) if v != version and flag in load_snapshot(engine, v).by_string]
    notes = [f"did you mean {close[0]}?"] if close else []
    if elsewhere:
        notes.append(f"{engine} {', '.join(elsewhere)} {'has' if len(elsewhere) == 1 else 'have'} it")
    return f"{flag} is not an option of {engine} {version}" + (f" ({'; '.join(notes)})" if notes else "")


def flag_of(problem: str) -> str | None:
    """The flag a problem from :func:`argv_error` is about (the first word naming one)."""
    for word in problem.replace("(", " ").split():
        if word.startswith("--"):
            return word.split("=", 1)[0].split("/", 1)[0].rstrip(":,")
    m = _ARGUMENT.search(problem) or _AMBIGUOUS.search(problem)
    return m.group(1).split("/", 1)[0] if m else None


def argv_warnings(argv: Sequence[str], engine: str, version: str) -> tuple[str, ...]:
    """Deprecated flags in ``argv`` and an unchecked version (see the module contract)."""
    split = _split(argv, engine)
    if split is None:
        return ()
    engine, args = split
    try:
        snapshot = load_snapshot(engine, version)
    except SnapshotNotFound:
        versions = ", ".join(known_versions(engine)) or "none"
        return (f"no option snapshot for {engine} {version} (fleet has {versions}): its flags are not checked",)
    out = []
    for flag in dict.fromkeys(_flags(args)):
        option = snapshot.by_string.get(flag)
        if option is not None and option.deprecated:
            instead = RENAMED.get(engine, {}).get(flag)
            out.append(f"{flag} is deprecated in {engine} {version}" + (f": use {instead}" if instead else ""))
    return tuple(out)


_VERSION = re.compile(r"(?<![\d.])v?(\d+\.\d+\.\d+)(?![\d])")
_IMAGE_ENGINES = (("vllm-ascend", "vllm-ascend"), ("sglang", "sglang"), ("vllm", "vllm"))


def image_warning(image: str, engine: str, version: str) -> str | None:
    """The image's engine or version (read from its repository name and tag) against the pin;
    None when they agree or the reference does not say."""
    last = image.split("@", 1)[0].rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    name = images.repository(image).rsplit("/", 1)[-1].lower()
    named = next((e for key, e in _IMAGE_ENGINES if key in name), None)
    if named is not None and named != engine:
        return f"image {image} looks like {named}, but the recipe runs {engine} {version}"
    m = _VERSION.search(tag)
    if named is not None and m is not None and m.group(1) != version:
        return f"image {image} is {named} {m.group(1)}, but the recipe pins {engine} {version}"
    return None
