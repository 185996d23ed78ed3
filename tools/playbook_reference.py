"""Write docs/playbook-reference.md from the model: every key a playbook may hold, its type,
default and meaning (the dataclass fields and their comments in launcher/model.py), and an
example (the first shipped playbook that sets it, else one made from the type).

    python3 tools/playbook_reference.py > docs/playbook-reference.md

tests/unit/test_docs.py fails when the file is not what this prints.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any, Iterator

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from launcher import model  # noqa: E402 - after the checkout is on the path
from launcher.config.schema import field_hints  # noqa: E402

FILLED = ("path", "source")  # set by fleet, never written
HEADER = """\
# Playbook reference

Generated from `launcher/model.py` by `tools/playbook_reference.py` (do not edit by hand;
`tests/unit/test_docs.py` fails when this file is stale).  A playbook is one YAML mapping; keys are
exactly these names, unknown keys are errors with did-you-mean, and every error names
`file:line:col` and the key path.  Examples are taken from the playbooks shipped in `playbooks/`
where one sets the key.
"""


def _comments(cls: type) -> dict[str, str]:
    """Field name -> its comment in the class source (the comment lines above it, then the one
    on its line)."""
    source = inspect.getsource(cls)
    out: dict[str, str] = {}
    above: list[str] = []
    for line in source.splitlines()[1:]:
        text = line.strip()
        if text.startswith("#"):
            above.append(text.lstrip("# ").rstrip())
            continue
        name = text.split(":", 1)[0].strip()
        inline = ""
        if ":" in text and name.isidentifier():
            inline = text.split("  # ", 1)[1].strip() if "  # " in text else ""
            inline = "" if inline.startswith(("fmt:", "type:", "noqa")) else inline
            out[name] = " ".join(p for p in (*above, inline) if p)
        above = []
    return out


def _strip_none(tp: Any) -> tuple[Any, bool]:
    args = typing.get_args(tp)
    if (typing.get_origin(tp) in (typing.Union, types.UnionType)) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]), True
    return tp, False


def type_name(tp: Any) -> str:
    tp, optional = _strip_none(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        text = " \\| ".join(json.dumps(a) for a in args)
    elif origin in (tuple,):
        text = f"list of {type_name(args[0])}"
    elif origin in (dict, typing.Mapping, __import__("collections.abc").abc.Mapping):
        text = f"mapping {type_name(args[0])} → {type_name(args[1])}"
    elif origin in (typing.Union, types.UnionType):
        text = " or ".join(type_name(a) for a in args)
    elif dataclasses.is_dataclass(tp):
        text = "mapping (below)"
    else:
        text = getattr(tp, "__name__", str(tp))
    return f"{text} or null" if optional else text


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "**required**"
    if dataclasses.is_dataclass(value):
        return "(defaults below)"
    if isinstance(value, typing.Mapping) or isinstance(value, tuple):
        return "`{}`" if isinstance(value, typing.Mapping) and not value else "`[]`" if not value else f"`{value}`"
    return f"`{json.dumps(value)}`"


def _shipped() -> list[Any]:
    return [yaml.safe_load(p.read_text()) for p in sorted(REPO.glob("playbooks/**/*.yaml"))]


# Keys no shipped playbook sets: an example that would pass the loader.
MADE_UP: dict[str, object] = {
    "ports": {"http": 30001}, "overrides.env": {"NCCL_DEBUG": "INFO"},
    "overrides.docker_args": ["--ulimit", "memlock=-1"], "overrides.images.router": "lmsysorg/sglang:v0.5.23-cu130",
    "overrides.images.mooncake_master": "lmsysorg/sglang:v0.5.23-cu130", "overrides.parallelism.dp": 2,
    "overrides.parallelism.ep": 8, "overrides.parallelism.attn_dp": 8, "overrides.parallelism.dcp": 2,
    "rollout.bench_gate.shape": "8k+1k", "rollout.bench_gate.concurrency": 4, "rollout.bench_gate.requests": 32,
    "rollout.bench_gate.threshold_pct": 5.0, "metrics.targets_file": "/etc/prometheus/fleet.d/glm.json",
    "bench.shapes": ["8k+1k"], "bench.concurrency": [1, 4, 16], "bench.slo": "ttft=2000,tpot=50",
    "bench.scale": 0.01, "bench.tokenizer": "fleet-words", "secrets[].from_env": "HF_TOKEN",
    "placement.<single|rank|prefill|decode|router|mooncake-master|gateway>.replicas": 2,
    "kubernetes.namespace": "inference", "kubernetes.rdma_resource": "rdma/hca_shared_devices_a",
    "kubernetes.models_pvc": "models",
}  # fmt: skip


def _found(node: Any, path: tuple[str, ...]) -> Iterator[Any]:
    """The values at ``path`` in a shipped playbook (``<...>`` and ``[]`` parts match every key/item)."""
    if not path:
        yield node
        return
    part, rest = path[0], path[1:]
    key = part.removesuffix("[]")
    items: list[Any] = []
    if part.startswith("<") and isinstance(node, dict):
        items = list(node.values())
    elif isinstance(node, dict) and key in node:
        items = [node[key]]
    if part.endswith("[]"):
        items = [i for lst in items if isinstance(lst, list) for i in lst]
    for item in items:
        yield from _found(item, rest)


def _example(path: tuple[str, ...], tp: Any, shipped: list[Any]) -> str:
    for doc in shipped:
        for value in _found(doc, path):
            if value is not None and not isinstance(value, dict):
                return f"`{json.dumps(value)}`"
    key = ".".join(path)
    if key in MADE_UP:
        return f"`{json.dumps(MADE_UP[key])}`"
    inner, _ = _strip_none(tp)
    if typing.get_origin(inner) is typing.Literal:
        return f"`{json.dumps(typing.get_args(inner)[-1])}`"
    return "(see below)" if _dataclass_of(tp)[0] is not None else ""


def _dataclass_of(tp: Any) -> tuple[type | None, str]:
    """(the dataclass a key holds, how its keys are reached: "" direct, "[]" for a list,
    ".<key>" for a mapping)."""
    inner, _ = _strip_none(tp)
    if dataclasses.is_dataclass(inner):
        return inner, ""  # type: ignore[return-value]
    args = typing.get_args(inner)
    if typing.get_origin(inner) is tuple and args and dataclasses.is_dataclass(args[0]):
        return args[0], "[]"
    if args and dataclasses.is_dataclass(args[-1]):
        key = typing.get_args(args[0])
        return args[-1], (".<" + "|".join(key) + ">") if key else ".<name>"
    return None, ""


def rows(cls: type, prefix: tuple[str, ...], shipped: list[Any]) -> Iterator[tuple[str, ...]]:
    hints, notes = field_hints(cls), _comments(cls)
    nested: list[tuple[type, tuple[str, ...]]] = []
    for f in dataclasses.fields(cls):
        if f.name in FILLED:
            continue
        key = (*prefix, f.name)
        tp = hints[f.name]
        yield (".".join(key), type_name(tp), _default(f), notes.get(f.name, ""), _example(key, tp, shipped))
        sub, via = _dataclass_of(tp)
        if sub is not None:
            nested.append((sub, (*prefix, f.name + via) if via == "[]" else (*prefix, f.name, *([via[1:]] if via else []))))
    for sub, key in nested:
        yield from rows(sub, key, shipped)


def render() -> str:
    shipped = _shipped()
    out = [HEADER, "| key | type | default | meaning | example |", "|---|---|---|---|---|"]
    for key, tp, default, note, example in rows(model.Playbook, (), shipped):
        cells = (f"`{key}`".replace("|", "\\|"), tp, default, note.replace("|", "\\|"), example.replace("|", "\\|"))
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
