"""The pure batch planner: budgets (N and N%), role filter, --limit, single replica, PD cohorts,
and every refusal's exact text."""

from __future__ import annotations

import pytest

from launcher.errors import UsageError
from launcher.model import HealthCheck, Role, Unit
from launcher.rolling.batches import Cohort, parse_budget, pd_cohorts, plan_roll, restart_groups


def unit(host: str, group: str, role: Role, rank: int = 0, *, serves: bool | None = None, dep: str = "d") -> Unit:
    leader = rank == 0 if serves is None else serves
    return Unit(
        host=host, name=f"fleet-{dep}-{group}-r{rank}", deployment=dep, role=role, group=f"{dep}/{group}", rank=rank,
        health=HealthCheck(url=f"http://{host}:30000/health", timeout_s=60) if leader else None,
    )  # fmt: skip


def singles(n: int) -> list[Unit]:
    return [unit(f"h{i + 1}", f"single{i}", "single") for i in range(n)]


def pd(prefill: int, decode: int, nodes: int = 1) -> list[Unit]:
    out: list[Unit] = []
    host = 0
    for role, count in (("prefill", prefill), ("decode", decode)):
        for i in range(count):
            for r in range(nodes):
                host += 1
                out.append(unit(f"h{host}", f"{role}{i}", role, r))  # type: ignore[arg-type]
    out.append(unit("ctl", "router", "router"))
    return out


def refusal(**kw: object) -> str:
    units = kw.pop("units")
    with pytest.raises(UsageError) as err:
        plan_roll(units, **kw)  # type: ignore[arg-type]
    return str(err.value)


# ---------------------------------------------------------------------------------------------
# budgets


