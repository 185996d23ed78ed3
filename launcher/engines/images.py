"""Which programs the images fleet knows are known to carry, with where each fact came from.

The router and the Mooncake master run from the engine image unless a recipe or playbook names
another (``images.router`` / ``images.mooncake_master``).  The plan refuses a role whose image
is *known* to lack its program -- before any host is touched; an image not in this table gets no
verdict here, and preflight's look inside the image on the host (``image-programs.sh``) stays the
last line.  A fact is per engine version: it holds for an image of its repository whose tag
names a version in the fact's range (``v0.33.0``, ``v0.5.23-cu130``), the versions it was read
for; a tag naming no version (``latest``, ``nightly``, ``glm-5.3-flash``, a digest) matches only a
fact without a range.  So a later release that starts shipping a program, or an older one that
did not yet, gets no verdict here instead of a wrong one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageFact:
    repository: str  # e.g. "lmsysorg/sglang"
    program: str  # as `program_of` names it
    carried: bool
    # The engine versions (inclusive) the fact was read for; None on a side: open there.  Both
    # None: every tag of the repository (an image that is the program's own).
    first: str | None = None
    last: str | None = None
    source: str  # where the fact came from


SGLANG_ROUTER = "python3 -m sglang_router.launch_router"
VLLM_ROUTER = "vllm-router"
MOONCAKE_MASTER = "mooncake_master"

FACTS: tuple[ImageFact, ...] = (
    ImageFact(repository="lmsysorg/sglang", program=SGLANG_ROUTER, carried=True, first="0.5.23", last="0.5.23",
              source="SGLang's LWS PD example runs `python -m sglang_router.launch_router` in lmsysorg/sglang "
                     "(docs/references/multi_node_deployment/lws_pd/lws-examples/lb.yaml), read with SGLang 0.5.23 "
                     "beside sglang-router 0.3.2"),
    ImageFact(repository="lmsysorg/sglang", program=MOONCAKE_MASTER, carried=True, first="0.5.23", last="0.5.23",
              source="the image serves PD over its default mooncake backend (same LWS PD example), and the "
                     "mooncake-transfer-engine wheel that provides it installs mooncake_master (LIKELY; SGLang 0.5.23)"),
    ImageFact(repository="vllm/vllm-openai", program=VLLM_ROUTER, carried=False, last="0.33.0",
              source="vllm-router is its own package and image (vllm-project/router; vllm/vllm-router), not a "
                     "dependency of vllm (requirements read in vLLM 0.33.0; later releases unread)"),
    ImageFact(repository="vllm/vllm-openai", program=MOONCAKE_MASTER, carried=False, last="0.33.0",
              source="Mooncake is an optional extra of vLLM (pip install mooncake-transfer-engine[-cuda13]), "
                     "not in the release image (vLLM 0.33.0; later releases unread)"),
    ImageFact(repository="vllm/vllm-router", program=VLLM_ROUTER, carried=True,
              source="the vllm-project/router image; upstream publishes nightly tags only"),
)


def program_of(argv: Sequence[str]) -> str:
    """The program a unit's image must provide: ``argv[0]`` (docker's ``--entrypoint``), or
    ``python3 -m MODULE`` for a module the image's python3 runs."""
    if len(argv) > 2 and tuple(argv[:2]) == ("python3", "-m"):
        return f"python3 -m {argv[2]}"
    return argv[0]


def repository(image: str) -> str:
    """``lmsysorg/sglang:v0.5.23`` -> ``lmsysorg/sglang``; a digest or a registry port stays out
    of the tag split (``host:5000/x/y@sha256:..`` -> ``host:5000/x/y``); Docker Hub's implied
    ``docker.io/`` and ``library/`` prefixes are dropped."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name[: name.rindex(":")]
    for prefix in ("docker.io/", "index.docker.io/"):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name.removeprefix("library/")


def _parse(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


_TAG_VERSION = re.compile(r"v?(\d+(?:\.\d+)+)(?:[.+-].*)?")


def version_of(image: str) -> tuple[int, ...] | None:
    """The engine version an image's tag names: ``lmsysorg/sglang:v0.5.23-cu130`` -> (0, 5, 23),
    ``v0.4.6.post4`` -> (0, 4, 6); None for a tag naming none (``latest``, ``glm-5.3-flash``),
    no tag, or a digest."""
    last = image.rsplit("/", 1)[-1]  # the tag sits after the last "/" (a registry port does not)
    if "@" in image or ":" not in last:
        return None
    m = _TAG_VERSION.fullmatch(last.partition(":")[2])
    return _parse(m.group(1)) if m else None


def holds(fact: ImageFact, image: str) -> bool:
    """Whether ``fact`` speaks for ``image``: same repository, and the tag's version inside the
    fact's range (a fact without a range: any tag)."""
    if fact.repository != repository(image):
        return False
    if fact.first is None and fact.last is None:
        return True
    version = version_of(image)
    return version is not None and (fact.first is None or _parse(fact.first) <= version) and (
        fact.last is None or version <= _parse(fact.last))


def lacks(image: str, argv: Sequence[str]) -> ImageFact | None:
    """The fact saying ``image`` (at its tag's engine version) does not carry the program ``argv``
    runs, if fleet knows one."""
    program = program_of(argv)
    return next((f for f in FACTS if f.program == program and not f.carried and holds(f, image)), None)
