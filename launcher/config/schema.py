"""Positioned YAML nodes → the frozen dataclasses of :mod:`launcher.model`, driven by type hints.

Contract: :func:`decode` accepts exactly what the type says — no silent coercion (``'8'`` is not
an int, ``8`` is not a string, ``true`` is not a number).  Every error is an :class:`InputError`
at the offending node: ``path:line:col: key/path: message``.  Fields named ``source`` are filled
with the node's :class:`Source`; ``given`` supplies fields the loader knows (a recipe's id) and
that therefore must not be written.
"""

from __future__ import annotations

import dataclasses
import functools
import difflib
import importlib
import types
import typing
from collections.abc import Mapping as AbcMapping
from typing import Annotated, Any, Literal, Mapping, TypeVar, Union

from launcher.config.yamlpos import Map, Node, Scalar, Seq, describe, plain, show
from launcher.errors import InputError
from launcher.model import OneOf

T = TypeVar("T")

_NONE: Mapping[str, object] = types.MappingProxyType({})


def join(key_path: str, key: object) -> str:
    return f"{key_path}/{key}" if key_path else str(key)


def did_you_mean(word: str, choices: typing.Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when a close match exists, else ``''``."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def decode(node: Node, cls: Any, key_path: str = "", *, given: Mapping[str, object] = _NONE) -> Any:
    """Build a value of type ``cls`` (a dataclass or any supported annotation) from ``node``."""
    if dataclasses.is_dataclass(cls) and isinstance(cls, type):
        return _dataclass(node, cls, key_path, given)
    return _value(node, cls, key_path)


def decode_as(node: Node, cls: type[T], key_path: str = "", *, given: Mapping[str, object] = _NONE) -> T:
    """:func:`decode` with the result typed as ``cls`` (for dataclasses)."""
    result: T = decode(node, cls, key_path, given=given)
    return result


@functools.cache
def field_hints(cls: type) -> Mapping[str, Any]:
    """The resolved field types of a dataclass (cached: resolving them costs ~0.7 ms, once per
    inventory host otherwise), a registry's name (:class:`~launcher.model.OneOf`) read as the
    ``Literal`` of the names registered."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return types.MappingProxyType({name: _registered(tp) for name, tp in hints.items()})


def _registered(tp: Any) -> Any:
    """``tp`` with every ``Annotated[str, OneOf(registry)]`` in it replaced by the ``Literal`` of
    that registry's names (other annotations dropped, as without ``include_extras``)."""
    origin, args = _origin(tp), typing.get_args(tp)
    if origin is Annotated:
        one = next((m for m in tp.__metadata__ if isinstance(m, OneOf)), None)
        if one is None:
            return _registered(args[0])
        return Literal[tuple(importlib.import_module(one.registry).names())]
    if origin in (Union, types.UnionType):
        return Union[tuple(_registered(a) for a in args)]
    if origin in (tuple, dict, AbcMapping):
        return origin[tuple(_registered(a) if a is not Ellipsis else a for a in args)]
    return tp


def _dataclass(node: Node, cls: type, key_path: str, given: Mapping[str, object]) -> Any:
    if not isinstance(node, Map):
        raise InputError(node.source, f"should be a mapping, got {describe(node)}", key_path)
    hints = field_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    writable = [n for n in fields if n != "source" and n not in given]
    values: dict[str, object] = dict(given)
    for knode, vnode in node.items:
        key = knode.value
        if not isinstance(key, str):
            raise InputError(knode.source, f"keys should be strings, got {show(key)}", key_path)
        if key == "source" and "source" in fields:
            raise InputError(knode.source, "unknown key 'source' (fleet fills it in)", key_path)
        if key in given:
            raise InputError(knode.source, f"key {key!r} is set by fleet, not written in the file", key_path)
        if key not in fields:
            raise InputError(knode.source, f"unknown key {show(key)}{did_you_mean(key, writable)}", key_path)
        values[key] = decode(vnode, hints[key], join(key_path, key))
    missing = [
        n
        for n in writable
        if n not in values
        and fields[n].default is dataclasses.MISSING
        and fields[n].default_factory is dataclasses.MISSING
    ]
    if missing:
        names = ", ".join(repr(m) for m in missing)
        plural = "s" if len(missing) > 1 else ""
        raise InputError(node.source, f"missing required key{plural} {names}", key_path)
    if "source" in fields:
        values["source"] = node.source
    return cls(**values)


def _origin(tp: Any) -> Any:
    return typing.get_origin(tp)


def expects(tp: Any) -> str:
    """What a type asks for, in words: 'an integer', "one of 'a', 'b'", 'a list'."""
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    if tp is type(None):
        return "null"
    origin = _origin(tp)
    if origin is Literal:
        args = typing.get_args(tp)
        return show(args[0]) if len(args) == 1 else "one of " + ", ".join(show(a) for a in args)
    if origin in (Union, types.UnionType):
        # null is always allowed where a union has it; naming it only lengthens the message
        return " or ".join(expects(a) for a in typing.get_args(tp) if a is not type(None))
    if origin is tuple:
        return "a list"
    if dataclasses.is_dataclass(tp) or origin in (dict, AbcMapping) or tp is dict:
        return "a mapping"
    return "a value"


def _value(node: Node, tp: Any, key_path: str) -> Any:
    if tp is Any or tp is object:
        return plain(node)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass(node, tp, key_path, _NONE)
    origin = _origin(tp)
    if origin in (Union, types.UnionType):
        return _union(node, tp, key_path)
    if origin is tuple:
        args = typing.get_args(tp)
        if not (len(args) == 2 and args[1] is Ellipsis):
            raise TypeError(f"unsupported tuple type {tp}")
        if isinstance(node, Scalar) and node.loose and isinstance(node.value, str):
            # An INI vars value cannot hold a list: comma-separated text stands in for one.
            parts = [p.strip() for p in node.value.split(",") if p.strip()]
            node = Seq(items=tuple(Scalar(value=p, source=node.source) for p in parts), source=node.source)
        if not isinstance(node, Seq):
            raise InputError(node.source, f"should be a list, got {describe(node)}", key_path)
        return tuple(_value(item, args[0], join(key_path, i)) for i, item in enumerate(node.items))
    if origin in (dict, AbcMapping):
        ktype, vtype = typing.get_args(tp)
        if not isinstance(node, Map):
            raise InputError(node.source, f"should be a mapping, got {describe(node)}", key_path)
        out: dict[Any, Any] = {}
        for knode, vnode in node.items:
            key = _value(knode, ktype, key_path)
            out[key] = _value(vnode, vtype, join(key_path, key))
        return types.MappingProxyType(out)
    if not isinstance(node, Scalar):
        raise InputError(node.source, f"should be {expects(tp)}, got {describe(node)}", key_path)
    return _scalar(node, tp, key_path)


def _scalar(node: Scalar, tp: Any, key_path: str) -> Any:
    v = node.value
    if node.loose and isinstance(v, str):
        v = _loosen(v, tp)
    ok = False
    if tp is type(None):
        ok = v is None
    elif tp is bool:
        ok = isinstance(v, bool)
    elif tp is int:
        ok = isinstance(v, int) and not isinstance(v, bool)
    elif tp is float:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        if ok:
            v = float(v)  # type: ignore[arg-type]
    elif tp is str:
        ok = isinstance(v, str)
    elif _origin(tp) is Literal:
        ok = any(v == a and type(v) is type(a) for a in typing.get_args(tp))
    else:
        raise TypeError(f"unsupported type {tp}")
    if not ok:
        raise InputError(node.source, f"should be {expects(tp)}, got {describe(node)}", key_path)
    return v


def _loosen(text: str, tp: Any) -> object:
    """Read untyped INI text as ``tp`` where it plainly is one (``'8'`` → 8); else leave it."""
    t = text.strip()
    if tp is int and (t.isdigit() or (t[:1] == "-" and t[1:].isdigit())):
        return int(t)
    if tp is float:
        try:
            return float(t)
        except ValueError:
            return text
    if tp is bool and t.lower() in ("true", "false", "yes", "no"):
        return t.lower() in ("true", "yes")
    return text


def _union(node: Node, tp: Any, key_path: str) -> Any:
    members = typing.get_args(tp)
    if isinstance(node, Scalar) and node.value is None and type(None) in members:
        return None
    candidates = [m for m in members if m is not type(None)]
    if len(candidates) == 1:
        return _value(node, candidates[0], key_path)
    for member in candidates:
        try:
            return _value(node, member, key_path)
        except InputError:
            continue
    raise InputError(node.source, f"should be {expects(tp)}, got {describe(node)}", key_path)
