"""render(): layout, modes, hash semantics, manifests, docker argv, runtime choice, exact errors."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import pytest

from launcher.errors import PlanError
from launcher.model import Mount, Plan, SecretRef
from launcher.render import RenderedPlan, render
from launcher.runtimes.container import docker_run_args
from tests.render import factory


def files_of(r: RenderedPlan, host: str) -> dict[str, tuple[int, str]]:
    return {f.path: (f.mode, f.content) for f in r.hosts[host].files}


def test_byte_reproducible() -> None:
    p = factory.full_plan()
    assert render(p) == render(p)
    assert render(factory.full_plan(), "systemd") == render(p, "systemd")
    assert list(render(p).hosts) == sorted(render(p).hosts)


def test_docker_layout_and_modes() -> None:
    d = "/etc/fleet/demo/fleet-demo-single-r0"
    r = render(factory.plan(), "docker")
    assert {k: v[0] for k, v in files_of(r, "gpu-a1").items()} == {
        f"{d}/env": 0o600,
        f"{d}/run.sh": 0o755,
        f"{d}/manifest.json": 0o644,
    }
    u = r.hosts["gpu-a1"].units[0]
    assert u.start == (("sh", f"{d}/run.sh"),)
    assert u.stop == (("docker", "stop", "-t", "120", "fleet-demo-single-r0"),)
    assert u.secrets_file == f"{d}/secrets.env"
    run_sh = files_of(r, "gpu-a1")[f"{d}/run.sh"][1]
    assert f". {d}/env\n" in run_sh and f"if [ -f {d}/secrets.env ]; then . {d}/secrets.env; fi\n" in run_sh


def test_systemd_layout_and_modes() -> None:
    d = "/etc/fleet/demo/fleet-demo-single-r0"
    r = render(factory.plan(), "systemd")
    files = files_of(r, "gpu-a1")
    assert {k: v[0] for k, v in files.items()} == {
        f"{d}/env": 0o600,
        f"{d}/manifest.json": 0o644,
        "/etc/systemd/system/fleet-demo-single-r0.service": 0o644,
    }
    unit = files["/etc/systemd/system/fleet-demo-single-r0.service"][1]
    for line in (
        "Requires=docker.service",
        "After=docker.service network-online.target",
        "Wants=network-online.target",
        f"EnvironmentFile={d}/env",
        f"EnvironmentFile=-{d}/secrets.env",
        "ExecStartPre=-/usr/bin/docker rm -f fleet-demo-single-r0",
        "ExecStop=/usr/bin/docker stop -t 120 fleet-demo-single-r0",
        "Restart=on-failure",
        "TimeoutStartSec=1800",
        "TimeoutStopSec=150",
        "WantedBy=multi-user.target",
    ):
        assert line + "\n" in unit
    assert "ExecStart=/usr/bin/docker run --rm --name fleet-demo-single-r0 " in unit
    assert r.hosts["gpu-a1"].units[0].start == (
        ("systemctl", "daemon-reload"),
        ("systemctl", "enable", "--now", "fleet-demo-single-r0.service"),
    )


def test_runtime_defaults_to_each_units_own_and_native_is_always_systemd() -> None:
    p = factory.full_plan()
    by_unit = {u.name: u.runtime for h in render(p).hosts.values() for u in h.units}
    assert by_unit["fleet-demo-mooncake-master-r0"] == "systemd"
    assert by_unit["fleet-demo-router-r0"] == "docker"
    forced = {u.name: u.runtime for h in render(p, "docker").hosts.values() for u in h.units}
    assert forced["fleet-demo-mooncake-master-r0"] == "systemd"
    native = files_of(render(p), "cpu-1")["/etc/systemd/system/fleet-demo-mooncake-master-r0.service"][1]
    assert "ExecStart=/usr/local/bin/mooncake_master --port 50051 --enable_http_metadata_server=true\n" in native
    assert "Requires=docker.service" not in native


def test_native_relative_program_runs_through_env() -> None:
    u = factory.unit(container=None, runtime="systemd", argv=("python3", "-m", "x"))
    text = files_of(render(factory.plan(u)), "gpu-a1")["/etc/systemd/system/fleet-demo-single-r0.service"][1]
    assert "ExecStart=/usr/bin/env python3 -m x\n" in text


def test_exact_docker_argv() -> None:
    assert docker_run_args(factory.unit(), detached=True, render_hash="H") == (
        "run", "-d", "--restart", "unless-stopped", "--name", "fleet-demo-single-r0", "--stop-timeout", "120",
        "--network", "host", "--ipc", "host", "--shm-size", "32g", "--gpus", '"device=0,1,2,3,4,5,6,7"',
        "--device", "/dev/infiniband", "--cap-add", "IPC_LOCK", "--ulimit", "memlock=-1", "--ulimit", "stack=67108864",
        "-v", "/models:/models:ro", "-v", "/var/cache/fleet:/root/.cache",
        "--label", "fleet.deployment=demo", "--label", "fleet.group=demo-single", "--label", "fleet.rank=0",
        "--label", "fleet.render-hash=H", "--label", "fleet.role=single", "--label", "fleet.unit=fleet-demo-single-r0",
        "--label", "team=inference",
        "-e", "GLOO_SOCKET_IFNAME", "-e", "HF_TOKEN", "-e", "NCCL_IB_GID_INDEX", "-e", "NCCL_SOCKET_IFNAME",
        "--entrypoint", "python3",
        "lmsysorg/sglang:v0.5.4.post1-cu129",
        "-m", "sglang.launch_server", "--model-path", "/models/Qwen3-8B", "--tp", "8", "--port", "30000",
    )  # fmt: skip
    fg = docker_run_args(factory.unit(), detached=False, render_hash="H")
    assert fg[:2] == ("run", "--rm") and "--restart" not in fg


def test_env_values_never_in_argv_or_units() -> None:
    u = factory.unit(env={"NCCL_X": "value-in-env-only"}, secrets=(SecretRef(name="HF_TOKEN", from_env="T"),))
    for runtime in ("docker", "systemd"):
        files = files_of(render(factory.plan(u), runtime), "gpu-a1")
        holding = [path for path, (_, text) in files.items() if "value-in-env-only" in text]
        assert holding == ["/etc/fleet/demo/fleet-demo-single-r0/env"]


def _recomputed_hash(r: RenderedPlan, host: str) -> str:
    """The documented definition, computed independently: the unit's files (manifest excluded)
    with the hash label emptied, as path NUL mode(octal) NUL length NUL content, sorted by path."""
    unit = r.hosts[host].units[0]
    h = hashlib.sha256()
    for f in r.hosts[host].files:
        if f.path not in unit.files or f.path == unit.manifest:
            continue
        data = f.content.replace(f"fleet.render-hash={unit.render_hash}", "fleet.render-hash=").encode()
        h.update(f"{f.path}\0{f.mode:o}\0{len(data)}\0".encode() + data)
    return h.hexdigest()


@pytest.mark.parametrize("runtime", ["docker", "systemd"])
def test_render_hash_definition(runtime: str) -> None:
    r = render(factory.plan(), runtime)  # type: ignore[arg-type]
    unit = r.hosts["gpu-a1"].units[0]
    assert unit.render_hash == _recomputed_hash(r, "gpu-a1")
    manifest = json.loads(files_of(r, "gpu-a1")[unit.manifest][1])
    assert manifest["render_hash"] == unit.render_hash


def test_render_hash_tracks_content_not_secret_values() -> None:
    def h(plan: Plan) -> str:
        return render(plan).hosts["gpu-a1"].units[0].render_hash

    base = h(factory.plan())
    assert h(factory.plan(factory.unit(secrets=(SecretRef(name="HF_TOKEN", from_file="/other/path"),)))) == base
    assert h(factory.plan(factory.unit(env={"NCCL_IB_GID_INDEX": "5"}))) != base
    assert h(factory.plan(factory.unit(argv=("python3", "-m", "other")))) != base
    assert h(factory.plan(factory.unit(secrets=(SecretRef(name="OTHER", from_env="X"),)))) != base


def test_manifest() -> None:
    r = render(factory.plan())
    unit = r.hosts["gpu-a1"].units[0]
    d = "/etc/fleet/demo/fleet-demo-single-r0"
    text = files_of(r, "gpu-a1")[unit.manifest][1]
    assert text.endswith("}\n") and "\n" not in text[:-1]
    assert json.loads(text) == {
        "deployment": "demo",
        "unit": "fleet-demo-single-r0",
        "host": "gpu-a1",
        "group": "demo-single",
        "role": "single",
        "rank": 0,
        "runtime": "docker",
        "render_hash": unit.render_hash,
        "recipe": "qwen3/8b-h100",
        "image": factory.IMAGE,
        "files": [f"{d}/env", f"{d}/manifest.json", f"{d}/run.sh", f"{d}/secrets.env"],
    }


def test_plan_files_land_with_the_units_that_mount_them() -> None:
    r = render(factory.full_plan())
    path = "/etc/fleet/gateway/demo.conf"
    assert files_of(r, "cpu-1")[path] == (0o644, factory.full_plan().files["gateway/demo.conf"])
    assert all(path not in files_of(r, h) for h in r.hosts if h != "cpu-1")
    gw = next(u for u in r.hosts["cpu-1"].units if u.name == "fleet-demo-gateway-r0")
    assert path in gw.files
    changed = replace(factory.full_plan(), files={"gateway/demo.conf": "other"})
    gw2 = next(u for u in render(changed).hosts["cpu-1"].units if u.name == "fleet-demo-gateway-r0")
    assert gw2.render_hash != gw.render_hash


def test_multinode_ranks_render_per_host() -> None:
    r = render(factory.multinode_plan())
    assert sorted(r.hosts) == ["gpu-a1", "gpu-a2"]
    assert [u.name for u in r.hosts["gpu-a2"].units] == ["fleet-demo-rank-r1"]


def _mount(host: str) -> Plan:
    return factory.plan(factory.unit(container=factory.container(mounts=(Mount(host=host, container="/m"),))))


@pytest.mark.parametrize(
    "plan, message",
    [
        (replace(factory.plan(), recipe="x\nExecStartPre=/bin/evil"), "recipe 'x\\nExecStartPre=/bin/evil': must match [A-Za-z0-9][A-Za-z0-9_./-]*"),
        (factory.plan(deployment="bad name"), "deployment 'bad name': must match [A-Za-z0-9][A-Za-z0-9_.-]*"),
        (factory.plan(factory.unit("x/y")), "unit on gpu-a1 'x/y': must match [A-Za-z0-9][A-Za-z0-9_.-]*"),
        (factory.plan(factory.unit(), factory.unit()), "unit 'fleet-demo-single-r0': appears twice on host gpu-a1"),
        (
            factory.plan(factory.unit(env={"HF_TOKEN": "x"})),
            "unit 'fleet-demo-single-r0': HF_TOKEN is both a secret and a plain env value",
        ),
        (
            factory.plan(factory.unit(env={"IFS": "x"})),
            "unit 'fleet-demo-single-r0': env name 'IFS': is reserved by the shell that loads the env file",
        ),
        (
            factory.plan(factory.unit(env={"A": "nul\0"})),
            "unit 'fleet-demo-single-r0': env A: contains a NUL character, which no command line or env file can carry",
        ),
        (
            factory.plan(factory.unit(container=None, argv=())),
            "unit 'fleet-demo-single-r0': a native unit needs a program as argv[0], got ''",
        ),
        (_mount("models"), "unit 'fleet-demo-single-r0': mount models:/m: paths must be absolute, without ':'"),
        (_mount("/a:b"), "unit 'fleet-demo-single-r0': mount /a:b:/m: paths must be absolute, without ':'"),
        (_mount("{models_dir}/x"), "unit 'fleet-demo-single-r0': mount {models_dir}/x:/m: paths must be absolute, without ':'"),
        (_mount("/{models_dir}/x"), "unit 'fleet-demo-single-r0': mount /{models_dir}/x: unfilled placeholder"),
        (factory.plan(files={"gateway/x.conf": ""}), "plan file 'gateway/x.conf': no unit mounts /etc/fleet/gateway/x.conf"),
        (factory.plan(files={"../x": ""}), "plan file '../x': must be a relative path of [A-Za-z0-9_.-] names"),
    ],
)
def test_errors(plan: Plan, message: str) -> None:
    with pytest.raises(PlanError) as err:
        render(plan)
    assert str(err.value) == message
