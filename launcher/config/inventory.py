"""Ansible inventories (YAML and INI), read unchanged, resolved the way Ansible resolves them.

Contract: :func:`load_inventory` returns an :class:`Inventory` whose hosts, group membership and
merged variables equal what ``ansible-inventory -i FILE --list`` reports: host ranges,
``children``, ``group_vars/`` and ``host_vars/`` beside the file, the implicit ``ungrouped``
group and Ansible's variable precedence (all < groups by depth, ``ansible_group_priority``, name
< group_vars/all < group_vars/<group> < host vars < host_vars/<host>).  Fleet's own host vars
(the :class:`HostSpec` field names) are decoded strictly; an error points at the line the bad
value came from (``ansible_port`` must be a TCP port, ``data_ip`` an IP address, ``gpu_count``
and ``gid_index`` not negative).  A RoCE host without ``gid_index`` gets ``auto`` (read from its
own GID table in facts); a group's numeric ``gid_index`` applies like any var, host over group.  Hosts are in Ansible's ``all`` order: a breadth-first walk of the groups from
``all``, each level in declaration order.  (Ansible takes each level from an unordered set, so
where several groups on one level have children its own order may vary between runs; fleet's
does not.)  INI values are typed as ansible-core 2.19 types them: host-line and ``[group:vars]``
values alike are Python literals where they parse as one, else strings.
"""

from __future__ import annotations

import ast
import dataclasses
import ipaddress
import itertools
import math
import re
import shlex
import string
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable

from launcher.addresses import address_problem, common_args_problem, name_problem, user_problem
from launcher.config.schema import decode, did_you_mean, field_hints, join
from launcher.config.yamlpos import (
    MAX_SCALAR_CHARS, Map, Node, Scalar, Seq, Vaulted, describe, from_plain, parse_yaml, plain, read_text, show,
)
from launcher.errors import InputError
from launcher.model import Group, Host, HostSpec, Inventory, Source

if TYPE_CHECKING:
    from launcher.config.vault import Password  # cryptography: imported when a !vault value is met

_SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(HostSpec))
_INVALID_GROUP_CHARS = re.compile(r"^[\d\W]|[^\w]")


@dataclass(slots=True)
class _Var:
    """One variable as written: its value node and the key path shown in errors."""

    node: Node
    key_path: str


@dataclass(slots=True)
class _Group:
    name: str
    hosts: dict[str, None] = field(default_factory=dict)  # direct members, in order added (a dict: O(1) lookups)
    children: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    vars: dict[str, _Var] = field(default_factory=dict)  # from the inventory file
    file_vars: dict[str, _Var] = field(default_factory=dict)  # from group_vars/
    priority: int = 1


@dataclass(slots=True)
class _Host:
    name: str
    source: Source
    key_path: str
    vars: dict[str, _Var] = field(default_factory=dict)
    file_vars: dict[str, _Var] = field(default_factory=dict)  # from host_vars/


