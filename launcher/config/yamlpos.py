"""YAML with positions: every mapping, sequence and scalar keeps the :class:`Source` it came from.

Contract: :func:`load_yaml` parses one YAML document with PyYAML's safe rules and returns a tree
of :class:`Scalar`, :class:`Seq` and :class:`Map` nodes.  Duplicate keys, syntax errors, empty
files and multi-document files are :class:`InputError` s with a 1-based ``path:line:col``.
Hostile input is bounded: a file larger than :data:`MAX_FILE_BYTES` is refused before it is
parsed; nesting deeper than :data:`MAX_DEPTH`, an alias inside the node it names, more than
:data:`MAX_VALUES` values (aliases expanded), a value longer than :data:`MAX_SCALAR_CHARS`, a
number longer than :data:`MAX_NUMBER_CHARS` and a value its tag cannot be (``!!int abc``, the
timestamp ``2024-13-45``) are errors at the offending line; each shared node is built once, so
loading stays linear in the file's size.  Error lines show at most :data:`SHOW_CHARS` of a value.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Union

import yaml
from yaml._yaml import CParser
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from launcher.errors import InputError
from launcher.model import Source

MAX_DEPTH = 100  # nested mappings/lists: config files need a handful; the composer recurses
MAX_VALUES = 250_000  # values once aliases are expanded: ~10x a large fleet's inventory
MAX_FILE_BYTES = 1 << 20  # one config file: ~10x a 1000-host inventory (PyYAML reads ~0.3 MB/s)
MAX_SCALAR_CHARS = 65_536  # one value (YAML scalar or INI value)
MAX_NUMBER_CHARS = 64  # one number as written: no host var or option needs more
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


@dataclass(frozen=True, slots=True)
class Vaulted:
    """An Ansible ``!vault`` value as written (its envelope text), not decrypted: only the
    inventory loader decrypts (launcher/config/vault.py); anywhere else it is a wrong type."""

    envelope: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Scalar:
    """A leaf.  ``loose`` marks text with no type of its own (an INI value that stayed a string):
    decoders may read it as the number or boolean a field expects."""

    value: object  # str, int, float, bool, None or Vaulted
    source: Source
    loose: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Seq:
    items: tuple[Node, ...]
    source: Source


@dataclass(frozen=True, slots=True, kw_only=True)
class Map:
    """A mapping; keys are scalars (with their own positions), order as written."""

    items: tuple[tuple[Scalar, Node], ...]
    source: Source

    def get(self, key: str) -> Node | None:
        for k, v in self.items:
            if k.value == key:
                return v
        return None

    def key_node(self, key: str) -> Scalar | None:
        for k, _ in self.items:
            if k.value == key:
                return k
        return None

    def keys(self) -> Iterator[object]:
        return (k.value for k, _ in self.items)


Node = Union[Scalar, Seq, Map]


def describe(node: Node) -> str:
    """How an error message shows what was found: ``'eight'``, ``8``, ``true``, ``null``, ``a list``."""
    if isinstance(node, Seq):
        return "a list"
    if isinstance(node, Map):
        return "a mapping"
    return show(node.value)


SHOW_CHARS = 160  # an error line shows this much of a value, then how long it was


def show(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Vaulted):
        return "a !vault value"
    text = repr(value) if isinstance(value, str) else str(value)
    if len(text) > SHOW_CHARS:
        return f"{text[:SHOW_CHARS]}... ({len(text)} characters)"
    return text


def find(node: Node, path: str) -> Node | None:
    """The node at a ``/``-separated key path (sequence items by index), or None."""
    cur: Node | None = node
    for part in (p for p in path.split("/") if p):
        if isinstance(cur, Map):
            cur = cur.get(part)
        elif isinstance(cur, Seq) and part.isdigit() and int(part) < len(cur.items):
            cur = cur.items[int(part)]
        else:
            return None
    return cur


def plain(node: Node) -> object:
    """The node as plain Python data (dicts, lists, scalars), positions dropped."""
    if isinstance(node, Scalar):
        # A vault value stays encrypted, in the form ansible-inventory --list prints it.
        return {"__ansible_vault": node.value.envelope} if isinstance(node.value, Vaulted) else node.value
    if isinstance(node, Seq):
        return [plain(i) for i in node.items]
    return {k.value: plain(v) for k, v in node.items}


def from_plain(value: object, source: Source, *, loose: bool = False) -> Node:
    """Wrap plain data (e.g. an INI value) as nodes that all point at ``source``."""
    if isinstance(value, (list, tuple)):
        return Seq(items=tuple(from_plain(v, source) for v in value), source=source)
    if isinstance(value, dict):
        return Map(
            items=tuple((Scalar(value=k, source=source), from_plain(v, source)) for k, v in value.items()),
            source=source,
        )
    return Scalar(value=value, source=source, loose=loose)


def _src(path: str, mark: Any) -> Source:
    """``mark``: PyYAML's or libyaml's (same fields), or None."""
    if mark is None:
        return Source(path=path, line=1, col=1)
    return Source(path=path, line=mark.line + 1, col=mark.column + 1)


# libyaml's parser (C, the one Ansible itself uses when present) under PyYAML's composer (Python,
# where the bounds below live): a 10,000-host inventory (743 KB) parses in 1.4 CPU-s instead of
# 3.1 with PyYAML's own parser.  Syntax errors are in libyaml's wording.
class _Loader(Composer, CParser, SafeConstructor, Resolver):
    """libyaml's parser with PyYAML's composer, which bounds nesting and alias expansion (see
    the module contract)."""

    def __init__(self, stream: str, path: str) -> None:
        CParser.__init__(self, stream)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self.path = path
        self.depth = 0
        self.open_anchors: set[str] = set()  # anchors of the collections being composed
        self.sizes: dict[int, int] = {}  # id(node) -> values in it once aliases are expanded
        self.values = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event: Any = self.peek_event()  # libyaml's events: the stubs type them as the base Event
        where = _src(self.path, event.start_mark)
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self.open_anchors:
                raise InputError(where, f"alias *{event.anchor} is inside the node it names (it would never end)")
            node = super().compose_node(parent, index)
            self.values += self.sizes.get(id(node), 1)
            if self.values > MAX_VALUES:
                raise InputError(where, f"aliases expand the document past {MAX_VALUES} values")
            return node
        collection = isinstance(event, yaml.CollectionStartEvent)
        if collection:
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise InputError(where, f"nested more than {MAX_DEPTH} levels deep")
            if event.anchor is not None:
                self.open_anchors.add(event.anchor)
        self.values += 1
        if self.values > MAX_VALUES:
            raise InputError(where, f"more than {MAX_VALUES} values in one document")
        node = super().compose_node(parent, index)
        if collection:
            self.depth -= 1
            self.open_anchors.discard(event.anchor or "")
        if node is not None:
            self.sizes[id(node)] = 1 + sum([self.sizes.get(id(n), 1) for n in _children(node)])
        return node


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


class _Builder:
    """yaml nodes -> positioned nodes; a node reached again through an alias is built once."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.loader = yaml.SafeLoader("")
        self.built: dict[int, Node] = {}

    def build(self, node: yaml.Node) -> Node:
        done = self.built.get(id(node))
        if done is None:
            done = self.built[id(node)] = self._build(node)
        return done

    def _build(self, node: yaml.Node) -> Node:
        src = _src(self.path, node.start_mark)
        if isinstance(node, yaml.ScalarNode):
            if node.tag == "!vault":
                return Scalar(value=Vaulted(str(node.value)), source=src)
            return Scalar(value=self._scalar(node, src), source=src)
        if isinstance(node, yaml.SequenceNode):
            return Seq(items=tuple(self.build(n) for n in node.value), source=src)
        assert isinstance(node, yaml.MappingNode)
        # `<<` merge keys: PyYAML's own flattening; merged-in keys may be overridden, while a key
        # written twice in this mapping is an error.
        written = {id(k) for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge"}
        self.loader.flatten_mapping(node)
        items: dict[object, tuple[Scalar, Node]] = {}
        first: dict[object, Source] = {}
        for knode, vnode in node.value:
            key = self.build(knode)
            if not isinstance(key, Scalar):
                raise InputError(key.source, "mapping keys must be plain values, not a list or mapping")
            try:
                seen = first.get(key.value)
            except TypeError:
                raise InputError(key.source, f"unusable mapping key {show(key.value)}") from None
            if seen is not None:
                raise InputError(key.source, f"duplicate key {show(key.value)} (first at line {seen.line})")
            if id(knode) in written:
                first[key.value] = key.source
            items.pop(key.value, None)
            items[key.value] = (key, self.build(vnode))
        return Map(items=tuple(items.values()), source=src)


    def _scalar(self, node: yaml.ScalarNode, src: Source) -> object:
        """The scalar's value; too long, or text its tag cannot be (``!!int abc``, a
        timestamp ``2024-13-45``), is an ``InputError`` at its position."""
        text: str = node.value
        if len(text) > MAX_SCALAR_CHARS:
            raise InputError(src, f"a value of {len(text)} characters; fleet reads at most {MAX_SCALAR_CHARS}")
        kind = node.tag.rpartition(":")[2]
        if node.tag in _NUMBER_TAGS and len(text) > MAX_NUMBER_CHARS:
            raise InputError(src, f"a number of {len(text)} characters; fleet reads at most {MAX_NUMBER_CHARS}")
        try:
            return self.loader.construct_object(node, deep=True)
        except (ValueError, OverflowError) as err:
            raise InputError(src, f"invalid YAML: {show(text)} is not a valid {kind} ({err})") from None


def _compose(text: str, path: str) -> list[yaml.Node | None]:
    loader = _Loader(text, path)
    try:
        docs: list[yaml.Node | None] = []
        while loader.check_node():
            docs.append(loader.get_node())
        return docs
    finally:
        loader.dispose()


def parse_yaml(text: str, path: str) -> Node | None:
    """Parse ``text`` (named ``path`` in errors); None for an empty document."""
    try:
        docs = _compose(text, path)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        what = err.problem or err.context or "unparsable"
        raise InputError(_src(path, mark), f"invalid YAML: {what}") from None
    except yaml.YAMLError as err:
        raise InputError(Source(path=path, line=1, col=1), f"invalid YAML: {err}") from None
    if len(docs) > 1:
        raise InputError(_src(path, docs[1].start_mark if docs[1] else None), "expected one YAML document, found several")
    if not docs or docs[0] is None:
        return None
    try:
        return _Builder(path).build(docs[0])
    except yaml.MarkedYAMLError as err:  # e.g. a bad !!timestamp met while constructing
        raise InputError(_src(path, err.problem_mark), f"invalid YAML: {err.problem}") from None


def read_text(path: Path) -> str:
    """A config file's text: UTF-8, at most :data:`MAX_FILE_BYTES` (read no further)."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise InputError(None, f"{path}: larger than {MAX_FILE_BYTES} bytes, the most fleet reads from a config file")
        return data.decode("utf-8")
    except FileNotFoundError:
        raise InputError(None, f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(None, f"{path}: is a directory, expected a file") from None
    except UnicodeDecodeError as err:
        raise InputError(None, f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except OSError as err:
        raise InputError(None, f"{path}: cannot read: {err.strerror}") from None


def load_yaml(path: Path | str) -> Node:
    """Parse a YAML file; an empty file is an error."""
    p = Path(path)
    node = parse_yaml(read_text(p), str(path))
    if node is None:
        raise InputError(Source(path=str(path), line=1, col=1), "file is empty")
    return node


def load_mapping(path: Path | str) -> Map:
    """Parse a YAML file whose top level must be a mapping."""
    node = load_yaml(path)
    if not isinstance(node, Map):
        raise InputError(node.source, f"the top level should be a mapping, got {describe(node)}")
    return node
