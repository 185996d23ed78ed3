"""The runtimes' unit templates (``templates/*.j2``), rendered with jinja2 (strict: an unknown
name is an error; no autoescape: the values are quoted by :mod:`launcher.quoting` first)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:  # imported when a template is first rendered: planning needs none
    import jinja2

# In an installed wheel the templates are package data, ``launcher/templates`` (pyproject maps the
# checkout's top-level ``templates/`` there); a checkout, editable or not, has only the latter.
_PACKAGED_TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
_TEMPLATES = (
    _PACKAGED_TEMPLATES if _PACKAGED_TEMPLATES.is_dir() else _PACKAGED_TEMPLATES.parents[1] / "templates"
)


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def template(name: str, ctx: Mapping[str, object]) -> str:
    return _environment().get_template(name).render(ctx)