class InventoryData:
    """Ansible's InventoryData, reduced to what resolution needs."""

    def __init__(self) -> None:
        self.groups: dict[str, _Group] = {}
        self.hosts: dict[str, _Host] = {}
        self.add_group("all")
        self.add_group("ungrouped")
        self.add_child("all", "ungrouped", None)

    def add_group(self, name: str) -> _Group:
        if name not in self.groups:
            self.groups[name] = _Group(name=name)
        return self.groups[name]

    def ancestors(self, name: str) -> set[str]:
        return self._reachable(name, lambda g: g.parents)

    def add_child(self, parent: str, child: str, source: Source | None) -> None:
        if parent == child or parent in self.descendants(child):
            raise InputError(source, f"group {child!r} as a child of {parent!r} makes a loop")
        p, c = self.groups[parent], self.groups[child]
        if child not in p.children:
            p.children.append(child)
        if parent not in c.parents:
            c.parents.append(parent)

    def descendants(self, name: str) -> set[str]:
        return self._reachable(name, lambda g: g.children)

    def _reachable(self, name: str, links: Callable[[_Group], list[str]]) -> set[str]:
        """Every group reached from ``name`` by following ``links`` (``name`` only through a loop)."""
        seen: set[str] = set()
        todo = list(links(self.groups[name]))
        while todo:
            g = todo.pop()
            if g not in seen:
                seen.add(g)
                todo.extend(links(self.groups[g]))
        return seen

    def add_host(self, name: str, group: str, port: int | None, source: Source, key_path: str) -> _Host:
        host = self.hosts.get(name)
        if host is None:
            why = name_problem(name)
            if why is not None:
                raise InputError(source, f"should be {why}, got {show(name)}", key_path)
            host = self.hosts[name] = _Host(name=name, source=source, key_path=key_path)
            if port is not None:
                host.vars["ansible_port"] = _Var(Scalar(value=port, source=source), key_path)
        if len(self.hosts) > MAX_HOSTS:
            raise InputError(source, f"more than {MAX_HOSTS} hosts; an inventory holds at most {MAX_HOSTS}", key_path)
        self.groups[group].hosts[name] = None
        return host

    def set_group_var(self, group: str, key: str, node: Node, key_path: str) -> None:
        self.groups[group].vars[key] = _Var(node, key_path)

    def set_host_var(self, host: str, key: str, node: Node, key_path: str) -> None:
        self.hosts[host].vars[key] = _Var(node, key_path)

    def reconcile(self) -> None:
        """Top-level groups become children of ``all``; hosts with no group go to ``ungrouped``
        and leave it once they have another."""
        for name, g in list(self.groups.items()):
            if name != "all" and not g.parents:
                self.add_child("all", name, None)
        ungrouped = self.groups["ungrouped"]
        member = {n for g in self.groups.values() if g.name not in ("all", "ungrouped") for n in g.hosts}
        for name in self.hosts:
            if name in ungrouped.hosts and name in member:
                del ungrouped.hosts[name]
            elif name not in ungrouped.hosts and name not in member:
                ungrouped.hosts[name] = None

    def walk(self, start: str) -> list[str]:
        """``start`` and its descendants, breadth first, each level in declaration order."""
        ordered = [start]
        seen = {start}
        level = [start]
        while level:
            nxt: list[str] = []
            for g in level:
                for c in self.groups[g].children:
                    if c not in seen:
                        seen.add(c)
                        ordered.append(c)
                        nxt.append(c)
            level = nxt
        return ordered

    def group_hosts(self, name: str) -> list[str]:
        out: dict[str, None] = {}
        for g in self.walk(name):
            out.update(self.groups[g].hosts)
        return list(out)

    def depth(self, name: str) -> int:
        """Longest path from ``all``, as Ansible keeps it."""
        parents = self.groups[name].parents
        return 0 if not parents else 1 + max(self.depth(p) for p in parents)


# ---------------------------------------------------------------------------------------------
# host patterns in inventories: ranges and ports
# ---------------------------------------------------------------------------------------------


MAX_HOSTS = 10_000  # per inventory: several times the largest fleet one launcher drives
_NUMBER = re.compile(r"[0-9]{1,18}")


def expand_range(pattern: str, source: Source | None = None, key_path: str = "") -> list[str]:
    """``gpu[01:16]``, ``node[a:c]``, ``x[0:10:2]`` (several ranges allowed) → host names; a
    pattern naming more than :data:`MAX_HOSTS` hosts is refused before any name is made."""

    def bad(msg: str) -> InputError:
        return InputError(source, f"host range {show(pattern)}: {msg}", key_path)

    texts: list[str] = []  # literal text before each range, then the text after the last
    ranges: list[tuple[range | str, int]] = []  # numbers (and their zero-padded width) or letters
    rest = pattern
    while "[" in rest:
        head, _, after = rest.partition("[")
        body, sep, rest = after.partition("]")
        if not sep:
            raise bad("missing ']'")
        texts.append(head)
        ranges.append(_range_items(body, bad))
    texts.append(rest)
    count = math.prod(len(r) for r, _ in ranges)
    if count > MAX_HOSTS:
        raise bad(f"names {count} hosts; an inventory holds at most {MAX_HOSTS}")
    if count == 0:
        return []
    items = [[str(i).zfill(width) for i in r] if isinstance(r, range) else list(r) for r, width in ranges]
    return ["".join(t + i for t, i in zip(texts, (*chosen, ""))) for chosen in itertools.product(*items)]


