"""What a sandbox's ``down`` must have released of its network slot (its root link and guard
route), checked so that test sessions running side by side (CI's tiers) cannot fail it: a
sandbox of another session may claim the freed slot at once and add the same guard route."""

from __future__ import annotations

import os

from launcher.sandbox import fleet, netns, state


def guard_metrics() -> list[int]:
    """The metrics of the root namespace's guard routes (one per claimed slot)."""
    shown = netns.ip("route", "show", "type", "unreachable", "exact", netns.GUARD).stdout.split()
    return [int(shown[i + 1]) for i, word in enumerate(shown) if word == "metric"]


def assert_slot_released(st: state.SandboxState) -> None:
    """``st``'s slot has no root link and no guard route -- checked under the slot lock (no
    sandbox is mid-claim), unless another sandbox's state claims that slot by then (session 14's
    ci2 and session 15's ci5 saw such a sandbox's guard route after ``down``)."""
    with fleet._slot_lock():
        if any(o is not None and o.slot == st.slot for o in map(state.load, state.names())):
            return
        assert not os.path.exists(f"/sys/class/net/{st.root_ifname}")
        assert st.route_metric not in guard_metrics()