@pytest.mark.parametrize(
    ("text", "total", "n"),
    [("1", 4, 1), ("2", 4, 2), (3, 4, 3), ("25%", 4, 1), ("50%", 4, 2), ("10%", 4, 1), ("33%", 9, 2), ("100%", 8, 8)],
)
def test_budget(text: str | int, total: int, n: int) -> None:
    assert parse_budget(text).of(total) == n


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("abc", "--max-unavailable 'abc': expected a count like 2 or a percentage like 25%"),
        ("-1", "--max-unavailable '-1': expected a count like 2 or a percentage like 25%"),
        ("2.5", "--max-unavailable '2.5': expected a count like 2 or a percentage like 25%"),
        ("0", "--max-unavailable '0': must be at least 1 (or 1%), or nothing would ever restart"),
        ("0%", "--max-unavailable '0%': must be at least 1 (or 1%), or nothing would ever restart"),
        ("101%", "--max-unavailable '101%': a percentage must be at most 100%"),
    ],
)
def test_budget_refusals(text: str, message: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_budget(text)
    assert str(err.value) == message


# ---------------------------------------------------------------------------------------------
# regular deployments


def test_one_group_at_a_time_in_plan_order() -> None:
    rp = plan_roll(singles(4), max_unavailable=1)
    assert rp.mode == "groups"
    assert rp.batches == (("d/single0",), ("d/single1",), ("d/single2",), ("d/single3",))
    assert rp.max_unavailable == 1 and rp.notes == () and rp.skipped == ()


@pytest.mark.parametrize(
    ("budget", "batches"),
    [
        ("2", (("d/single0", "d/single1"), ("d/single2", "d/single3"))),
        ("50%", (("d/single0", "d/single1"), ("d/single2", "d/single3"))),
        ("3", (("d/single0", "d/single1", "d/single2"), ("d/single3",))),
        ("75%", (("d/single0", "d/single1", "d/single2"), ("d/single3",))),
        ("25%", (("d/single0",), ("d/single1",), ("d/single2",), ("d/single3",))),
    ],
)
def test_max_unavailable_count_and_percent(budget: str, batches: tuple[tuple[str, ...], ...]) -> None:
    assert plan_roll(singles(4), max_unavailable=budget).batches == batches


def test_budget_of_every_replica_is_capped_unless_forced() -> None:
    rp = plan_roll(singles(4), max_unavailable="100%")
    assert rp.max_unavailable == 3
    assert rp.batches == (("d/single0", "d/single1", "d/single2"), ("d/single3",))
    assert rp.notes == ("--max-unavailable 100% covers all 4 replicas: capped at 3 so one keeps serving (--force allows all)",)
    forced = plan_roll(singles(4), max_unavailable="4", force=True)
    assert forced.batches == (("d/single0", "d/single1", "d/single2", "d/single3"),) and forced.notes == ()


def test_single_replica_needs_force() -> None:
    assert refusal(units=singles(1)) == (
        "deployment d has one replica (d/single0): restarting it takes the service down; pass --force to restart it anyway"
    )
    rp = plan_roll(singles(1), force=True)
    assert rp.batches == (("d/single0",),)
    assert rp.notes == ("one replica (d/single0): the service is down while it restarts (--force)",)


def test_multinode_group_is_one_restart_unit() -> None:
    units = [unit(h, f"rank{i}", "rank", r) for i, hosts in enumerate((("h1", "h2"), ("h3", "h4"))) for r, h in enumerate(hosts)]
    rp = plan_roll(units)
    assert rp.batches == (("d/rank0",), ("d/rank1",))
    assert [g.hosts for g in rp.groups] == [("h1", "h2"), ("h3", "h4")]
    assert [u.rank for u in rp.group("d/rank1").units] == [0, 1]


def test_ray_group_joins_its_serve_group() -> None:
    units = [
        unit("h1", "single0-ray", "single", 0, serves=False), unit("h2", "single0-ray", "single", 1, serves=False),
        unit("h1", "single0", "single", 0), *singles(2)[1:],
    ]  # fmt: skip
    groups = restart_groups(units)
    assert [(g.name, len(g.units)) for g in groups] == [("d/single0", 3), ("d/single1", 1)]
    assert groups[0].leader is not None and groups[0].leader.group == "d/single0"
    assert plan_roll(units).batches == (("d/single0",), ("d/single1",))


def test_infrastructure_is_not_rolled() -> None:
    rp = plan_roll([*singles(2), unit("h1", "gateway", "gateway")])
    assert rp.batches == (("d/single0",), ("d/single1",))
    assert rp.skipped == (("d/gateway", "infrastructure: not rolled (fleet up restarts it)"),)


def test_role_filter() -> None:
    assert plan_roll(singles(3), role="single").batches == (("d/single0",), ("d/single1",), ("d/single2",))
    assert refusal(units=singles(3), role="rank") == "--role rank: deployment d has no rank groups (roles: single)"


def test_limit_keeps_whole_groups_and_counts_the_whole_deployment() -> None:
    rp = plan_roll(singles(4), limit={"h2", "h3"}, max_unavailable="50%")
    assert rp.batches == (("d/single1", "d/single2"),)
    assert rp.skipped == (("d/single0", "outside --limit"), ("d/single3", "outside --limit"))
    # One replica inside the limit is fine: the others keep serving.
    assert plan_roll(singles(4), limit={"h4"}).batches == (("d/single3",),)


def test_limit_refusals() -> None:
    units = [unit("h1", "rank0", "rank", 0), unit("h2", "rank0", "rank", 1), unit("h3", "rank1", "rank", 0), unit("h4", "rank1", "rank", 1)]
    assert refusal(units=units, limit={"h1", "h3", "h4"}) == "--limit splits group 'd/rank0': it also runs on h2; include those hosts"
    assert refusal(units=singles(2), limit={"h9"}) == "nothing to roll: no group of deployment d matches --role/--limit"


def test_surge_is_for_pd_only() -> None:
    assert refusal(units=singles(2), surge=("h9",)) == "--surge: deployment d is not PD; its replicas roll in place (drop --surge)"


def test_no_units() -> None:
    assert refusal(units=[]) == "nothing to roll: the deployment has no units"


# ---------------------------------------------------------------------------------------------
# PD


def test_pd_cohorts_keep_the_ratio() -> None:
    assert pd_cohorts(["p0", "p1"], ["d0"]) == (Cohort(prefill=("p0", "p1"), decode=("d0",)),)
    assert pd_cohorts(["p0", "p1"], ["d0", "d1"]) == (
        Cohort(prefill=("p0",), decode=("d0",)), Cohort(prefill=("p1",), decode=("d1",))
    )  # fmt: skip
    assert pd_cohorts(["p0", "p1", "p2", "p3"], ["d0", "d1"]) == (
        Cohort(prefill=("p0", "p1"), decode=("d0",)), Cohort(prefill=("p2", "p3"), decode=("d1",))
    )  # fmt: skip
    assert pd_cohorts(["p0", "p1", "p2"], ["d0", "d1"]) == (Cohort(prefill=("p0", "p1", "p2"), decode=("d0", "d1")),)
    assert pd_cohorts([], ["d0"]) == ()


def test_pd_2p1d_without_surge_is_refused() -> None:
    assert refusal(units=pd(2, 1, nodes=2)) == (
        "PD deployment d is 2P1D: it cannot be split into cohorts of the same P:D ratio, and new-generation "
        "workers registered beside old ones would be paired with them; give --surge PATTERN with hosts for a "
        "second 2P1D cohort"
    )


def test_pd_splittable_without_surge_is_refused_too() -> None:
    assert refusal(units=pd(2, 2)) == (
        "PD deployment d is 2P2D (2 cohorts of 1P1D), but its one router pairs across cohorts, so cohorts cannot "
        "roll in place; give --surge PATTERN with hosts for a second 2P2D cohort"
    )


def test_pd_role_and_limit_are_refused() -> None:
    assert refusal(units=pd(2, 1), role="decode", surge=("s1", "s2", "s3", "s4")) == (
        "--role decode: PD deployment d rolls whole cohorts (prefill and decode of one generation together, "
        "never paired across generations); drop --role"
    )
    assert refusal(units=pd(2, 1), limit={"h1"}, surge=("s1", "s2", "s3", "s4")) == (
        "--limit: PD deployment d rolls whole cohorts (prefill and decode of one generation together, never "
        "paired across generations); drop --limit"
    )


def test_pd_surge_must_be_spare_and_big_enough() -> None:
    assert refusal(units=pd(2, 1), surge=("h3", "s1", "s2", "s3")) == (
        "--surge: h3 already runs deployment d; surge hosts must be spare"
    )
    assert refusal(units=pd(2, 1), surge=("s1", "s2")) == (
        "--surge: 2 host(s) given; a second 2P1D cohort of deployment d needs 4, as many as the first"
    )


def test_pd_without_router_is_refused() -> None:
    units = [u for u in pd(1, 1) if u.role != "router"]
    assert refusal(units=units, surge=("s1", "s2")) == "PD deployment d has no router unit to roll behind"


def test_pd_with_surge_is_one_cohort_switch() -> None:
    rp = plan_roll(pd(2, 1, nodes=2), surge=("s1", "s2", "s3", "s4", "s5", "s6", "s7"))
    assert rp.mode == "cohort"
    assert rp.batches == (("d/prefill0", "d/prefill1", "d/decode0", "d/router"),)
    assert rp.max_unavailable == 0
    assert rp.cohorts == (Cohort(prefill=("d/prefill0", "d/prefill1"), decode=("d/decode0",)),)
    assert rp.notes == (
        "cohort switch: a new 2P1D cohort comes up on the surge hosts (7 host(s) more while it rolls), traffic "
        "moves to it, then the old cohort is drained and retired",
    )