def _range_items(body: str, bad: Callable[[str], InputError]) -> tuple[range | str, int]:
    """The items of one ``[begin:end(:step)]`` range (``body`` without the brackets)."""
    bounds = body.split(":")
    if len(bounds) not in (2, 3):
        raise bad("should be [begin:end] or [begin:end:step]")
    beg, end = bounds[0] or "0", bounds[1]
    step_text = bounds[2] if len(bounds) == 3 else "1"
    if not end:
        raise bad("needs an end value")
    if not _NUMBER.fullmatch(step_text) or int(step_text) < 1:
        raise bad(f"step should be a positive integer, got {show(step_text)}")
    step = int(step_text)
    width = len(beg) if beg[0] == "0" and len(beg) > 1 else 0
    if width and len(end) != width:
        raise bad("begin and end should have the same number of digits")
    letters = string.ascii_letters
    if beg in letters and end in letters and len(beg) == 1 and len(end) == 1:
        if letters.index(beg) > letters.index(end):
            raise bad("begin should not be after end")
        return letters[letters.index(beg) : letters.index(end) + 1 : step], 0
    if _NUMBER.fullmatch(beg) and _NUMBER.fullmatch(end):
        return range(int(beg), int(end) + 1, step), width
    raise bad("bounds should be numbers or single letters")


def split_port(pattern: str) -> tuple[str, int | None]:
    """``host:2222`` → (host, 2222); brackets hold ranges or an IPv6 address; bare IPv6 has no port."""
    if pattern.startswith("[") and "]:" in pattern and ":" in pattern[1 : pattern.index("]")]:
        addr, _, port = pattern[1:].partition("]:")
        return addr, int(port) if _NUMBER.fullmatch(port) else None
    depth = 0
    colons: list[int] = []
    for i, ch in enumerate(pattern):
        depth += ch == "["
        depth -= ch == "]"
        if ch == ":" and depth == 0:
            colons.append(i)
    if len(colons) == 1 and _NUMBER.fullmatch(pattern[colons[0] + 1 :]):
        return pattern[: colons[0]], int(pattern[colons[0] + 1 :])
    return pattern, None


# ---------------------------------------------------------------------------------------------
# YAML inventories
# ---------------------------------------------------------------------------------------------

_GROUP_KEYS = ("hosts", "children", "vars")


def _parse_yaml_inventory(node: Node, data: InventoryData) -> None:
    if not isinstance(node, Map):
        raise InputError(node.source, f"an inventory's top level should be a mapping of groups, got {describe(node)}")
    for knode, vnode in node.items:
        _yaml_group(data, knode, vnode, "")


def _yaml_group(data: InventoryData, knode: Scalar, node: Node, parent_path: str) -> str:
    name = _name(knode, parent_path, "group")
    kp = join(parent_path, name)
    data.add_group(name)
    if isinstance(node, Scalar) and node.value is None:
        return name
    if not isinstance(node, Map):
        raise InputError(node.source, f"a group should be a mapping of hosts/children/vars, got {describe(node)}", kp)
    for sk, sv in node.items:
        section = sk.value
        if section not in _GROUP_KEYS:
            hint = did_you_mean(str(section), _GROUP_KEYS)
            raise InputError(sk.source, f"unknown key {show(section)} in a group{hint}", kp)
        skp = join(kp, str(section))
        if isinstance(sv, Scalar) and sv.value is None:
            continue
        if isinstance(sv, Scalar) and isinstance(sv.value, str) and section != "vars":
            sv = Map(items=((sv, Scalar(value=None, source=sv.source)),), source=sv.source)
        if not isinstance(sv, Map):
            raise InputError(sv.source, f"should be a mapping, got {describe(sv)}", skp)
        for ik, iv in sv.items:
            if section == "vars":
                var = _name(ik, skp, "variable")
                if var == "ansible_group_priority":  # Ansible keeps it as the group's priority, not a var
                    data.groups[name].priority = _priority(iv, join(skp, var))
                else:
                    data.groups[name].vars[var] = _Var(iv, join(skp, var))
            elif section == "children":
                child = _yaml_group(data, ik, iv, skp)
                data.add_child(name, child, ik.source)
            else:
                pattern = _name(ik, skp, "host")
                host_pattern, port = split_port(pattern)
                if isinstance(iv, Scalar) and iv.value is None:
                    hvars: tuple[tuple[Scalar, Node], ...] = ()
                elif isinstance(iv, Map):
                    hvars = iv.items
                else:
                    raise InputError(iv.source, f"host vars should be a mapping, got {describe(iv)}", join(skp, pattern))
                for host_name in expand_range(host_pattern, ik.source, skp):
                    hkp = join(skp, host_name)
                    host = data.add_host(host_name, name, port, ik.source, hkp)
                    for vk, vv in hvars:
                        var = _name(vk, hkp, "variable")
                        host.vars[var] = _Var(vv, join(hkp, var))
    return name


