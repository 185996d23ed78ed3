"""The transfer schedule: every host gets every item it lacks exactly once, only from a node
that already holds it, each node sending and receiving one file at a time; hosts pass files on
(a pipelined chain), and the source is read once per item when hosts can relay."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from launcher.weights.spread import SOURCE, Spread, Transfer, chunk_bytes


def _run(spread: Spread, holders: dict[tuple[str, str], set[str]]) -> list[list[Transfer]]:
    """Drives the schedule in lock-step rounds (all in-flight transfers finish together), checking
    the invariants on the way; returns the rounds."""
    rounds: list[list[Transfer]] = []
    running = spread.start()
    while running:
        rounds.append(running)
        senders = [t.src for t in running]
        assert len(senders) == len(set(senders)), "a node sends two files at once"
        receivers = [t.dst for t in running]
        assert len(receivers) == len(set(receivers)), "a host receives two files at once"
        for t in running:
            assert t.src == SOURCE or all(t.src in holders.get(i, set()) for i in t.items), f"{t} from a node without it"
            assert len({m for m, _ in t.items}) == 1, f"{t} mixes models"
        nxt: list[Transfer] = []
        for t in running:
            for i in t.items:
                holders.setdefault(i, set()).add(t.dst)
            nxt.extend(spread.done(t))
        running = nxt
    assert spread.finished
    return rounds


def test_a_chain_pipelines_files_from_host_to_host() -> None:
    items = [("m", f"f{i}") for i in range(4)]
    spread = Spread({h: items for h in ("h1", "h2", "h3")})
    rounds = _run(spread, {})
    # files + hosts - 1 rounds, not files * hosts: h2 fetches f0 from h1 while h1 fetches f1 ...
    assert len(rounds) == 4 + 3 - 1
    assert rounds[1] == [Transfer(items=(("m", "f1"),), src=SOURCE, dst="h1"), Transfer(items=(("m", "f0"),), src="h1", dst="h2")]
    from_source = [t for r in rounds for t in r if t.src == SOURCE]
    assert sorted(i for t in from_source for i in t.items) == items  # the source is read once per file


def test_without_host_relay_every_copy_comes_from_the_source() -> None:
    items = [("m", "f0"), ("m", "f1")]
    rounds = _run(Spread({h: items for h in ("h1", "h2", "h3")}, use_hosts=False), {})
    assert all(t.src == SOURCE for r in rounds for t in r)
    assert len(rounds) == 6  # one link: six copies one after the other


def test_holders_serve_the_hosts_that_lack_a_file() -> None:
    spread = Spread({"h2": [("m", "f1")], "h4": [("m", "f0")]},
                    {("m", "f0"): ["h1", "h3"], ("m", "f1"): ["h1", "h3", "h4"]})
    assert spread.start() == [Transfer(items=(("m", "f1"),), src="h1", dst="h2"),
                              Transfer(items=(("m", "f0"),), src="h3", dst="h4")]


def test_the_source_host_and_its_own_copy_share_one_uplink() -> None:
    spread = Spread({"h2": [("m", "f0")], "h3": [("m", "f0")]}, {("m", "f0"): ["h1"]}, source_host="h1")
    assert spread.start() == [Transfer(items=(("m", "f0"),), src="h1", dst="h2")]


def test_a_failed_host_is_given_up_and_never_used_as_a_sender() -> None:
    spread = Spread({"h1": [("m", "f0"), ("m", "f1")], "h2": [("m", "f0")]})
    (first,) = spread.start()
    assert first == Transfer(items=(("m", "f0"),), src=SOURCE, dst="h1")
    assert spread.failed(first) == [Transfer(items=(("m", "f0"),), src=SOURCE, dst="h2")]


def test_a_batch_holds_files_up_to_the_chunk_and_only_ones_the_sender_has() -> None:
    items = [("m", f"f{i}") for i in range(5)] + [("d", "g0")]
    sizes = dict.fromkeys(items, 10)
    spread = Spread({"h1": items, "h2": items}, {("m", "f3"): ["h9"]}, sizes=sizes, chunk=25)
    # From the source: files no host holds, until the batch reaches 25 bytes (f3 is h9's to send).
    first, second = spread.start()
    assert first == Transfer(items=(("m", "f0"), ("m", "f1"), ("m", "f2")), src=SOURCE, dst="h1")
    assert second == Transfer(items=(("m", "f3"),), src="h9", dst="h2")
    # The other model is a batch of its own.
    assert spread.done(first) == [Transfer(items=(("m", "f4"),), src=SOURCE, dst="h1")]
    # h2 catches up from h1 with one transfer of what h1 has.
    assert spread.done(second) == [Transfer(items=(("m", "f0"), ("m", "f1"), ("m", "f2")), src="h1", dst="h2")]


def test_the_chunk_is_a_quarter_copy_per_receiver() -> None:
    assert chunk_bytes({("m", "a"): 600, ("m", "b"): 200}, 2) == 100
    assert chunk_bytes({}, 0) == 0


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(0, 40), st.data())
def test_every_host_gets_exactly_what_it_lacks(n_hosts: int, n_files: int, chunk: int, data: st.DataObject) -> None:
    hosts = [f"h{i}" for i in range(n_hosts)]
    items = [("m", f"f{i}") for i in range(n_files)]
    holders: dict[tuple[str, str], set[str]] = {}
    wants: dict[str, list[tuple[str, str]]] = {}
    for h in hosts:
        lacks = data.draw(st.lists(st.sampled_from(items), unique=True))
        wants[h] = [i for i in items if i in lacks]
        for i in items:
            if i not in lacks:
                holders.setdefault(i, set()).add(h)
    sizes = {i: 10 for i in items}
    rounds = _run(Spread(wants, {k: sorted(v) for k, v in holders.items()}, sizes=sizes, chunk=chunk),
                  {k: set(v) for k, v in holders.items()})
    got = sorted((t.dst, i) for r in rounds for t in r for i in t.items)
    assert got == sorted((h, i) for h in hosts for i in wants[h])
