"""The transfer schedule: every host gets every item it lacks exactly once, only from a node
that already holds it, each link carrying at most ``slots`` transfers at once; hosts pass files
on rarest first (each file reaches N hosts in ~log2(N) hops, not N-1 as in a chain), and the
source is read once per item when hosts can relay."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings, strategies as st

from launcher.weights.spread import SOURCE, Spread, Transfer, chunk_bytes

Item = tuple[str, str]


def _check(running: list[Transfer], holders: dict[Item, set[str]], slots: int, source_host: str | None = None) -> None:
    links = Counter(source_host if t.src == SOURCE and source_host else t.src for t in running)
    assert max(links.values(), default=0) <= slots, f"a link sends more than {slots} at once: {running}"
    receivers = Counter(t.dst for t in running)
    assert max(receivers.values(), default=0) <= slots, f"a host receives more than {slots} at once: {running}"
    for t in running:
        assert t.src == SOURCE or all(t.src in holders.get(i, set()) for i in t.items), f"{t} from a node without it"
        assert len({m for m, _ in t.items}) == 1, f"{t} mixes models"


def _rounds(spread: Spread, holders: dict[Item, set[str]], slots: int = 1) -> list[list[Transfer]]:
    """Drives the schedule in lock-step rounds (all in-flight transfers finish together), checking
    the invariants on the way; returns the rounds."""
    rounds: list[list[Transfer]] = []
    running = spread.start()
    while running:
        rounds.append(running)
        _check(running, holders, slots)
        nxt: list[Transfer] = []
        for t in running:
            for i in t.items:
                holders.setdefault(i, set()).add(t.dst)
            nxt.extend(spread.done(t))
        running = nxt
    assert spread.finished
    return rounds


def _files(n: int) -> list[Item]:
    return [("m", f"f{i}") for i in range(n)]


def _t(src: str, dst: str, *files: str) -> Transfer:
    return Transfer(items=tuple(("m", f) for f in files), src=src, dst=dst)


def test_hosts_pass_files_on_rarest_first() -> None:
    spread = Spread({h: _files(4) for h in ("h1", "h2", "h3")}, slots=1)
    rounds = _rounds(spread, {})
    assert rounds[:3] == [
        [_t(SOURCE, "h1", "f0")],
        # h2 lacks the most: the source's next new file; h3 gets f0 from h1 meanwhile.
        [_t(SOURCE, "h2", "f1"), _t("h1", "h3", "f0")],
        [_t(SOURCE, "h1", "f2"), _t("h1", "h2", "f0"), _t("h2", "h3", "f1")],
    ]
    from_source = [i for r in rounds for t in r if t.src == SOURCE for i in t.items]
    assert sorted(from_source) == _files(4)  # the source is read once per file
    assert len(rounds) == 6


def test_a_file_reaches_n_hosts_in_log_hops_not_a_chain() -> None:
    # One file per round from the source: a chain needs files + hosts - 1 rounds (63 here); rarest
    # first needs files + about log2(hosts + 1) (48 + 5 = 53).
    spread = Spread({f"h{i:02d}": _files(48) for i in range(16)}, slots=1)
    assert len(_rounds(spread, {})) == 55


def test_two_slots_start_the_next_transfer_while_one_runs() -> None:
    spread = Spread({"h1": _files(3), "h2": _files(3)})
    # The source's link takes two transfers at once.
    assert spread.start() == [_t(SOURCE, "h1", "f0"), _t(SOURCE, "h2", "f1")]
    # h1 got f0: its free slot takes the source's next new file, h2's free slot f0 from h1.
    assert spread.done(_t(SOURCE, "h1", "f0")) == [_t(SOURCE, "h1", "f2"), _t("h1", "h2", "f0")]
    # h2 got f1: h1, receiving f2 from the source, takes f1 from h2 at the same time.
    assert spread.done(_t(SOURCE, "h2", "f1")) == [_t("h2", "h1", "f1")]


def test_without_host_relay_every_copy_comes_from_the_source() -> None:
    rounds = _rounds(Spread({h: _files(2) for h in ("h1", "h2", "h3")}, use_hosts=False, slots=2), {}, slots=2)
    assert all(t.src == SOURCE for r in rounds for t in r)
    assert len(rounds) == 3  # one link, two at a time: six copies in three rounds


def test_holders_serve_the_hosts_that_lack_a_file() -> None:
    spread = Spread({"h2": [("m", "f1")], "h4": [("m", "f0")]},
                    {("m", "f0"): ["h1", "h3"], ("m", "f1"): ["h1", "h3", "h4"]}, slots=1)
    assert spread.start() == [_t("h1", "h2", "f1"), _t("h3", "h4", "f0")]


def test_the_source_host_and_its_own_copy_share_one_uplink() -> None:
    spread = Spread({"h2": [("m", "f0")], "h3": [("m", "f0")]}, {("m", "f0"): ["h1"]}, source_host="h1", slots=1)
    assert spread.start() == [_t("h1", "h2", "f0")]


def test_a_failed_host_is_given_up_and_what_only_it_held_comes_from_the_source_again() -> None:
    spread = Spread({"h9": [("m", "f1")], "h1": [("m", "f0")], "h2": [("m", "f0")]}, {("m", "f0"): ["h9"]}, slots=1)
    assert spread.start() == [_t(SOURCE, "h9", "f1"), _t("h9", "h1", "f0")]  # h2 waits: f0 is held and flying
    assert spread.failed(_t(SOURCE, "h9", "f1")) == []  # h9 is never a sender again; f0 still flies to h1
    # h1's transfer fails too: nobody usable holds f0 or is getting it, so the source sends it.
    assert spread.failed(_t("h9", "h1", "f0")) == [_t(SOURCE, "h2", "f0")]
    assert spread.done(_t(SOURCE, "h2", "f0")) == [] and spread.finished


def test_a_dead_holder_is_retired_and_every_receiver_completes() -> None:
    """Issue 25 item 8: one dead holder (every link from it fails, blamed on neither side for
    sure) and six receivers: the holder is retired after failing two receivers, they fetch from
    the others or the source, and every receiver gets everything."""
    receivers = [f"r{i}" for i in range(6)]
    spread = Spread({r: _files(3) for r in receivers}, {i: ["dead"] for i in _files(3)}, slots=2)
    running, got, failures = spread.start(), set(), 0
    while running:
        t = running.pop(0)
        if t.src == "dead":
            failures += 1
            nxt = spread.failed(t, "either", "ssh: connect to host dead port 22: Connection refused")
        else:
            got.update((t.dst, i) for i in t.items)
            nxt = spread.done(t)
        # Retired after its second receiver's failure: never picked again.
        assert failures < 2 or all(n.src != "dead" for n in nxt), nxt
        running += nxt
    assert spread.finished and spread.given_up == {}
    assert got == {(r, i) for r in receivers for i in _files(3)}


def test_a_sender_blamed_is_never_picked_again() -> None:
    spread = Spread({"h1": [("m", "f0")], "h2": [("m", "f0")]}, {("m", "f0"): ["h9", "h8"]}, slots=1)
    assert spread.start() == [_t("h8", "h1", "f0"), _t("h9", "h2", "f0")]
    assert spread.failed(_t("h9", "h2", "f0"), "sender") == []  # h8 busy, the source must wait for it
    assert spread.done(_t("h8", "h1", "f0")) == [_t("h1", "h2", "f0")]


def test_a_receiver_failing_from_two_senders_is_given_up_and_named() -> None:
    spread = Spread({"h1": [("m", "f0")]}, {("m", "f0"): ["h8", "h9"]}, slots=1)
    assert spread.start() == [_t("h8", "h1", "f0")]
    assert spread.failed(_t("h8", "h1", "f0"), "either", "e1") == [_t("h9", "h1", "f0")]
    assert spread.failed(_t("h9", "h1", "f0"), "either", "e2") == []
    assert spread.finished and spread.given_up == {"h1": "e2"}


def test_a_receiver_nobody_can_serve_is_given_up() -> None:
    """The source's link to h1 failed and nobody else holds f0: h1 cannot get it from anyone."""
    spread = Spread({"h1": [("m", "f0")]}, slots=1)
    assert spread.start() == [_t(SOURCE, "h1", "f0")]
    assert spread.failed(_t(SOURCE, "h1", "f0"), "either", "e") == []
    assert spread.finished and spread.given_up == {"h1": "no reachable node can send it f0"}