def _name(knode: Scalar, key_path: str, what: str) -> str:
    if isinstance(knode.value, str) and knode.value:
        return knode.value
    if isinstance(knode.value, (int, float)) and not isinstance(knode.value, bool) and what == "host":
        return str(knode.value)
    raise InputError(knode.source, f"a {what} name should be a string, got {show(knode.value)}", key_path)


def _priority(node: Node, key_path: str) -> int:
    value = plain(node)
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        raise InputError(node.source, f"should be an integer, got {describe(node)}", key_path) from None


# ---------------------------------------------------------------------------------------------
# INI inventories
# ---------------------------------------------------------------------------------------------

_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?$")
_GROUPNAME = re.compile(r"^([^:\]\s]+)\s*(?:#.*)?$")


def _ini_value(text: str, source: Source, key_path: str) -> object:
    """Ansible's INI typing: a Python literal when it is one, else the text.  Longer than
    :data:`MAX_SCALAR_CHARS`: refused (``ast`` would build it whole, per value)."""
    if len(text) > MAX_SCALAR_CHARS:
        raise InputError(source, f"a value of {len(text)} characters; fleet reads at most {MAX_SCALAR_CHARS}", key_path)
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    if value is ... or isinstance(value, (complex, bytes, set)):
        return text if not isinstance(value, set) else sorted(value, key=str)
    if isinstance(value, tuple):
        return list(value)
    return value


def _parse_ini_inventory(text: str, path: str, data: InventoryData) -> None:
    groupname, state = "ungrouped", "hosts"
    pending: dict[str, tuple[str, Source, list[str]]] = {}  # group -> (state, where, parents)
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        col = len(raw) - len(raw.lstrip()) + 1
        src = Source(path=path, line=lineno, col=col)
        if not line or line[0] in "#;":
            continue
        m = _SECTION.match(line)
        if m:
            groupname = _INVALID_GROUP_CHARS.sub("_", m.group(1))
            state = m.group(2) or "hosts"
            if state not in ("hosts", "children", "vars"):
                raise InputError(src, f"section [{m.group(1)}:{state}] has unknown type {state!r} (use hosts, children or vars)")
            if groupname not in data.groups:
                if state == "vars" and groupname not in pending:
                    pending[groupname] = ("vars", src, [])
                data.add_group(groupname)
            if groupname in pending and state != "vars":
                _resolve_pending(data, groupname, pending)
            continue
        if line.startswith("[") and line.endswith("]"):
            raise InputError(src, f"invalid section {show(line)}: no spaces, and only [group], [group:vars] or [group:children]")
        if state == "hosts":
            _ini_host_line(data, raw, line, src, groupname)
        elif state == "vars":
            if "=" not in line:
                raise InputError(src, f"expected key=value, got {show(line)}", f"{groupname}:vars")
            key, value = (p.strip() for p in line.split("=", 1))
            eq = raw.index("=")
            rest = raw[eq + 1 :]
            vsrc = Source(path=path, line=lineno, col=eq + 2 + len(rest) - len(rest.lstrip()))
            kp = f"{groupname}:vars/{key}"
            if key == "ansible_group_priority":
                data.groups[groupname].priority = _priority(_ini_node(value, vsrc, kp), kp)
            else:
                data.groups[groupname].vars[key] = _Var(_ini_node(value, vsrc, kp), kp)
        else:
            cm = _GROUPNAME.match(line)
            if not cm:
                raise InputError(src, f"expected a group name, got {show(line)}", f"{groupname}:children")
            child = cm.group(1)
            if child not in data.groups:
                entry = pending.setdefault(child, ("children", src, []))
                entry[2].append(groupname)
            else:
                data.add_child(groupname, child, src)
    for name, (kind, src, parents) in pending.items():
        if kind == "vars":
            raise InputError(src, f"section [{name}:vars] is for a group that is never defined")
        raise InputError(src, f"section [{parents[-1]}:children] names group {name!r}, which is never defined")


