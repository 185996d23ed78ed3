"""What an inventory host name, SSH address and SSH user may be.

Contract: each ``*_problem`` function returns None for an acceptable value, else the one-line
reason (a phrase that completes "should be ...").  Accepted:

* an address (``ansible_host``, a ProxyJump host, or the inventory name when it is the address):
  an IP literal (IPv4, or IPv6 with an optional ``%zone``) or a DNS-style hostname -- labels of
  letters, digits, ``-`` and ``_`` (not starting or ending with ``-``), separated by dots, at most
  253 characters; a name whose labels are all digits must be a valid IPv4 address
  (``999.1.1.1`` is neither);
* an inventory host name: letters, digits and ``. _ - :`` (``:`` for IPv6 literals used as
  names), not starting with ``-`` or ``.``, at most 240 characters;
* a user: letters, digits and ``. _ - @`` (``user@domain`` from a directory service), not
  starting with ``-``, at most 256 characters;
* a ProxyJump (``ansible_ssh_common_args``' ``-J``/``-o ProxyJump=``, an ssh_config line):
  ``none`` or comma-separated ``[user@]host[:port]`` hops, each address and user as above.

Why so strict: these values reach shells fleet does not control.  paramiko expands ``%h`` in
an operator's ``Match exec`` ssh_config lines without quoting, a leading ``-`` turns a value
into an option of ssh or rsync (``-oProxyCommand=...``), and OpenSSH (>= 9.6) itself refuses
shell metacharacters in host and user names.
"""

from __future__ import annotations

import ipaddress
import re
import shlex

_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
_NAME = re.compile(r"[A-Za-z0-9_:][A-Za-z0-9_.:-]{0,239}")  # 240: room for host_vars/<name>.yaml
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,255}")


def address_problem(text: str) -> str | None:
    """Why ``text`` is not a hostname or IP literal fleet connects to (None: it is one)."""
    try:
        ipaddress.ip_address(text)
        return None
    except ValueError:
        pass
    labels = text.split(".")
    if all(label.isdigit() for label in labels if label) and any(labels):
        return "a hostname or an IP address (not a valid IPv4 address)"
    if len(text) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        return "a hostname or an IP address"
    return None


def name_problem(text: str) -> str | None:
    """Why ``text`` is not an inventory host name fleet accepts (None: it is one)."""
    if _NAME.fullmatch(text) is None:
        return "a host name of at most 240 letters, digits, '.', '_', '-' and ':' (not starting with '-' or '.')"
    return None


def user_problem(text: str) -> str | None:
    """Why ``text`` is not an SSH user name fleet accepts (None: it is one)."""
    if _USER.fullmatch(text) is None:
        return "a user name of at most 256 letters, digits, '.', '_', '-' and '@' (not starting with '-')"
    return None


def jump_hop(spec: str) -> tuple[str, str, str]:
    """One ``[user@]host[:port]`` element of a ProxyJump list (``ssh://`` form, ``[v6]`` literal
    accepted) as (user, address, port text; "" where absent).  ``ValueError(spec)`` when the
    address, the user or the port is not one fleet accepts."""
    text = spec.removeprefix("ssh://")
    user, _, hostport = text.rpartition("@")
    if hostport.startswith("["):
        address, _, rest = hostport[1:].partition("]")
        port_text = rest.removeprefix(":")
    else:
        address, _, port_text = hostport.partition(":")
    if address_problem(address) or (user and user_problem(user)) or (port_text and not port_text.isdigit()):
        raise ValueError(spec)
    return user, address, port_text


JUMP_SHOULD_BE = "a ProxyJump list of [user@]host[:port] hops (host names or IP addresses, user names as ansible_user)"


def jump_problem(value: str) -> str | None:
    """Why ``value``, a ProxyJump setting (``none`` or comma-separated hops, see :func:`jump_hop`),
    is not one fleet accepts (None: it is one)."""
    if value.strip().lower() == "none":
        return None
    try:
        for spec in value.split(","):
            jump_hop(spec.strip())
    except ValueError:
        return JUMP_SHOULD_BE
    return None


def ssh_options(text: str) -> dict[str, str]:
    """The options an ``ansible_ssh_common_args`` value sets, keys lower-cased:
    ``-o Key=value`` / ``-o "Key value"`` / ``-oKey=value``, and ``-J spec`` / ``-Jspec`` as
    ``proxyjump``.  As in OpenSSH, the first value given for a key wins.  ``ValueError`` when
    the text does not split as a shell would."""
    tokens = shlex.split(text)
    out: dict[str, str] = {}
    for i, tok in enumerate(tokens):
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if tok == "-J" and nxt is not None:
            out.setdefault("proxyjump", nxt)
        elif tok.startswith("-J") and len(tok) > 2:
            out.setdefault("proxyjump", tok[2:])
        option = nxt if tok == "-o" else tok[2:] if tok.startswith("-o") else None
        if not option:
            continue
        key, sep, value = option.partition("=")
        if not sep:
            key, _, value = option.strip().partition(" ")
        out.setdefault(key.strip().lower(), value.strip())
    return out


def common_args_problem(text: str) -> str | None:
    """Why an ``ansible_ssh_common_args`` value's ProxyJump is not one fleet accepts (None: it
    is, or it sets none; text that does not split is the SSH layer's to refuse)."""
    try:
        jump = ssh_options(text).get("proxyjump")
    except ValueError:
        return None
    if jump is None or jump_problem(jump) is None:
        return None
    return f"ssh options whose ProxyJump is {JUMP_SHOULD_BE}"
