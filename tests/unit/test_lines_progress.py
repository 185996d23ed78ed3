"""LinesProgress (plain lines for logs and non-TTYs): the health gate's repeated ``waiting`` tick
is written at most every ``repeat_s`` per unit; every other event, repeated or not, is written."""

from __future__ import annotations

import io

from launcher.output import Event, LinesProgress


def test_waiting_ticks_are_thinned_per_unit_and_other_events_all_written() -> None:
    now = [0.0]
    out = io.StringIO()
    p = LinesProgress(out, repeat_s=30.0, clock=lambda: now[0])
    for t in range(0, 70, 3):  # the gate's ticks every 3 s, two units
        now[0] = float(t)
        p.update(Event(host="h1", unit="u", state="waiting", detail=f"{t}s"))
        p.update(Event(host="h2", unit="u", state="waiting", detail=f"{t}s"))
    now[0] = 70.0
    p.update(Event(host="h1", unit="u", state="healthy"))
    p.update(Event(host="h1", unit="g", state="out of router", detail="http://r1"))
    p.update(Event(host="h1", unit="g", state="out of router", detail="http://r2"))  # another router: written
    p.update(Event(host="h1", unit="u", state="waiting", detail="1s"))  # a new wait after another state
    assert out.getvalue().splitlines() == [
        "h1/u: waiting 0s", "h2/u: waiting 0s",
        "h1/u: waiting 30s", "h2/u: waiting 30s",
        "h1/u: waiting 60s", "h2/u: waiting 60s",
        "h1/u: healthy",
        "h1/g: out of router http://r1", "h1/g: out of router http://r2",
        "h1/u: waiting 1s",
    ]  # fmt: skip
