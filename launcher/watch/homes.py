"""The routers a deployment's engine groups are registered in ("homes"), and how each worker is
registered there: pure.

- Regular mode (a ``router`` placement in front of replicas, or ``--router``): every engine
  group's leader, as a ``regular`` worker.
- PD: the deployment's own PD routers, each with the workers its command line gives it (read by
  the router's program, :class:`launcher.engines.router.Program`), so a worker goes back as the
  router was started with it: its type and bootstrap port.  A program whose PD mode takes no
  worker over its API (``Program.pd_adds_workers``) makes a home with ``adds=False``: the watch
  never takes a worker out of it (it could not put it back) and reports a worker missing there
  instead of registering it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from launcher.deploy.session import Target
from launcher.engines import router
from launcher.rolling.router_api import WorkerType

PD_ROLES = frozenset({"prefill", "decode"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """How a worker is registered in a router."""

    worker_type: WorkerType = "regular"
    bootstrap_port: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Home:
    """A router.  ``pd``: a PD router's workers by URL, as its command line lists them (None: a
    regular-mode router, home of every engine leader)."""

    url: str
    pd: Mapping[str, Entry] | None = field(default=None, hash=False)
    adds: bool = True  # it takes workers over its API (False: a PD mode that takes none)
    program: str = ""  # the router program's name, as messages say it ("": a regular-mode home given by URL)

    def entry(self, worker: str) -> Entry | None:
        """How ``worker`` is registered here; None when it is not this router's worker."""
        if self.pd is None:
            return Entry()
        return self.pd.get(worker.rstrip("/"))


def no_adds(homes: Sequence[Home]) -> str:
    """What messages call the ``homes`` that take no worker over their API: "<program> in PD mode"."""
    return ", ".join(sorted({f"{h.program} in PD mode" for h in homes if not h.adds}))


def pd_workers(argv: Sequence[str]) -> dict[str, Entry]:
    """The workers a PD router's command line lists (its program reads them), by URL."""
    program = _program(argv)
    return {url: Entry(worker_type=w.role, bootstrap_port=w.bootstrap_port) for url, w in program.pd_workers(argv).items()}


def _program(argv: Sequence[str]) -> router.Program:
    program = router.of_argv(argv)
    assert program is not None, argv  # the planner refuses a router no program describes
    return program


def homes(target: Target, regular: Sequence[str]) -> tuple[Home, ...]:
    """``regular`` (router URLs in regular mode) and, for a PD deployment, its own PD routers,
    reached at their hosts' SSH addresses."""
    out = [Home(url=u) for u in regular]
    if not any(d.unit.role in PD_ROLES for d in target.units):
        return tuple(out)
    hosts = {h.name: h for h in target.hosts}
    for d in target.units:
        if d.unit.role == "router" and d.host in hosts and "router" in d.unit.ports:
            program = _program(d.unit.argv)
            out.append(Home(url=f"http://{hosts[d.host].address}:{d.unit.ports['router']}", pd=pd_workers(d.unit.argv),
                            adds=program.pd_adds_workers, program=program.name))  # fmt: skip
    return tuple(out)
