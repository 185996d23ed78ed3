"""up/down against simulated hosts: idempotence, whole-group restarts, failure teardown, locks,
secrets, check/diff without writes."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from launcher.deploy import orchestrate
from launcher.runtimes import container
from launcher.deploy.lock import LockedError, lock_dir
from launcher.deploy.manifest import Manifest, dumps, parse
from launcher.deploy.orchestrate import Options, down, up
from launcher.errors import ExitCode, HostKeyError
from launcher.execute import files
from launcher.model import Host
from tests.deploy.conftest import SimFleet
from tests.deploy.factory import pp_plan, target

FAST = Options(forks=4, timeout_s=5.0)
D = "/etc/fleet/demo"


def outcomes(report: orchestrate.Report) -> dict[str, str]:
    return {u.unit: u.outcome for u in report.units}


def test_first_up_starts_every_unit_in_order_and_writes_manifests(sim: SimFleet) -> None:
    report = up(target(pp_plan()), sim.connect, FAST)
    assert report.errors == ()
    assert report.exit_code == ExitCode.OK
    assert set(outcomes(report).values()) == {"healthy"}
    m = sim["h1"].manifest(f"{D}/fleet-demo-rank-r0")
    assert m is not None and m["generation"] == 1 and m["host"] == "h1" and m["recipe"] == "fam/pp"
    # router (start_order 2) only after both ranks were started
    starts = [(h, e) for h in ("h1", "h2", "h3") for e in sim[h].log if e[0] == "sh" and len(e) == 2]
    assert len(starts) == 3
    for h in ("h1", "h2", "h3"):
        assert not any(k.endswith("/owner") for k in sim[h].files), "lock released"
        assert sim[h].closed


def test_second_up_unchanged_restarts_nothing(sim: SimFleet) -> None:
    up(target(pp_plan()), sim.connect, FAST)
    writes = {h: sim[h].writes for h in ("h1", "h2", "h3")}
    report = up(target(pp_plan()), sim.connect, FAST)
    assert set(outcomes(report).values()) == {"unchanged"}
    assert {h: sim[h].writes for h in ("h1", "h2", "h3")} == writes
    assert all(c.starts == 1 for h in ("h1", "h2", "h3") for c in sim[h].containers.values())
    assert report.exit_code == ExitCode.OK


def test_changed_engine_args_restart_the_whole_group_only(sim: SimFleet) -> None:
    up(target(pp_plan()), sim.connect, FAST)
    report = up(target(pp_plan(args=("--max-running-requests", "8"))), sim.connect, FAST)
    assert outcomes(report) == {
        "fleet-demo-rank-r0": "healthy",
        "fleet-demo-rank-r1": "healthy",
        "fleet-demo-router": "unchanged",
    }
    assert sim["h1"].containers["fleet-demo-rank-r0"].starts == 2
    assert sim["h2"].containers["fleet-demo-rank-r1"].starts == 2
    assert sim["h3"].containers["fleet-demo-router"].starts == 1
    m = sim["h2"].manifest(f"{D}/fleet-demo-rank-r1")
    assert m is not None and m["generation"] == 2
    prev = sim["h2"].manifest(f"{D}/fleet-demo-rank-r1/prev")
    assert prev is not None and prev["generation"] == 1
    assert f"{D}/fleet-demo-rank-r1/prev{D}/fleet-demo-rank-r1/run.sh" in sim["h2"].files


def test_every_rank_of_a_group_is_held_on_every_host_before_any_rank_stops(sim: SimFleet) -> None:
    # Once one rank stops the others die, and docker would restart them mid-stop: all are held.
    up(target(pp_plan()), sim.connect, FAST)
    sim.journal.clear()
    up(target(pp_plan(args=("--max-running-requests", "8"))), sim.connect, FAST)
    kinds = [k for k, _, _ in sim.journal]
    assert sorted(sim.journal[:2]) == [("hold", "h1", "fleet-demo-rank-r0"), ("hold", "h2", "fleet-demo-rank-r1")]
    assert kinds == ["hold", "hold", "stop", "stop"]
    # The serving rank stops (and drains) first: it would die at once if a peer went first.
    assert sim.journal[2:] == [("stop", "h1", "fleet-demo-rank-r0"), ("stop", "h2", "fleet-demo-rank-r1")]
    sim.journal.clear()
    down(target(pp_plan()), sim.connect, FAST)
    kinds = [k for k, _, _ in sim.journal]
    assert kinds[:3] == ["hold"] * 3 and kinds[3:] == ["stop"] * 3
    # Router first (reverse start order), then the group's serving rank, then its peer.
    assert sim.journal[3:] == [("stop", "h3", "fleet-demo-router"), ("stop", "h1", "fleet-demo-rank-r0"),
                               ("stop", "h2", "fleet-demo-rank-r1")]  # fmt: skip


def test_a_dead_rank_restarts_its_group(sim: SimFleet) -> None:
    up(target(pp_plan()), sim.connect, FAST)
    sim["h2"].containers["fleet-demo-rank-r1"].state = "exited"
    report = up(target(pp_plan()), sim.connect, FAST)
    reasons = {u.unit: u.reason for u in report.units}
    assert reasons["fleet-demo-rank-r0"] == "h2/fleet-demo-rank-r1 is exited"
    assert sim["h1"].containers["fleet-demo-rank-r0"].starts == 2
    assert outcomes(report)["fleet-demo-router"] == "unchanged"
    # same content: same generation, and prev/ still holds nothing newer than before
    m = sim["h1"].manifest(f"{D}/fleet-demo-rank-r0")
    assert m is not None and m["generation"] == 1


def test_rank_dying_at_start_tears_its_group_down_and_stops_the_line(sim: SimFleet) -> None:
    sim["h2"].fail_start.add("fleet-demo-rank-r1")
    report = up(target(pp_plan()), sim.connect, FAST)
    assert report.exit_code == ExitCode.FAILED
    assert report.errors == (
        "h2: sh /etc/fleet/demo/fleet-demo-rank-r1/run.sh: fleet-demo-rank-r1 exited while its group "
        "was starting (exit 4): FATAL: rendezvous with rank 0 failed",
    )
    assert outcomes(report) == {
        "fleet-demo-rank-r0": "failed",
        "fleet-demo-rank-r1": "failed",
        "fleet-demo-router": "skipped",
    }
    assert "fleet-demo-rank-r0" not in sim["h1"].containers, "the healthy-looking rank 0 is torn down too"
    assert sim["h3"].containers == {}
    details = {u.unit: u.detail for u in report.units}
    assert "FATAL" in details["fleet-demo-rank-r1"], "the log lines are shown under the rank that died"
    assert details["fleet-demo-rank-r0"] == "" and details["fleet-demo-router"] == ""
    assert not any(k.endswith("/owner") for h in ("h1", "h2", "h3") for k in sim[h].files)


def test_a_failed_teardown_is_reported_with_the_failure(sim: SimFleet) -> None:
    sim["h2"].fail_start.add("fleet-demo-rank-r1")
    sim["h1"].fail_stop.add("fleet-demo-rank-r0")
    report = up(target(pp_plan()), sim.connect, FAST)
    assert report.exit_code == ExitCode.FAILED
    assert report.errors == (
        "h2: sh /etc/fleet/demo/fleet-demo-rank-r1/run.sh: fleet-demo-rank-r1 exited while its group "
        "was starting (exit 4): FATAL: rendezvous with rank 0 failed; tearing it down on h1 failed too: "
        "stop fleet-demo-rank-r0: exit 1: Error response from daemon: cannot remove container "
        "fleet-demo-rank-r0: device or resource busy",
    )
    assert "fleet-demo-rank-r0" in sim["h1"].containers, "the simulated daemon refused the stop"
    assert "fleet-demo-rank-r1" not in sim["h2"].containers
    assert not any(k.endswith("/owner") for h in ("h1", "h2", "h3") for k in sim[h].files)


def test_health_deadline_fails_the_group(sim: SimFleet) -> None:
    sim["h1"].unhealthy.add("fleet-demo-rank-r0")
    report = up(target(pp_plan()), sim.connect, Options(timeout_s=0.5))
    assert report.exit_code == ExitCode.FAILED
    assert report.errors[0].startswith(
        "h1: sh /etc/fleet/demo/fleet-demo-rank-r0/run.sh: fleet-demo-rank-r0 not healthy at "
        "http://h1:30000/health after "
    )
    assert sim["h1"].containers == {} and sim["h2"].containers == {}


def test_missing_image_fails_before_anything_is_stopped(sim: SimFleet) -> None:
    up(target(pp_plan()), sim.connect, FAST)
    sim["h3"].missing_images.add("router:2")
    plan = pp_plan()
    plan = type(plan)(
        deployment=plan.deployment,
        recipe=plan.recipe,
        units=(*plan.units[:2], orchestrate_replace_image(plan.units[2], "router:2")),
    )
    report = up(target(plan), sim.connect, FAST)
    assert report.errors == (
        "h3: docker pull router:2: exit 1: Error response from daemon: manifest for router:2 not found",
    )
    assert sim["h3"].containers["fleet-demo-router"].starts == 1, "old router still serving"
    assert report.exit_code == ExitCode.PARTIAL


def orchestrate_replace_image(u: object, image: str) -> object:
    from dataclasses import replace

    assert hasattr(u, "container")
    return replace(u, container=replace(u.container, image=image))  # type: ignore[type-var, attr-defined]


def test_lock_held_elsewhere_refuses_and_releases_own_locks(sim: SimFleet) -> None:
    sim["h2"].files[lock_dir("demo") + "/owner"] = (b"alice@ctl pid=1 time=T id=x\n", 0o644)
    with pytest.raises(LockedError) as err:
        up(target(pp_plan()), sim.connect, FAST)
    assert str(err.value) == (
        "h2: deployment 'demo' is locked by alice@ctl pid=1 time=T id=x; "
        "if that deploy is dead, run `fleet unlock` (or pass --break-lock)"
    )
    assert not any(k.endswith("/owner") for k in sim["h1"].files)
    assert sim["h2"].files[lock_dir("demo") + "/owner"][0].startswith(b"alice@"), "theirs left alone"
    assert sim["h1"].containers == {}
    report = up(target(pp_plan()), sim.connect, Options(timeout_s=5.0, break_lock=True))
    assert report.exit_code == ExitCode.OK


def test_unknown_host_key_stops_before_anything_runs(sim: SimFleet) -> None:
    def connect(host: Host) -> object:
        if host.name == "h3":
            raise HostKeyError("h3", "is unknown (not in ~/.ssh/known_hosts)")
        return sim.connect(host)

    with pytest.raises(HostKeyError):
        up(target(pp_plan()), connect, FAST)  # type: ignore[arg-type]
    assert sim["h1"].log == [] and sim["h2"].log == []


def test_secret_goes_to_a_0600_file_and_never_into_argv_or_reports(sim: SimFleet) -> None:
    token = "hf_s3cr3tVALUE"
    report = up(target(pp_plan(secret=True), {"HF_TOKEN": token}), sim.connect, FAST)
    assert report.exit_code == ExitCode.OK
    data, mode = sim["h1"].files[f"{D}/fleet-demo-rank-r0/secrets.env"]
    assert data == f"HF_TOKEN={token}\n".encode() and mode == 0o600
    for h in ("h1", "h2", "h3"):
        for entry in sim[h].log:
            assert token not in " ".join(entry)
        for path, (content, mode) in sim[h].files.items():
            if token.encode() in content:
                assert mode == 0o600, path
    assert token not in repr(report)


def test_check_diff_touches_nothing_and_shows_no_secret_text(sim: SimFleet) -> None:
    # Quotes and line breaks: the value is written shell-quoted over several lines, so masking
    # the raw value or the NAME= line would let the rest show (issue 16 item 2).
    old_value, new_value = "old 'tok'\nOLD-SECOND-LINE", 'new"tok\nNEW-SECOND-LINE'
    up(target(pp_plan(secret=True), {"HF_TOKEN": old_value}), sim.connect, FAST)
    before = {h: dict(sim[h].files) for h in ("h1", "h2", "h3")}
    logged = {h: len(sim[h].log) for h in ("h1", "h2", "h3")}
    report = up(
        target(pp_plan(secret=True, args=("--max-running-requests", "8")), {"HF_TOKEN": new_value}),
        sim.connect,
        Options(check=True, diff=True),
    )
    assert {h: sim[h].files for h in ("h1", "h2", "h3")} == before
    assert all(c.starts == 1 for h in ("h1", "h2", "h3") for c in sim[h].containers.values())
    assert {u.unit: u.outcome for u in report.units} == {
        "fleet-demo-rank-r0": "planned",
        "fleet-demo-rank-r1": "planned",
        "fleet-demo-router": "unchanged",
    }
    new_calls = [e for h in ("h1", "h2", "h3") for e in sim[h].log[logged[h]:]]
    assert not [e for e in new_calls if e[0] == "put"]
    assert not [e for e in new_calls if e[:2] == ("sh", "-c") and "docker rm" in e[2]]
    assert "+++ h1:/etc/fleet/demo/fleet-demo-rank-r0/run.sh" in report.diff
    assert "--max-running-requests 8" in report.diff
    for fragment in ("OLD-SECOND-LINE", "NEW-SECOND-LINE", "tok"):
        assert fragment not in report.diff
    assert "secrets.env\n" not in report.diff.replace(": secret HF_TOKEN: changed\n", ""), "never diffed"
    assert "h1:/etc/fleet/demo/fleet-demo-rank-r0/secrets.env: secret HF_TOKEN: changed\n" in report.diff
def test_down_removes_units_keeps_prev_and_drops_secrets(sim: SimFleet) -> None:
    up(target(pp_plan(secret=True), {"HF_TOKEN": "tok"}), sim.connect, FAST)
    report = down(target(pp_plan(secret=True)), sim.connect, FAST)
    assert report.exit_code == ExitCode.OK
    assert [u.unit for u in report.units] == ["fleet-demo-router", "fleet-demo-rank-r0", "fleet-demo-rank-r1"]
    for h in ("h1", "h2", "h3"):
        assert sim[h].containers == {}
        current = [k for k in sim[h].files if k.startswith(D) and "/prev/" not in k]
        assert current == []
        assert not any(k.endswith("secrets.env") for k in sim[h].files)
    assert f"{D}/fleet-demo-rank-r0/prev{D}/fleet-demo-rank-r0/run.sh" in sim["h1"].files
    again = down(target(pp_plan()), sim.connect, FAST)
    assert again.units == () and again.exit_code == ExitCode.OK


def test_down_without_keep_prev_leaves_what_prev_held(sim: SimFleet) -> None:
    """Removing a generation that never served (a failed cohort) must not push the last good
    one out of prev/: a later rollback would bring the broken one back."""
    kept = f"{D}/fleet-demo-rank-r0/prev{D}/fleet-demo-rank-r0/run.sh"
    up(target(pp_plan()), sim.connect, FAST)
    down(target(pp_plan()), sim.connect, FAST)  # generation 1's files now in prev/
    good = sim["h1"].files[kept][0]
    up(target(pp_plan(args=("--new",))), sim.connect, FAST)
    report = down(target(pp_plan(args=("--new",))), sim.connect, FAST, keep_prev=False)
    assert report.exit_code == ExitCode.OK and sim["h1"].containers == {}
    assert [k for k in sim["h1"].files if k.startswith(D) and "/prev/" not in k] == []
    assert sim["h1"].files[kept][0] == good
    assert b"--new" not in good


def test_units_dropped_from_the_plan_are_removed(sim: SimFleet) -> None:
    up(target(pp_plan()), sim.connect, FAST)
    plan = pp_plan()
    smaller = type(plan)(deployment=plan.deployment, recipe=plan.recipe, units=plan.units[:2])
    report = up(target(smaller, hosts=("h1", "h2", "h3")), sim.connect, FAST)
    assert [(u.unit, u.action, u.outcome) for u in report.units if u.action == "remove"] == [
        ("fleet-demo-router", "remove", "removed")
    ]
    assert sim["h3"].containers == {}


def trips(sim: SimFleet) -> dict[str, int]:
    return {h: getattr(sim[h], "trips", 0) for h in ("h1", "h2", "h3")}


def test_round_trips_per_host_one_unit_each(sim: SimFleet) -> None:
    # lock+survey+images, stop+install, start, gate, unlock: nothing to hold (no container yet)
    # and nothing to pull (image present)
    for h in ("h1", "h2"):
        sim[h].images.add("engine:1")
    sim["h3"].images.add("router:1")
    up(target(pp_plan()), sim.connect, FAST)
    assert trips(sim) == {"h1": 5, "h2": 5, "h3": 5}
    before = trips(sim)
    up(target(pp_plan(args=("--max-running-requests", "8"))), sim.connect, FAST)
    after = trips(sim)
    # the changed group is held first (its containers run) and its leader on h1 stops before the
    # other rank; the router's host only locks, surveys, unlocks
    assert {h: after[h] - before[h] for h in after} == {"h1": 7, "h2": 6, "h3": 2}
    before = trips(sim)
    up(target(pp_plan(args=("--max-running-requests", "8"))), sim.connect, FAST)
    assert {h: n - before[h] for h, n in trips(sim).items()} == {"h1": 2, "h2": 2, "h3": 2}


def test_a_missing_image_is_pulled_in_its_own_round_trip_before_any_stop(sim: SimFleet) -> None:
    up(target(pp_plan()), sim.connect, FAST)
    assert {"engine:1"} <= sim["h1"].images and sim["h1"].log.count(("sh", "-c", container._PULL, "sh", "engine:1")) == 1
    assert sim["h1"].containers["fleet-demo-rank-r0"].starts == 1


def test_install_writes_files_and_manifest_in_one_exec_with_the_secret_on_stdin_only(sim: SimFleet) -> None:
    token = "hf_0nlyOnStdin"
    up(target(pp_plan(secret=True), {"HF_TOKEN": token}), sim.connect, FAST)
    batches = [e for e in sim["h1"].log if e[:3] == ("sh", "-c", files._SCRIPT)]
    install = [e for e in batches if f"{D}/fleet-demo-rank-r0/manifest.json" in e]
    assert len(install) == 1
    assert f"{D}/fleet-demo-rank-r0/secrets.env" in install[0] and "0600" in install[0]
    assert not any(token in " ".join(e) for e in sim["h1"].log)
    # the manifest is the last file written
    assert install[0][-3] == f"{D}/fleet-demo-rank-r0/manifest.json"


def test_changed_secret_values_restart_only_the_groups_using_them(sim: SimFleet) -> None:
    up(target(pp_plan(secret=True), {"HF_TOKEN": "tok-A"}), sim.connect, FAST)
    again = up(target(pp_plan(secret=True), {"HF_TOKEN": "tok-A"}), sim.connect, FAST)
    assert set(outcomes(again).values()) == {"unchanged"}, "the same values: nothing restarts"
    report = up(target(pp_plan(secret=True), {"HF_TOKEN": "tok-B"}), sim.connect, FAST)
    assert outcomes(report) == {
        "fleet-demo-rank-r0": "healthy",
        "fleet-demo-rank-r1": "healthy",
        "fleet-demo-router": "unchanged",
    }
    assert {u.unit: u.reason for u in report.units}["fleet-demo-rank-r1"] == (
        "changed: secrets of h1/fleet-demo-rank-r0, secrets of h2/fleet-demo-rank-r1"
    )
    assert sim["h1"].files[f"{D}/fleet-demo-rank-r0/secrets.env"][0] == b"HF_TOKEN=tok-B\n"
    assert sim["h2"].containers["fleet-demo-rank-r1"].starts == 2
    m1, m2 = sim["h1"].manifest(f"{D}/fleet-demo-rank-r0"), sim["h2"].manifest(f"{D}/fleet-demo-rank-r1")
    assert m1 is not None and m2 is not None and m1["generation"] == 1, "same files: same generation"
    # The world-readable manifest holds nothing derived from the secret (issue 16 item 3).
    assert set(m1) == set(m2) == {f.name for f in fields(Manifest)}


def test_a_secrets_file_changed_or_removed_on_the_host_restarts_its_group(sim: SimFleet) -> None:
    # Secrets are compared with the file on the host, not with a record of what was written.
    up(target(pp_plan(secret=True), {"HF_TOKEN": "tok-A"}), sim.connect, FAST)
    sim["h1"].files[f"{D}/fleet-demo-rank-r0/secrets.env"] = (b"HF_TOKEN=edited\n", 0o600)
    del sim["h2"].files[f"{D}/fleet-demo-rank-r1/secrets.env"]
    report = up(target(pp_plan(secret=True), {"HF_TOKEN": "tok-A"}), sim.connect, FAST)
    assert {u.unit: u.reason for u in report.units}["fleet-demo-rank-r0"] == (
        "changed: secrets of h1/fleet-demo-rank-r0, secrets of h2/fleet-demo-rank-r1"
    )
    assert sim["h2"].files[f"{D}/fleet-demo-rank-r1/secrets.env"][0] == b"HF_TOKEN=tok-A\n"


def test_a_manifest_with_an_older_fleets_secrets_digest_is_read_and_rewritten_without_it(sim: SimFleet) -> None:
    up(target(pp_plan(secret=True), {"HF_TOKEN": "tok-A"}), sim.connect, FAST)
    paths = {h: f"{D}/{u}/manifest.json" for h, u in (("h1", "fleet-demo-rank-r0"), ("h2", "fleet-demo-rank-r1"))}
    clean = {h: sim[h].files[p][0] for h, p in paths.items()}
    for h, path in paths.items():
        raw = json.loads(sim[h].files[path][0]) | {"secrets_digest": "hmac-sha256:00:11"}
        sim[h].files[path] = (json.dumps(raw, sort_keys=True, separators=(",", ":")).encode() + b"\n", 0o644)
    up(target(pp_plan(secret=True), {"HF_TOKEN": "tok-A"}), sim.connect, Options(check=True))
    assert all(b"secrets_digest" in sim[h].files[p][0] for h, p in paths.items()), "--check writes nothing"
    same = up(target(pp_plan(secret=True), {"HF_TOKEN": "tok-A"}), sim.connect, FAST)
    assert set(outcomes(same).values()) == {"unchanged"}, "read as before: nothing restarts"
    assert {h: sim[h].files[p] for h, p in paths.items()} == {h: (c, 0o644) for h, c in clean.items()}, \
        "the unchanged units' manifests are rewritten without the digest"


def test_manifest_round_trip() -> None:
    m = Manifest(deployment="d", unit="u", host="h", group="g", role="rank", rank=0, runtime="docker",
                 render_hash="x", recipe="r", image=None, generation=1, deployed_by="me", deployed_at="T",
                 files=("/a",))  # fmt: skip
    assert parse(dumps(m)) == m
    assert parse(dumps(m).replace('"files"', '"secrets_digest":"hmac-sha256:00:11","files"')) == m, "older fleet's"
    assert parse(dumps(m).replace('"files"', '"secret_digest":"x","files"')) is None, "unknown key"


def test_a_second_playbook_of_the_same_name_is_refused_naming_both(sim: SimFleet) -> None:
    """Issue 25 item 13: two playbooks named alike are one deployment to the hosts.  One that
    would run another recipe under the name (or remove units the first placed) is refused --
    ``up`` and ``--check`` -- naming both, before anything changes; with ``take_over`` it
    replaces the deployment and every manifest names it, so the first is then refused in turn.
    A new version in another file (same units, same recipe) goes ahead and becomes the owner; the
    owner edited in place (same path, new text) stays the owner."""
    from dataclasses import replace

    from launcher.deploy.owner import OwnerConflict

    a = replace(target(pp_plan()), owner="/ops/a.yaml sha256:aaaaaaaaaaaaaaaa")
    b = replace(target(pp_plan(args=("--max-running-requests", "8"))), recipe="fam/other",
                owner="/ops/b.yaml sha256:bbbbbbbbbbbbbbbb")
    assert up(a, sim.connect, FAST).errors == ()
    writes = {h: sim[h].writes for h in ("h1", "h2", "h3")}
    for options in (FAST, Options(forks=4, check=True)):
        with pytest.raises(OwnerConflict) as err:
            up(b, sim.connect, options)
        host, _, rest = str(err.value).partition(": ")
        assert host in ("h1", "h2", "h3") and rest == (
            "deployment demo here belongs to playbook /ops/a.yaml (sha256:aaaaaaaaaaaaaaaa); /ops/b.yaml "
            "(sha256:bbbbbbbbbbbbbbbb) has the same name and would remove or replace its units: rename one, or pass "
            "--take-over to move the deployment to this playbook")
    assert {h: sim[h].writes for h in ("h1", "h2", "h3")} == writes, "nothing changed"
    assert all(c.starts == 1 for h in ("h1", "h2", "h3") for c in sim[h].containers.values())
    assert not any(k.endswith("/owner") for h in ("h1", "h2", "h3") for k in sim[h].files), "locks released"

    assert up(replace(b, take_over=True), sim.connect, FAST).errors == ()
    for h, unit in (("h1", "fleet-demo-rank-r0"), ("h2", "fleet-demo-rank-r1"), ("h3", "fleet-demo-router")):
        m = sim[h].manifest(f"{D}/{unit}")
        assert m is not None and m["playbook"] == b.owner, (h, m)
    with pytest.raises(OwnerConflict):
        up(a, sim.connect, FAST)
    edited = replace(b, owner="/ops/b.yaml sha256:cccccccccccccccc")
    assert up(edited, sim.connect, FAST).errors == ()
    v2 = replace(target(pp_plan(args=("--max-running-requests", "16"))), recipe="fam/other",
                 owner="/ops/b-v2.yaml sha256:dddddddddddddddd")  # a new version, same units and recipe
    assert up(v2, sim.connect, FAST).errors == ()
    for h, unit in (("h1", "fleet-demo-rank-r0"), ("h2", "fleet-demo-rank-r1"), ("h3", "fleet-demo-router")):
        m = sim[h].manifest(f"{D}/{unit}")
        assert m is not None and m["playbook"] == v2.owner, (h, m)  # the unchanged router's too


def test_a_manifest_without_an_owner_is_read_and_adopted() -> None:
    m = parse(dumps(Manifest(deployment="d", unit="u", host="h", group="g", role="r", rank=0, runtime="docker",
                             render_hash="x", recipe="f/r", image=None, generation=1, deployed_by="me",
                             deployed_at="t", files=())).replace(',"playbook":""', ""))  # fmt: skip
    assert m is not None and m.playbook == ""
