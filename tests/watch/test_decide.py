"""The watch's pure decision per group (launcher/watch/decide.py): every rule, in its order,
with its exact reason text; the backoff and the crash-loop limit."""

from __future__ import annotations

import pytest

from launcher.deploy.watchstate import History
from launcher.runtimes.base import Liveness
from launcher.watch.decide import Decision, Policy, Rank, decide

G = "dep/rank0"
POLICY = Policy(backoff_base_s=10, backoff_cap_s=60, crash_limit=3, crash_window_s=600, probe_failures=3)
NOW = 10_000.0
URL = "http://10.0.0.1:30000"
ROUTER = "http://10.0.0.9:8000"


def ranks(*changes: dict[str, object]) -> list[Rank]:
    """Two ranks (h1 rank 0 with a health check, h2 headless), each as healthy as can be but
    for ``changes``."""
    base = [Rank(host="h1", unit="u-r0", checked=True), Rank(host="h2", unit="u-r1")]
    return [Rank(**{**{f: getattr(r, f) for f in Rank.__slots__}, **c}) for r, c in zip(base, (*changes, {}, {}))]  # type: ignore[arg-type]


def run(rs: list[Rank], history: History = History(), policy: Policy = POLICY, **kw: object) -> Decision:
    return decide(G, rs, history, policy, NOW, leader_url=URL, **kw)  # type: ignore[arg-type]


def test_healthy_group_in_its_router() -> None:
    assert run(ranks(), routers={ROUTER: frozenset({URL})}) == Decision(group=G, kind="healthy")


def test_a_dead_headless_rank_recreates_the_group_while_rank_0_answers() -> None:
    d = run(ranks({}, {"live": Liveness(state="exited", exit_code=137)}))
    assert (d.kind, d.reason) == ("recreate", "h2/u-r1 is exited (exit 137)")


def test_a_missing_rank_recreates() -> None:
    assert run(ranks({}, {"live": Liveness(state="missing")})).reason == "h2/u-r1 is missing"
    assert run(ranks({}, {"deployed": False, "live": Liveness(state="missing")})).reason == "h2/u-r1 is not deployed"


def test_a_rank_restarted_by_its_runtime_cannot_rejoin() -> None:
    d = run(ranks({}, {"live": Liveness(state="running", restarts=1)}))
    assert (d.kind, d.reason) == ("recreate", "h2/u-r1 was restarted by its runtime (1x): it cannot rejoin its group")


def test_a_single_rank_group_restarted_by_its_runtime_is_fine() -> None:
    one = [Rank(host="h1", unit="u-r0", checked=True, live=Liveness(state="running", restarts=2))]
    assert run(one).kind == "healthy"


def test_failing_health_checks_count_only_from_the_threshold() -> None:
    d = run(ranks({"probe_failures": 2}))
    assert (d.kind, d.reason) == ("unready", "h1/u-r0 does not answer its health check yet (2/3)")
    d = run(ranks({"probe_failures": 3}))
    assert (d.kind, d.reason) == ("recreate", "h1/u-r0 failed its health check 3 times in a row")


def test_an_unreachable_host_is_reported_and_nothing_is_done() -> None:
    d = run(ranks({}, {"reachable": False, "live": Liveness(state="missing")}))
    assert (d.kind, d.reason) == ("unreachable", "h2 did not answer")


def test_a_lost_host_goes_to_a_free_spare_after_spare_after_surveys() -> None:
    lost = {"reachable": False, "live": Liveness(state="missing")}
    assert run(ranks({}, {**lost, "away": 2}), spare=True).kind == "unreachable"
    d = run(ranks({}, {**lost, "away": 3}), spare=True)
    assert (d.kind, d.reason) == ("place", "h2 did not answer 3 surveys in a row")
    assert run(ranks({}, {**lost, "away": 9})).kind == "unreachable", "no free spare: reported only"


def test_nothing_deployed_is_fleet_ups_job() -> None:
    gone = {"deployed": False, "live": Liveness(state="missing")}
    assert run(ranks(gone, gone)).kind == "not-deployed"


def test_drift_is_reported_unless_applied() -> None:
    d = run(ranks({"drifted": True}))
    assert (d.kind, d.reason) == ("drift", "h1/u-r0 differ from the playbook (report only)")
    applied = Policy(apply_drift=True)
    d = run(ranks({"drifted": True}), policy=applied)
    assert (d.kind, d.reason) == ("recreate", "drift: h1/u-r0 differ from the playbook")


