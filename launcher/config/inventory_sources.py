"""Inventory sources as ``ansible-inventory -i SRC [-i SRC ...]`` reads them.

Contract: :func:`load_sources` returns one :class:`Inventory` from every source in order, each
one of:

- a host list: a string with a comma that is not an existing path (``'h1,h2,'``, ``'h1:2222,'``):
  its hosts, in ``ungrouped``;
- a directory: every entry in name order, recursively, skipping what Ansible skips (hidden
  names, ``group_vars``, ``host_vars``, ``vars_plugins`` and the extensions of
  :data:`IGNORED_EXTENSIONS`);
- an executable file: an inventory script, run with ``--list`` (and ``--host H`` for each host
  when its output has no ``_meta.hostvars``), its JSON read as Ansible's script plugin reads it;
- any other file: YAML or INI (:func:`launcher.config.inventory.parse_file`).

``group_vars/`` and ``host_vars/`` are read beside each source given (in the directory a
directory source names, else beside the file), later sources over earlier ones, and apply to
groups and hosts of every source.  Variable precedence and host order are then
:func:`launcher.config.inventory.resolve`'s.  A source that does not exist, a script that fails or
prints something other than an inventory is an :class:`InputError` naming it -- where Ansible
would warn and carry on with fewer hosts.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from launcher.config.inventory import InventoryData, add_vars_dirs, parse_file, resolve, split_port
from launcher.config.yamlpos import from_plain
from launcher.errors import InputError
from launcher.model import Inventory, Source

# Ansible's INVENTORY_IGNORE_EXTS default (REJECT_EXTS + .orig, .cfg, .retry).
IGNORED_EXTENSIONS = (".pyc", ".pyo", ".swp", ".bak", "~", ".rpm", ".md", ".txt", ".rst", ".orig", ".cfg", ".retry")
IGNORED_NAMES = ("group_vars", "host_vars", "vars_plugins")
SCRIPT_TIMEOUT_S = 300  # an inventory script asking a cloud API may be slow; one that hangs is not


@dataclass(frozen=True, slots=True, kw_only=True)
class InventorySources:
    """What ``-i`` (repeatable) or its defaults named, and the vault password file."""

    sources: tuple[str, ...]
    vault_password_file: str | None = None

    def __str__(self) -> str:
        """As the command line would give them again: ``a.yaml`` or ``a.yaml -i b.ini``."""
        return " -i ".join(shlex.quote(s) for s in self.sources)

    def argv(self) -> tuple[str, ...]:
        return tuple(a for s in self.sources for a in ("-i", s))


InventoryRef = InventorySources | str | Path


def as_sources(ref: InventoryRef) -> InventorySources:
    return ref if isinstance(ref, InventorySources) else InventorySources(sources=(str(ref),))


def is_host_list(source: str) -> bool:
    return "," in source and not os.path.exists(source)


def load_sources(ref: InventoryRef) -> Inventory:
    """One inventory from every source of ``ref`` (see the module contract)."""
    spec = as_sources(ref)
    password = None
    if spec.vault_password_file is not None:
        from launcher.config.vault import read_password

        password = read_password(spec.vault_password_file)
    data = InventoryData()
    for source in spec.sources:
        if is_host_list(source):
            _host_list(data, source)
        else:
            _path(data, Path(source), source)
    data.reconcile()
    for source in spec.sources:
        if not is_host_list(source):
            p = Path(source)
            add_vars_dirs(data, p if p.is_dir() else p.parent, p if p.is_dir() else Path(source).parent)
    return resolve(data, str(spec), password)


def _host_list(data: InventoryData, source: str) -> None:
    src = Source(path=source, line=1, col=1)
    for item in (i.strip() for i in source.split(",")):
        if item:
            name, port = split_port(item)
            data.add_host(name, "ungrouped", port, src, name)


def _ignored(name: str) -> bool:
    return name.startswith(".") or name in IGNORED_NAMES or name.endswith(IGNORED_EXTENSIONS)


def _path(data: InventoryData, p: Path, shown: str) -> None:
    if p.is_dir():
        for entry in sorted(p.iterdir(), key=lambda e: e.name):
            if not _ignored(entry.name):
                _path(data, entry, os.path.join(shown, entry.name))
    elif not p.exists():
        raise InputError(None, f"{shown}: no such inventory file or directory")
    elif os.access(p, os.X_OK):
        _script(data, p, shown)
    else:
        parse_file(data, p, shown)


def _run(p: Path, shown: str, args: tuple[str, ...]) -> str:
    what = f"inventory script {shown} {' '.join(args)}"
    try:
        proc = subprocess.run([str(p.resolve()), *args], capture_output=True, text=True, check=False,  # noqa: S603
                              timeout=SCRIPT_TIMEOUT_S)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise InputError(None, f"{what}: no answer in {SCRIPT_TIMEOUT_S} s") from None
    except OSError as err:
        raise InputError(None, f"{what}: cannot run: {err.strerror}") from None
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no output on stderr)"]
        raise InputError(None, f"{what}: exit {proc.returncode}: {tail[0]}")
    return proc.stdout


def _json(p: Path, shown: str, args: tuple[str, ...]) -> object:
    text = _run(p, shown, args)
    try:
        return json.loads(text) if text.strip() or args[0] == "--list" else {}
    except json.JSONDecodeError as err:
        raise InputError(None, f"inventory script {shown} {' '.join(args)}: output is not JSON: {err}") from None


def _mapping(value: object, shown: str, what: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise InputError(None, f"inventory script {shown}: {what} should be a mapping, got {type(value).__name__}")
    return value


def _script(data: InventoryData, p: Path, shown: str) -> None:
    """Ansible's script plugin: groups as ``{hosts, vars, children}`` (a bare list of hosts, or
    a mapping without those keys, read as Ansible's deprecated forms), ``_meta.hostvars``."""
    src = Source(path=shown, line=1, col=1)
    out = _mapping(_json(p, shown, ("--list",)), shown, "--list output")
    hostvars: dict[str, object] | None = None
    seen: list[str] = []
    for group, body in out.items():
        if group == "_meta":
            hostvars = _mapping(_mapping(body, shown, "_meta").get("hostvars", {}), shown, "_meta.hostvars")
            continue
        data.add_group(group)
        if not isinstance(body, dict):
            body = {"hosts": body}
        elif not any(k in body for k in ("hosts", "vars", "children")):
            body = {"hosts": [group], "vars": body}
        hosts = body.get("hosts", [])
        if not isinstance(hosts, list):
            raise InputError(None, f"inventory script {shown}: {group}.hosts should be a list")
        for host in hosts:
            data.add_host(str(host), group, None, src, f"{group}/hosts/{host}")
            if str(host) not in seen:
                seen.append(str(host))
        for key, value in _mapping(body.get("vars", {}), shown, f"{group}.vars").items():
            data.set_group_var(group, key, from_plain(value, src), f"{group}/vars/{key}")
        children = body.get("children") or []
        if not isinstance(children, list):
            raise InputError(None, f"inventory script {shown}: {group}.children should be a list")
        for child in children:
            data.add_group(str(child))
            data.add_child(group, str(child), src)
    for host in seen:
        got = hostvars.get(host, {}) if hostvars is not None else _json(p, shown, ("--host", host))
        for key, value in _mapping(got, shown, f"vars of {host}").items():
            data.set_host_var(host, key, from_plain(value, src), f"{host}/{key}")
