"""What playbooks and recipes hand to a unit's env file and argv, checked where it is written.

Contract: :func:`check_unit_inputs` raises :class:`InputError` at ``file:line:col`` for an env
name that is not one or that would reconfigure the host (:func:`launcher.quoting.env_name_problem`:
run.sh ``set -a``-sources the env files and then runs the host's docker client), and for any
text holding a NUL character or a lone surrogate, which no argv or env file can carry.  Render
checks the same again on the final plan; this is so the operator is told where it was written.
"""

from __future__ import annotations

from launcher import quoting
from launcher.config.schema import join
from launcher.config.yamlpos import Map, Node, Scalar, find
from launcher.errors import InputError


def check_unit_inputs(node: Map, env_paths: tuple[str, ...]) -> None:
    """``env_paths``: key paths of the env mappings in ``node`` (e.g. ``overrides/env``)."""
    for path in env_paths:
        env = find(node, path)
        if isinstance(env, Map):
            for k, _ in env.items:
                problem = quoting.env_name_problem(str(k.value))
                if problem is not None:
                    raise InputError(k.source, f"env name {str(k.value)!r}: {problem}", join(path, str(k.value)))
    _check_text(node, "")


def _check_text(node: Node, key_path: str) -> None:
    if isinstance(node, Scalar):
        problem = quoting.text_problem(node.value) if isinstance(node.value, str) else None
        if problem is not None:
            raise InputError(node.source, problem, key_path)
    elif isinstance(node, Map):
        for k, v in node.items:
            _check_text(k, key_path)
            _check_text(v, join(key_path, str(k.value)))
    else:
        for i, item in enumerate(node.items):
            _check_text(item, join(key_path, i))
