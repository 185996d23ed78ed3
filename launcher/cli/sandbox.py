"""``fleet sandbox up|down|status|fault|image``: the one-machine test fleet (Linux, root)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from launcher.cli import cli
from launcher.cli.common import sandbox_log_to_stderr
from launcher.errors import UsageError


@cli.group()
def sandbox() -> None:
    """A fleet of real SSH hosts on this machine (network namespaces, sshd, dockerd each)."""


@sandbox.command()
@click.option("-n", "--hosts", "n", type=int, default=8, show_default=True, help="Number of hosts.")
@click.option("--name", default="default", show_default=True, help="Sandbox name.")
@click.option("--inventory", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the inventory (default: <state dir>/inventory.yaml).")
@click.option("--tag", "tags", multiple=True, help="Also tag the stand-in image as IMAGE (repeatable).")
@click.option("--mode", type=click.Choice(["auto", "netns", "loopback"]), default="auto",
              show_default=True, help="loopback: sshd on 127.0.0.1:22001.. when netns is refused.")
@click.option("--no-docker", is_flag=True, help="Hosts without dockerd (faster).")
@click.option("--systemd-hosts", type=int, default=0, show_default=True,
              help="Also hosts s1.. with systemd as PID 1 in a container (runtime: systemd).")
@click.option("--real-engine", is_flag=True,
              help="Also the real vLLM image (CPU build) and the generated model on every host "
                   "(first build ~3 GB and several minutes, then cached).")
def up(n: int, name: str, inventory: Path | None, tags: tuple[str, ...], mode: str,
       no_docker: bool, systemd_hosts: int, real_engine: bool) -> None:  # fmt: skip
    """Bring up N sandbox hosts (cleans a previous sandbox of the same name first)."""
    from launcher.sandbox import fleet

    if real_engine and no_docker and not systemd_hosts:
        raise click.UsageError("--real-engine needs docker on the hosts (drop --no-docker) or --systemd-hosts")
    with sandbox_log_to_stderr():
        st = fleet.up(name, n, inventory_path=inventory, tags=tags, mode=mode,  # type: ignore[arg-type]
                      docker=not no_docker, systemd_hosts=systemd_hosts, real_engine=real_engine)  # fmt: skip
    click.echo(f"sandbox {st.name}: {len(st.hosts)} hosts up ({st.mode})")
    click.echo(f"inventory:   {st.inventory}")
    click.echo(f"client key:  {st.client_key}")
    click.echo(f"known_hosts: {st.known_hosts}")


@sandbox.command("image")
@click.option("--real-engine", is_flag=True, help="Also the real vLLM image and the generated model.")
def image_command(real_engine: bool) -> None:
    """Build (or find cached) the hosts' image template; prints where and how long it took."""
    import time

    from launcher.sandbox import fleet, image, realimage

    fleet.require_root()
    t0 = time.monotonic()
    with sandbox_log_to_stderr():
        path = image.ensure_template(realimage.extra() if real_engine else None)
    click.echo(f"image template {path} ready in {time.monotonic() - t0:.0f}s")


@sandbox.command()
@click.option("--name", default="default", show_default=True)
def down(name: str) -> None:
    """Tear the sandbox down: processes, namespaces, routes, cgroups, state."""
    from launcher.sandbox import fleet

    removed = fleet.down(name)
    click.echo(f"sandbox {name}: {'removed' if removed else 'was not up'}")


@sandbox.command()
@click.option("--name", default="default", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(name: str, as_json: bool) -> None:
    """Show the sandbox's hosts and whether their sshd/dockerd run."""
    from launcher.sandbox import fleet

    info = fleet.status(name)
    if as_json:
        click.echo(json.dumps(info, indent=1))
        return
    if not info["up"]:
        click.echo(f"sandbox {name}: down")
        return
    click.echo(f"sandbox {name}: {info['mode']} {info['subnet'] or ''} inventory {info['inventory']}")
    for h in info["hosts"]:
        click.echo(f"  {h['name']:<5} {h['address']}:{h['port']:<5} {h['ifname']:<7} {h['kind']:<7} "
                   f"sshd={'up' if h['sshd'] else 'DOWN'} dockerd={'up' if h['dockerd'] else 'DOWN'}")  # fmt: skip


_ACTIONS = ("sshd-stop", "sshd-cont", "sshd-kill", "link-down", "link-up", "drop-ssh", "loss", "clear")


@sandbox.command()
@click.argument("action", type=click.Choice(_ACTIONS))
@click.argument("host")
@click.option("--name", default="default", show_default=True)
@click.option("--percent", type=int, default=10, show_default=True, help="For loss.")
def fault(action: str, host: str, name: str, percent: int) -> None:
    """Inject a fault on HOST (undo with sshd-cont, link-up, clear)."""
    from launcher.sandbox import faults, fleet

    h = fleet.loaded(name).host(host)
    if action.startswith("sshd-"):
        faults.sshd_signal(h, action.removeprefix("sshd-"))
    elif action in ("link-down", "link-up"):
        faults.link(h, action == "link-up")
    elif action == "drop-ssh":
        faults.drop_ssh(h)
    elif action == "loss":
        faults.loss(h, percent)
    elif action == "clear":
        faults.clear(h)
    else:  # click.Choice makes this unreachable; kept explicit for the type checker
        raise UsageError(f"unknown fault {action}")
    click.echo(f"{host}: {action}")