def _resolve_pending(data: InventoryData, group: str, pending: dict[str, tuple[str, Source, list[str]]]) -> None:
    kind, src, parents = pending.pop(group)
    if kind != "children":
        return
    for parent in parents:
        data.add_child(parent, group, src)
        if parent in pending and pending[parent][0] == "children":
            _resolve_pending(data, parent, pending)


def _ini_node(text: str, source: Source, key_path: str) -> Node:
    value = _ini_value(text, source, key_path)
    # Text that stayed text carries no type of its own: HostSpec may read '8' as 8.
    return from_plain(value, source, loose=isinstance(value, str))


def _ini_host_line(data: InventoryData, raw: str, line: str, src: Source, group: str) -> None:
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError as err:
        raise InputError(src, f"cannot parse host line: {err}", group) from None
    pattern, port = split_port(tokens[0])
    if pattern.endswith(":") and port is None:
        raise InputError(src, f"host {show(tokens[0])} ends in ':' (a port must follow)", group)
    pairs: list[tuple[str, Node]] = []
    search_from = raw.find(tokens[0]) + len(tokens[0])
    for token in tokens[1:]:
        if "=" not in token:
            raise InputError(src, f"expected key=value after the host name, got {show(token)}", f"{group}/{pattern}")
        key, value = token.split("=", 1)
        at = raw.find(key + "=", search_from)
        if at >= 0:
            search_from = at + len(key) + 1
        col = at + len(key) + 2 if at >= 0 else src.col
        vsrc = Source(path=src.path, line=src.line, col=col)
        pairs.append((key, from_plain(_ini_value(value, vsrc, f"{group}/{pattern}/{key}"), vsrc)))
    for name in expand_range(pattern, src, group):
        hkp = f"{group}/{name}"
        host = data.add_host(name, group, port, src, hkp)
        for key, node in pairs:  # one node per line, shared by the hosts of a range
            host.vars[key] = _Var(node, f"{hkp}/{key}")


# ---------------------------------------------------------------------------------------------
# group_vars/ and host_vars/
# ---------------------------------------------------------------------------------------------

_VARS_EXTENSIONS = ("", ".yml", ".yaml", ".json")


def _vars_files(base: Path, name: str) -> list[Path]:
    """Ansible's lookup: ``<name>`` (file or directory), then ``<name>.yml|.yaml|.json``; a
    directory is read recursively in sorted order (hidden and ``~`` files skipped)."""
    found: list[Path] = []
    for ext in _VARS_EXTENSIONS:
        p = base / f"{name}{ext}"
        try:
            if p.is_dir():
                found.extend(_dir_files(p))
            elif p.is_file():
                found.append(p)
        except OSError:
            continue  # e.g. a name too long for a file name: it has no vars file
    return found


def _dir_files(d: Path) -> list[Path]:
    out: list[Path] = []
    for p in sorted(d.iterdir(), key=lambda q: q.name):
        if p.name.startswith(".") or p.name.endswith("~"):
            continue
        if p.is_dir() and not p.suffix:
            out.extend(_dir_files(p))
        elif p.is_file() and p.suffix in _VARS_EXTENSIONS:
            out.append(p)
    return out


def _load_vars_files(files: list[Path], base: Path, shown_base: Path) -> dict[str, _Var]:
    """Merge vars files in order; positions are shown under ``shown_base`` (as the inventory
    path was given) rather than as absolute paths."""
    merged: dict[str, _Var] = {}
    for p in files:
        node = parse_yaml(read_text(p), str(shown_base / p.relative_to(base)))
        if node is None:
            continue
        if not isinstance(node, Map):
            raise InputError(node.source, f"a vars file should be a mapping, got {describe(node)}")
        for k, v in node.items:
            var = _name(k, "", "variable")
            merged[var] = _Var(v, var)
    return merged


# ---------------------------------------------------------------------------------------------
# resolution
# ---------------------------------------------------------------------------------------------


def load_inventory(path: Path | str, password: Password | None = None) -> Inventory:
    """Read an Ansible inventory file (YAML or INI, detected as Ansible does: by parsing);
    ``password`` decrypts the ``!vault`` values fleet reads (launcher/config/inventory_sources.py
    reads directories, several sources, host lists and inventory scripts)."""
    data = InventoryData()
    parse_file(data, Path(path), str(path))
    data.reconcile()
    add_vars_dirs(data, Path(path).parent, Path(str(path)).parent)
    return resolve(data, str(path), password)


