"""One preflight of a deployment at a time: the probe rounds (ports, images, reachability
listeners, the KV-transport containers) run under a claim on the hosts they touch,
``/run/fleet/lock/<deployment>.preflight``, made and checked by the deploy lock's scripts
(:mod:`launcher.deploy.lock`: the same path checks, owner line and takeover rule).

Why: two preflights of one deployment at once bind the same ports and name the same probe
containers, so each fails the other's checks with errors that blame the network.  Measured on
the real PD sandbox, two ``fleet preflight`` started together: one read a ``docker run`` name
conflict as a failed KV transfer ("check UCX_NET_DEVICES"), the other a refused side channel.
``fleet up``'s gate is the same preflight.

Contract: :func:`claimed` takes the claim on every host given, or raises :class:`PreflightBusy`
when another preflight holds one (the claims it took released first) -- a claim whose holder
ran on this control host and is gone is taken over instead (:func:`launcher.deploy.lock.holder_state`),
and ``force`` (``--break-lock``) breaks any claim first.  A host SSH cannot reach is left out
(the probe rounds report it); a host where no claim can be made is named to the caller.  On
the way out the claims are released (after a Ctrl-C, which closed the connections, over new
ones), best effort: one left on a host that stopped answering is taken over by the next
preflight from this control host, or broken with ``--break-lock`` from another.  The deploy
lock itself is not taken: a preflight beside a running deploy of the same deployment is
allowed, as before.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

from launcher.deploy import lock
from launcher.errors import FleetError
from launcher.execute.fanout import Connector, Failed, Ok, Outcome, cleanup_connector, run_all
from launcher.execute.transport import Transport
from launcher.model import Host


class PreflightBusy(FleetError):
    """Another preflight of the deployment holds its claim on a host."""


@contextmanager
def claimed(hosts: Sequence[Host], deployment: str, connector: Connector, forks: int, *,
            force: bool = False) -> Iterator[dict[str, str]]:  # fmt: skip
    """The preflight claim of ``deployment`` on ``hosts`` for the block (see the module).  Yields
    the hosts where no claim could be made and why (no ``flock``, no ``/run/fleet`` for a user
    other than root, a lock path another user could change): the deploy lock fails there the
    same way, so preflight reports it; those hosts are probed without a claim."""
    name, owner = lock.claim_name(deployment, "preflight"), lock.owner_line()

    def take(host: Host, t: Transport) -> None:
        try:
            lock.take(t, name, owner, force=force)
        except lock.LockedError as err:
            raise PreflightBusy(f"{host.name}: a preflight of deployment {deployment!r} is running already "
                                f"({err.owner}); run this one when it has ended (one that is gone: "
                                "--break-lock)") from None  # fmt: skip

    def give_back(taken: Sequence[Host], interrupted: bool = False) -> None:
        with cleanup_connector(connector, interrupted) as via:
            run_all(taken, lambda _, t: lock.release(t, name, owner), connector=via, forks=forks)

    # The first host (by name) alone, then the others at once: of two preflights started
    # together, the one that took the first host takes the rest, and the other is refused there
    # and takes nothing (claimed all at once, each could hold some hosts and both be refused).
    ordered = sorted(hosts, key=lambda h: h.name)
    outcomes: list[Outcome[None]] = []
    asked: list[Host] = []
    try:
        for wave in (ordered[:1], ordered[1:]):
            asked += wave
            outcomes += run_all(wave, take, connector=connector, forks=forks).outcomes
            if any(isinstance(o, Failed) and isinstance(o.error, PreflightBusy) for o in outcomes):
                break
    except KeyboardInterrupt:
        # Every host asked, not only those that had answered: a claim made on a host whose
        # answer the Ctrl-C cut off is ours too (a release removes only a claim of ours).  Any
        # KeyboardInterrupt, not only run_all's: one between the waves holds the first's claim.
        give_back(asked, interrupted=True)
        raise
    taken = [o.host for o in outcomes if isinstance(o, Ok)]
    failed = [o for o in outcomes if isinstance(o, Failed)]
    refusal = next((o.error for o in failed if not isinstance(o.error, FleetError) or isinstance(o.error, PreflightBusy)),
                   None)  # fmt: skip
    if refusal is not None:  # another preflight runs (or a bug): nothing of this one may stay
        give_back(taken)
        raise refusal
    interrupted = False
    try:
        yield {o.host.name: str(o.error).removeprefix(f"{o.host.name}: ") for o in failed}
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        give_back(taken, interrupted)