def test_changed_secret_values_are_drift() -> None:
    d = run(ranks({}, {"resecret": True}))
    assert (d.kind, d.reason) == ("drift", "secrets of h2/u-r1 differ from the playbook (report only)")
    d = run(ranks({}, {"resecret": True}), policy=Policy(apply_drift=True))
    assert (d.kind, d.reason) == ("recreate", "drift: secrets of h2/u-r1 differ from the playbook")


def test_a_broken_drifted_group_is_not_recreated_from_the_new_render() -> None:
    d = run(ranks({"drifted": True}, {"live": Liveness(state="exited", exit_code=1)}))
    assert d.kind == "drift"
    assert d.reason == ("h2/u-r1 is exited (exit 1), but h1/u-r0 drifted from the playbook: not recreated (fleet up "
                        "applies the playbook; --apply-drift lets the watch)")
    assert run(ranks({"drifted": True}, {"live": Liveness(state="exited")}), policy=Policy(apply_drift=True)).kind == "recreate"


def test_register_in_the_routers_that_answered_and_lack_it() -> None:
    other = "http://10.0.0.8:8000"
    d = run(ranks(), routers={ROUTER: frozenset(), other: None, "http://x:1": frozenset({URL + "/"})})
    assert (d.kind, d.routers, d.reason) == ("register", (ROUTER,), f"healthy, but missing from {ROUTER}")


def test_infrastructure_groups_are_never_registered() -> None:
    assert decide(G, ranks(), History(), POLICY, NOW, leader_url=None, routers={ROUTER: frozenset()}).kind == "healthy"


def test_a_dead_router_is_recreated_and_the_leaders_registered_again_once_it_answers() -> None:
    """A router is an infrastructure group of one rank: dead (killed, or its container gone), it is
    recreated like any broken group, without router steps (no leader URL); meanwhile the engine
    groups have nothing to register (their router does not answer); back without them, they are
    registered again."""
    dead = [Rank(host="h5", unit="fleet-dep-router", checked=True, live=Liveness(state="exited", exit_code=137))]
    d = decide("dep/router", dead, History(), POLICY, NOW, leader_url=None, routers={ROUTER: None})
    assert (d.kind, d.reason, d.routers) == ("recreate", "h5/fleet-dep-router is exited (exit 137)", ())
    gone = [Rank(host="h5", unit="fleet-dep-router", checked=True, live=Liveness(state="missing"))]
    assert decide("dep/router", gone, History(), POLICY, NOW).reason == "h5/fleet-dep-router is missing"
    assert run(ranks(), routers={ROUTER: None}).kind == "healthy"
    d = run(ranks(), routers={ROUTER: frozenset()})
    assert (d.kind, d.routers) == ("register", (ROUTER,))


@pytest.mark.parametrize(("done", "kind", "until"), [
    ((), "recreate", 0.0),
    ((NOW - 5,), "wait", NOW + 5),  # 10 s after the first
    ((NOW - 100, NOW - 15), "wait", NOW + 5),  # 20 s after the second
    ((NOW - 200, NOW - 100, NOW - 70), None, 0.0),  # the limit: 3 within the window
    ((NOW - 900, NOW - 700, NOW - 15), "recreate", 0.0),  # two of them outside the window: 10 s backoff
])  # fmt: skip
def test_backoff_and_crash_loop(done: tuple[float, ...], kind: str | None, until: float) -> None:
    d = run(ranks({}, {"live": Liveness(state="exited", exit_code=1)}), history=History(recreations=done))
    if kind is None:
        assert d.kind == "give-up"
        assert d.reason == ("crash loop: h2/u-r1 is exited (exit 1) after 3 recreations within 600s; the watch stops "
                            "acting on it until it is redeployed (fleet up)")
    else:
        assert (d.kind, d.until) == (kind, until)


def test_backoff_is_exponential_and_capped() -> None:
    assert [POLICY.backoff_s(n) for n in range(0, 6)] == [0, 10, 20, 40, 60, 60]


def test_the_wait_says_when() -> None:
    d = run(ranks({"live": Liveness(state="exited")}), history=History(recreations=(NOW - 4,)))
    assert d.reason == "h1/u-r0 is exited; backoff after recreation 1: next attempt in 6s"


def test_a_group_given_up_stays_given_up() -> None:
    d = run(ranks({"live": Liveness(state="exited")}), history=History(failed="crash loop: x"))
    assert (d.kind, d.reason) == ("failed", "crash loop: x")