def parse_file(data: InventoryData, p: Path, shown: str) -> None:
    """Add one YAML or INI inventory file to ``data`` (positions shown under ``shown``): YAML by
    its suffix; a file without one is YAML when it parses as a YAML mapping, as Ansible's yaml
    plugin takes it before the ini plugin (``hosts`` files are usually INI)."""
    text = read_text(p)
    if p.suffix in (".yaml", ".yml", ".json"):
        node = parse_yaml(text, shown)
        if node is None:
            raise InputError(Source(path=shown, line=1, col=1), "inventory is empty")
        _parse_yaml_inventory(node, data)
        return
    if not p.suffix:
        try:
            node = parse_yaml(text, shown)
        except InputError:
            node = None  # not YAML: INI
        if isinstance(node, Map):
            _parse_yaml_inventory(node, data)
            return
    _parse_ini_inventory(text, shown, data)


def add_vars_dirs(data: InventoryData, base: Path, shown_base: Path) -> None:
    """``group_vars/`` and ``host_vars/`` under ``base``, over those of earlier sources."""
    for name, g in data.groups.items():
        g.file_vars.update(_load_vars_files(_vars_files(base / "group_vars", name), base, shown_base))
    for name, h in data.hosts.items():
        h.file_vars.update(_load_vars_files(_vars_files(base / "host_vars", name), base, shown_base))


def _merged_vars(data: InventoryData, host: _Host, order: list[str]) -> dict[str, _Var]:
    groups = [g for g in order if g != "all"]
    merged: dict[str, _Var] = {}
    merged.update(data.groups["all"].vars)
    for g in groups:
        merged.update(data.groups[g].vars)
    merged.update(data.groups["all"].file_vars)
    for g in groups:
        merged.update(data.groups[g].file_vars)
    merged.update(host.vars)
    merged.update(host.file_vars)
    return merged


def resolve(data: InventoryData, path: str, password: Password | None = None) -> Inventory:
    """Hosts, groups and merged vars of ``data`` (reconciled, vars files added), as Ansible
    resolves them; fleet's own vars decrypted with ``password`` where they are ``!vault``."""
    all_order = data.group_hosts("all")
    position = {h: i for i, h in enumerate(all_order)}
    memberships: dict[str, set[str]] = {h: {"all"} for h in data.hosts}
    for gname, g in data.groups.items():
        ancestors = data.ancestors(gname)
        for h in g.hosts:
            memberships[h].add(gname)
            memberships[h].update(ancestors)
    depth = {g: data.depth(g) for g in data.groups}

    def precedence(gname: str) -> tuple[int, int, str]:
        return (depth[gname], data.groups[gname].priority, gname)

    merged: dict[str, dict[str, _Var]] = {}
    specs: dict[str, HostSpec] = {}
    for name in all_order:
        host = data.hosts[name]
        merged[name] = _merged_vars(data, host, sorted(memberships[name], key=precedence))
        specs[name] = _decode_spec(_unvaulted(merged[name], password))
    hosts: list[Host] = []
    for name in all_order:
        entry = data.hosts[name]
        mv = _unvaulted(merged[name], password)
        hosts.append(
            Host(
                name=name,
                address=_address(mv, entry),
                port=_port(mv),
                user=_checked(mv, "ansible_user", user_problem),
                key_file=_opt(mv, "ansible_ssh_private_key_file", str),
                ssh_common_args=_checked(mv, "ansible_ssh_common_args", common_args_problem),
                groups=tuple(sorted(memberships[name] - {"all"})),
                vars=MappingProxyType({k: plain(v.node) for k, v in merged[name].items()}),
                spec=specs[name],
                source=entry.source,
            )
        )
    groups = {
        gname: Group(
            name=gname,
            hosts=tuple(sorted(data.group_hosts(gname), key=position.__getitem__)),
            children=tuple(g.children),
            vars=MappingProxyType({k: plain(v.node) for k, v in {**g.vars, **g.file_vars}.items()}),
        )
        for gname, g in data.groups.items()
    }
    return Inventory(path=path, hosts=tuple(hosts), groups=MappingProxyType(groups))


