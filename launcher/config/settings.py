"""Operator defaults: the environment and a fleet config file, below the command line.

Contract: :func:`lookup` returns a setting's value and where it came from, the environment
(``FLEET_<KEY>``) before the config file's ``[defaults]`` section; the command line is above
both and is the CLI's to apply.  The config file is the first that exists of ``$FLEET_CONFIG``,
``./fleet.cfg``, ``$XDG_CONFIG_HOME/fleet/fleet.cfg`` (``~/.config/fleet/fleet.cfg``) and
``/etc/fleet/fleet.cfg`` -- one file, as Ansible reads one ``ansible.cfg``.  Its format is
``ansible.cfg``'s (INI, ``key = value``); relative paths in it are relative to the file, as in
``ansible.cfg``.  List settings (``inventory``, ``known_hosts``, ``recipes``) are comma-separated,
as ``ANSIBLE_INVENTORY`` is.  A key fleet does not know, or a ``$FLEET_CONFIG`` that names no
file, is an :class:`InputError` at its line.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from launcher.config.schema import did_you_mean
from launcher.config.yamlpos import read_text
from launcher.errors import InputError
from launcher.model import Source

CONFIG_ENV = "FLEET_CONFIG"
SECTION = "defaults"
# key -> whether its values are paths (made relative to the config file's directory)
KEYS: dict[str, bool] = {
    "inventory": True, "known_hosts": True, "forks": False, "recipes": True, "vault_password_file": True,
    "ssh_keepalive_s": False, "ssh_dead_after_s": False,
}  # fmt: skip
LISTS = frozenset({"inventory", "known_hosts", "recipes"})

_SECTION = re.compile(r"^\[([^\]]+)\]\s*$")
_ITEM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*[=:]\s*(.*?)\s*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class Setting:
    """A value and its origin (``FLEET_INVENTORY``, ``fleet.cfg:3``), for messages."""

    values: tuple[str, ...]  # one item unless the key is a list
    origin: str


def env_name(key: str) -> str:
    return f"FLEET_{key.upper()}"


def config_path() -> Path | None:
    """The config file in force (see the module contract), or None."""
    named = os.environ.get(CONFIG_ENV)
    if named:
        p = Path(named).expanduser()
        if not p.is_file():
            raise InputError(None, f"{CONFIG_ENV}={named}: no such file")
        return p
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    for candidate in (Path("fleet.cfg"), Path(xdg) / "fleet" / "fleet.cfg", Path("/etc/fleet/fleet.cfg")):
        if candidate.is_file():
            return candidate
    return None


def read_config(path: Path) -> dict[str, Setting]:
    """The ``[defaults]`` of ``path`` (other sections are ignored, as Ansible ignores the
    sections it does not read)."""
    out: dict[str, Setting] = {}
    section = None
    for lineno, raw in enumerate(read_text(path).splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        src = Source(path=str(path), line=lineno, col=1)
        m = _SECTION.match(line)
        if m:
            section = m.group(1).strip()
            continue
        item = _ITEM.match(line)
        if item is None:
            raise InputError(src, f"expected key = value, got {line!r}")
        if section != SECTION:
            if section is None:
                raise InputError(src, f"{item.group(1)} is outside a section (fleet reads [{SECTION}])")
            continue
        key, value = item.group(1), item.group(2)
        if key not in KEYS:
            raise InputError(src, f"unknown key {key!r} in [{SECTION}]{did_you_mean(key, KEYS)}")
        values = _split(key, value)
        if KEYS[key]:
            values = tuple(str(path.parent / Path(v).expanduser()) for v in values)  # absolute ones stay
        out[key] = Setting(values=values, origin=f"{path}:{lineno}")
    return out


def _split(key: str, text: str) -> tuple[str, ...]:
    if key not in LISTS:
        return (text,)
    return tuple(p.strip() for p in text.split(",") if p.strip())


def lookup(key: str) -> Setting | None:
    """``FLEET_<KEY>``, else the config file's ``key``, else None."""
    assert key in KEYS, key
    name = env_name(key)
    text = os.environ.get(name)
    if text:
        values = _split(key, text)
        if KEYS[key]:
            values = tuple(str(Path(v).expanduser()) for v in values)
        return Setting(values=values, origin=name)
    path = config_path()
    if path is None:
        return None
    return read_config(path).get(key)