def test_a_batch_holds_rare_files_up_to_the_chunk_and_only_ones_the_sender_has() -> None:
    items = _files(5) + [("d", "g0")]
    sizes = dict.fromkeys(items, 10)
    spread = Spread({"h1": items, "h2": items}, {("m", "f3"): ["h9"]}, sizes=sizes, chunk=25, slots=1)
    # From the source: files no host holds, until the batch reaches 25 bytes (f3 is h9's to send).
    first, second = spread.start()
    assert first == _t(SOURCE, "h1", "f0", "f1", "f2")
    assert second == _t("h9", "h2", "f3")
    # h1's rarest: f4 and g0 (nobody has them); the source sends f4 alone (g0 is another model).
    assert spread.done(first) == [_t(SOURCE, "h1", "f4")]
    # h2's rarest is g0, but the source is busy: the next rarest come from h1 in one batch.
    assert spread.done(second) == [_t("h1", "h2", "f0", "f1", "f2")]


def test_the_chunk_is_a_sixth_of_the_bytes_per_hop() -> None:
    sizes = {("m", "a"): 600, ("m", "b"): 600}
    assert chunk_bytes(sizes, 1) == 200  # one hop
    assert chunk_bytes(sizes, 2) == 100  # source + 2 hosts: two hops
    assert chunk_bytes(sizes, 15) == 50  # 16 nodes: four hops
    assert chunk_bytes({}, 0) == 0


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(0, 40), st.integers(1, 2), st.data())
def test_every_host_gets_exactly_what_it_lacks(n_hosts: int, n_files: int, chunk: int, slots: int,
                                               data: st.DataObject) -> None:
    """Transfers finish in any order; some fail, blamed on either side: the schedule ends, each
    host it did not give up gets exactly what it lacked, and with no failure the source sends
    each file at most once."""
    hosts = [f"h{i}" for i in range(n_hosts)]
    items = _files(n_files)
    holders: dict[Item, set[str]] = {}
    wants: dict[str, list[Item]] = {}
    for h in hosts:
        lacks = data.draw(st.lists(st.sampled_from(items), unique=True))
        wants[h] = [i for i in items if i in lacks]
        for i in items:
            if i not in lacks:
                holders.setdefault(i, set()).add(h)
    fail = data.draw(st.lists(st.integers(0, 200), max_size=3))
    blames = data.draw(st.lists(st.sampled_from(["receiver", "sender", "either"]), min_size=3, max_size=3))
    spread = Spread(wants, {k: sorted(v) for k, v in holders.items()}, sizes=dict.fromkeys(items, 10),
                    chunk=chunk, slots=slots)  # fmt: skip
    running, got, failed, steps = spread.start(), [], set(), 0
    sent = Counter(i for t in running if t.src == SOURCE for i in t.items)
    while running:
        _check(running, holders, slots)
        t = running.pop(data.draw(st.integers(0, len(running) - 1)))
        steps += 1
        if steps in fail:
            nxt = spread.failed(t, blames[fail.index(steps)])  # type: ignore[arg-type]
            failed.update(spread.given_up)
        else:
            got += [(t.dst, i) for i in t.items]
            if t.dst not in failed:
                for i in t.items:
                    holders.setdefault(i, set()).add(t.dst)
            nxt = spread.done(t)
        sent.update(i for n in nxt if n.src == SOURCE for i in n.items)
        running += nxt
    assert spread.finished
    failed.update(spread.given_up)
    ok = sorted(set(x for x in got if x[0] not in failed))
    assert ok == sorted((h, i) for h in hosts if h not in failed for i in wants[h])
    if not any(0 < s <= steps for s in fail):  # no transfer failed: nothing was sent twice
        assert len(got) == len(set(got))
        assert max(sent.values(), default=0) <= 1, "the source sent a file twice"