_CONNECTION_VARS = ("ansible_host", "ansible_port", "ansible_user", "ansible_ssh_private_key_file",
                    "ansible_ssh_common_args")  # fmt: skip


def _unvaulted(mv: dict[str, _Var], password: Password | None) -> dict[str, _Var]:
    """``mv`` with the vars fleet reads decrypted; other vars (the operator's own secrets) stay
    encrypted, as ``ansible-inventory --list`` shows them."""
    out = dict(mv)
    for key in (*_CONNECTION_VARS, *_SPEC_FIELDS):
        var = mv.get(key)
        if var is None or not isinstance(var.node, Scalar) or not isinstance(var.node.value, Vaulted):
            continue
        if password is None:
            raise InputError(var.node.source, "is a !vault value: pass --vault-password-file FILE (or set "
                             "FLEET_VAULT_PASSWORD_FILE) to decrypt it", var.key_path)  # fmt: skip
        from launcher.config.vault import decrypt

        text = decrypt(var.node.value, password, var.node.source, var.key_path)
        out[key] = _Var(Scalar(value=text, source=var.node.source, loose=True), var.key_path)
    return out


def _opt(mv: dict[str, _Var], key: str, tp: type) -> Any:
    var = mv.get(key)
    if var is None:
        return None
    return decode(var.node, tp | None, var.key_path)


# Fleet's numeric host vars, as the kernel and NCCL define them: (lowest, highest, what).
_RANGES = {
    "gpu_count": (0, 1024, "GPUs in one host"),
    "gid_index": (0, 255, "an index into the HCA port's GID table"),
    "mtu": (68, 65535, "the kernel's MTU range"),
    "ib_tc": (0, 255, "NCCL_IB_TC, an 8-bit traffic class"),
    "ib_sl": (0, 15, "NCCL_IB_SL, an InfiniBand service level"),
}


def _decode_spec(mv: dict[str, _Var]) -> HostSpec:
    hints = field_hints(HostSpec)
    values = {k: decode(mv[k].node, hints[k], mv[k].key_path) for k in _SPEC_FIELDS if k in mv}
    if values.get("fabric") == "roce" and values.get("gid_index") is None:
        # RoCE v2 GID indices differ between hosts: unset means "read this host's GID table".
        values["gid_index"] = "auto"
    spec = HostSpec(**values)
    for name, (low, high, what) in _RANGES.items():
        value = getattr(spec, name)
        if isinstance(value, int) and not low <= value <= high:
            var = mv[name]
            raise InputError(var.node.source, f"should be {low}-{high} ({what}), got {show(value)}", var.key_path)
    if spec.data_ip is not None:
        try:
            ipaddress.ip_address(spec.data_ip)
        except ValueError:
            var = mv["data_ip"]
            raise InputError(var.node.source, f"should be an IP address, got {spec.data_ip!r}", var.key_path) from None
    return spec


def _checked(mv: dict[str, _Var], key: str, problem: Callable[[str], str | None]) -> str | None:
    """The string var ``key`` (None if unset), refused at its line when ``problem`` finds one."""
    value: str | None = _opt(mv, key, str)
    why = None if value is None else problem(value)
    if why is not None:
        var = mv[key]
        raise InputError(var.node.source, f"should be {why}, got {show(value)}", var.key_path)
    return value


def _address(mv: dict[str, _Var], host: _Host) -> str:
    """``ansible_host``, else the host's name (checked as a name in :meth:`_Data.add_host`):
    either must be a hostname or an IP literal (see :mod:`launcher.addresses`: these reach
    ssh_config's ``Match exec`` and rsync's command line)."""
    address = _checked(mv, "ansible_host", address_problem)
    if address is not None:
        return address
    why = address_problem(host.name)
    if why is not None:
        raise InputError(host.source, f"without ansible_host, the name should be {why}, got {show(host.name)}",
                         host.key_path)  # fmt: skip
    return host.name


def _port(mv: dict[str, _Var]) -> int:
    """``ansible_port``, else 22; a TCP port number (1-65535)."""
    port: int | None = _opt(mv, "ansible_port", int)
    if port is None:
        return 22
    if not 1 <= port <= 65535:
        var = mv["ansible_port"]
        raise InputError(var.node.source, f"should be a TCP port (1-65535), got {port}", var.key_path)
    return port
