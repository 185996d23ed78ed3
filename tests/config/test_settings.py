"""Defaults for -i, --known-hosts, --forks, --vault-password-file and the recipe layers: the
command line over the environment over the config file (docs/configuration.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from launcher.cli import cli
from launcher.cli.common import ssh_options
from launcher.config import settings
from launcher.errors import InputError

ENV = ("FLEET_CONFIG", "FLEET_INVENTORY", "FLEET_KNOWN_HOSTS", "FLEET_FORKS", "FLEET_RECIPES",
       "FLEET_VAULT_PASSWORD_FILE", "XDG_CONFIG_HOME")  # fmt: skip


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.yaml").write_text(f"all:\n  hosts:\n    host-{name}: {{}}\n")


def _hosts(*args: str) -> list[str]:
    result = CliRunner().invoke(cli, ["inventory", "list", *args, "--json"])
    assert result.exit_code == 0, result.output
    return [h["name"] for h in json.loads(result.stdout)["hosts"]]


def test_command_line_over_environment_over_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "fleet.cfg").write_text("[defaults]\ninventory = c.yaml\n")
    assert _hosts() == ["host-c"]
    monkeypatch.setenv("FLEET_INVENTORY", "b.yaml")
    assert _hosts() == ["host-b"]
    assert _hosts("-i", "a.yaml") == ["host-a"]


def test_config_paths_are_relative_to_the_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "xdg" / "fleet"
    conf.mkdir(parents=True)
    (conf / "inv.yaml").write_text("all:\n  hosts:\n    host-x: {}\n")
    (conf / "fleet.cfg").write_text("# an operator's defaults\n[defaults]\ninventory = inv.yaml, ../../a.yaml\n")
    assert _hosts() == ["host-x", "host-a"]
    monkeypatch.setenv("FLEET_CONFIG", str(tmp_path / "elsewhere.cfg"))
    (tmp_path / "elsewhere.cfg").write_text("[defaults]\ninventory = b.yaml\n")
    assert _hosts() == ["host-b"]


def test_no_inventory_anywhere_is_a_usage_error() -> None:
    result = CliRunner().invoke(cli, ["inventory", "list"])
    assert (result.exit_code, result.stderr) == (
        2,
        "fleet: error: missing option '-i' / '--inventory' (or set FLEET_INVENTORY, or 'inventory =' in fleet.cfg) "
        "(see 'fleet inventory list --help')\n",
    )


def test_an_unknown_config_key_names_its_line(tmp_path: Path) -> None:
    (tmp_path / "fleet.cfg").write_text("[defaults]\n\ninventroy = a.yaml\n")
    result = CliRunner().invoke(cli, ["inventory", "list"])
    assert (result.exit_code, result.stderr) == (
        2,
        "fleet: error: fleet.cfg:3:1: unknown key 'inventroy' in [defaults] (did you mean 'inventory'?)\n",
    )


def test_fleet_config_naming_no_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_CONFIG", "/nonexistent/fleet.cfg")
    with pytest.raises(InputError, match=r"^FLEET_CONFIG=/nonexistent/fleet.cfg: no such file$"):
        settings.lookup("forks")


@click.command()
@ssh_options
def _show(inventory_path: object, known_hosts: tuple[str, ...], forks: int, trust_new_hosts: bool) -> None:
    click.echo(json.dumps({"inventory": str(inventory_path), "known_hosts": list(known_hosts), "forks": forks}))


def _ssh(*args: str) -> dict[str, object]:
    result = CliRunner().invoke(_show, ["-i", "a.yaml", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_known_hosts_and_forks_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _ssh() == {"inventory": "a.yaml", "known_hosts": [], "forks": 64}
    (tmp_path / "fleet.cfg").write_text("[defaults]\nknown_hosts = kh1, /etc/kh2\nforks = 16\n")
    assert _ssh() == {"inventory": "a.yaml", "known_hosts": ["kh1", "/etc/kh2"], "forks": 16}
    monkeypatch.setenv("FLEET_FORKS", "8")
    monkeypatch.setenv("FLEET_KNOWN_HOSTS", "envkh")
    assert _ssh() == {"inventory": "a.yaml", "known_hosts": ["envkh"], "forks": 8}
    assert _ssh("--forks", "4", "--known-hosts", "cli") == {"inventory": "a.yaml", "known_hosts": ["cli"], "forks": 4}


def test_bad_forks_from_the_environment() -> None:
    result = CliRunner(env={"FLEET_FORKS": "many"}).invoke(_show, ["-i", "a.yaml"])
    assert result.exit_code == 2
    assert "FLEET_FORKS: forks should be a number from 1 to 1024, got 'many'" in result.output
