"""The engines fleet knows, by the name a recipe's ``engine:`` gives.

Contract: :func:`get` returns the :class:`~launcher.engines.base.Engine` of a name; the built-in
engines are SGLang, vLLM and vllm-ascend, in that order; :func:`register` adds one (a plug-in, or
a test's engine) and refuses a name already taken.  Recipes are checked against :func:`names`
when they load, so the planner never asks for an unknown one.
"""

from __future__ import annotations

from typing import Sequence

from launcher.engines import ascend, sglang, vllm
from launcher.engines.base import Engine
from launcher.engines.named import Named

_ENGINES: Named[Engine] = Named("engine", (sglang.ENGINE, vllm.ENGINE, ascend.ENGINE))
register = _ENGINES.register
unregister = _ENGINES.unregister
names = _ENGINES.names
engines = _ENGINES.all
get = _ENGINES.get


def of_argv(argv: Sequence[str]) -> Engine | None:
    """The engine a unit's argv runs (by its entry point), None for routers and the rest."""
    return next((e for e in _ENGINES.all() if tuple(argv[: len(e.entry)]) == e.entry), None)
