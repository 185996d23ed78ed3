"""Inventory sources as ansible-inventory reads them: a directory, -i twice, a host list, an
executable inventory script, !vault values -- each compared with real ansible-core."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from launcher.cli import cli
from launcher.config.inventory_sources import InventorySources, load_sources
from launcher.errors import InputError
from launcher.model import Inventory

PASSWORD = "correct horse battery staple"


def _ansible(*args: str, cwd: Path) -> str:
    """Real ansible-core, every inventory plugin fleet reads enabled (host_list, script, yaml, ini)."""
    env = dict(os.environ, ANSIBLE_HOME=str(cwd / ".ansible"), ANSIBLE_LOCAL_TEMP=str(cwd / ".ansible"),
               ANSIBLE_INVENTORY_UNPARSED_FAILED="1", ANSIBLE_INVENTORY_ENABLED="host_list,script,yaml,ini",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_NOCOLOR="1", ANSIBLE_DEPRECATION_WARNINGS="0")  # fmt: skip
    proc = subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd, check=False)
    assert proc.returncode == 0, f"{' '.join(args)}: {proc.stderr}"
    return proc.stdout


def _reference(cwd: Path, *sources: str) -> tuple[list[str], dict[str, set[str]], dict[str, Any]]:
    """(host order, group -> hosts incl. children's, hostvars) as Ansible reports them."""
    i_args = [a for s in sources for a in ("-i", s)]
    data = json.loads(_ansible("ansible-inventory", *i_args, "--list", cwd=cwd))
    meta = data.pop("_meta")

    def closure(name: str) -> set[str]:
        entry = data.get(name, {})
        return set(entry.get("hosts", ())).union(*(closure(c) for c in entry.get("children", ())))

    listed = _ansible("ansible", *i_args, "all", "--list-hosts", cwd=cwd).splitlines()[1:]
    return [h.strip() for h in listed], {g: closure(g) for g in data}, meta["hostvars"]


def _same_as_ansible(cwd: Path, *sources: str, vault_password_file: str | None = None) -> Inventory:
    order, groups, hostvars = _reference(cwd, *sources)
    old = os.getcwd()
    os.chdir(cwd)
    try:
        inv = load_sources(InventorySources(sources=sources, vault_password_file=vault_password_file))
    finally:
        os.chdir(old)
    assert [h.name for h in inv.hosts] == order
    for name, members in groups.items():
        assert set(inv.groups[name].hosts) == members, name
    for host in inv.hosts:
        assert json.loads(json.dumps(dict(host.vars))) == hostvars.get(host.name, {}), host.name
    return inv


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))


DIRECTORY = {
    "inv/01-gpu.yaml": """\
        gpu:
          hosts:
            gpu-01: {ansible_host: 198.18.0.11, gpu_count: 8}
            gpu-02: {ansible_host: 198.18.0.12}
          vars: {gpu_model: RTX-6000D}
        """,
    "inv/02-infra.ini": """\
        [infra]
        router-01 ansible_host=198.18.0.21
        [rack1:children]
        gpu
        infra
        """,
    "inv/sub/03-more.yml": "more:\n  hosts:\n    gpu-03: {ansible_host: 198.18.0.13}\n",
    "inv/README.md": "not an inventory: ignored by extension\n",
    "inv/04-noext": "spare:\n  hosts:\n    spare-01: {ansible_host: 198.18.0.14}\n",  # YAML without a suffix
    "inv/05-hosts": "[spare]\nspare-02 ansible_host=198.18.0.15\n",  # INI without a suffix
    "inv/.hidden.yaml": "nope: {hosts: {x: {}}}\n",
    "inv/group_vars/gpu.yml": "gpu_count: 4\nfabric: roce\n",
    "inv/group_vars/all/ssh.yaml": "ansible_user: fleet\n",
    "inv/host_vars/gpu-02.yml": "gpu_count: 2\n",
}


def test_a_directory_reads_like_ansible(tmp_path: Path) -> None:
    _write(tmp_path, DIRECTORY)
    inv = _same_as_ansible(tmp_path, "inv")
    assert {h.name: (h.spec.gpu_count, h.user) for h in inv.hosts}["gpu-02"] == (2, "fleet")


def test_inventory_given_twice_reads_like_ansible(tmp_path: Path) -> None:
    _write(tmp_path, {
        "a/hosts.yaml": "gpu:\n  hosts:\n    gpu-01: {ansible_host: 198.18.0.11}\n",
        "a/group_vars/gpu.yml": "gpu_count: 8\nfabric: roce\n",
        "b/hosts.ini": "[gpu]\ngpu-02 ansible_host=198.18.0.12\n[infra]\nrouter-01\n",
        "b/group_vars/gpu.yml": "gpu_count: 4\n",  # the later source wins
    })  # fmt: skip
    inv = _same_as_ansible(tmp_path, "a/hosts.yaml", "b/hosts.ini")
    assert [h.spec.gpu_count for h in inv.hosts if "gpu" in h.groups] == [4, 4]
    assert inv.path == "a/hosts.yaml -i b/hosts.ini"


def test_a_host_list_reads_like_ansible(tmp_path: Path) -> None:
    inv = _same_as_ansible(tmp_path, "198.18.0.31,gpu-b:2222,")
    assert [(h.name, h.port) for h in inv.hosts] == [("198.18.0.31", 22), ("gpu-b", 2222)]
    assert inv.hosts[0].groups == ("ungrouped",)


SCRIPT = """\
    #!/usr/bin/env python3
    import json, sys
    inv = {
        "gpu": {"hosts": ["gpu-01", "gpu-02"], "vars": {"gpu_model": "RTX-6000D", "gpu_count": 8}},
        "pd": {"children": ["gpu"], "vars": {"fabric": "roce"}},
        "infra": ["router-01"],
    }
    hostvars = {"gpu-01": {"ansible_host": "198.18.0.11"}, "gpu-02": {"ansible_host": "198.18.0.12", "gid_index": 3}}
    if sys.argv[1] == "--list":
        if "{meta}" == "yes":
            inv["_meta"] = {"hostvars": hostvars}
        print(json.dumps(inv))
    else:
        print(json.dumps(hostvars.get(sys.argv[2], {})))
    """


@pytest.mark.parametrize("meta", ["yes", "no"], ids=["with-_meta", "--host-per-host"])
def test_an_inventory_script_reads_like_ansible(tmp_path: Path, meta: str) -> None:
    script = tmp_path / "dyn.py"
    script.write_text(textwrap.dedent(SCRIPT).replace("{meta}", meta))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    _write(tmp_path, {"group_vars/infra.yml": "gpu_count: 0\n"})
    inv = _same_as_ansible(tmp_path, "dyn.py")
    assert {h.name: h.spec.gid_index for h in inv.hosts} == {"gpu-01": "auto", "gpu-02": 3, "router-01": None}


def test_a_failing_inventory_script_is_one_line(tmp_path: Path) -> None:
    script = tmp_path / "dyn.sh"
    script.write_text("#!/bin/sh\necho 'cloud API: 403 Forbidden' >&2\nexit 3\n")
    script.chmod(0o755)
    with pytest.raises(InputError) as err:
        load_sources(str(script))
    assert str(err.value) == f"inventory script {script} --list: exit 3: cloud API: 403 Forbidden"


def test_a_missing_source_is_an_error_not_a_warning(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        load_sources(InventorySources(sources=(str(tmp_path / "nope.yaml"),)))
    assert str(err.value) == f"{tmp_path}/nope.yaml: no such inventory file or directory"


# ------------------------------------------------------------------------------ vault


def _encrypt(tmp_path: Path, name: str, value: str) -> str:
    """``name: !vault |`` text made by the real ansible-vault."""
    (tmp_path / "vault-pass").write_text(PASSWORD + "\n")
    return _ansible("ansible-vault", "encrypt_string", "--vault-password-file", "vault-pass", value, "--name", name,
                    cwd=tmp_path)  # fmt: skip


def _vault_inventory(tmp_path: Path) -> Path:
    user = _encrypt(tmp_path, "ansible_user", "deploy")
    token = _encrypt(tmp_path, "api_token", "s3cret")
    _write(tmp_path, {"hosts.yaml": "gpu:\n  hosts:\n    gpu-01: {ansible_host: 198.18.0.11}\n"})
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "gpu.yml").write_text(user + token)
    return tmp_path / "hosts.yaml"


def test_vault_values_decrypt_with_the_password_file(tmp_path: Path) -> None:
    _vault_inventory(tmp_path)
    # The vars stay encrypted, as ansible-inventory --list shows them; what fleet reads is decrypted.
    inv = _same_as_ansible(tmp_path, "hosts.yaml", vault_password_file="vault-pass")
    assert inv.hosts[0].vars["api_token"]["__ansible_vault"].startswith("$ANSIBLE_VAULT;1.1;AES256")  # type: ignore[index]
    assert inv.hosts[0].user == "deploy"  # what ansible-vault encrypted


def test_vault_password_from_an_executable_file(tmp_path: Path) -> None:
    hosts = _vault_inventory(tmp_path)
    script = tmp_path / "pass.sh"
    script.write_text(f"#!/bin/sh\necho '{PASSWORD}'\n")
    script.chmod(0o755)
    assert load_sources(InventorySources(sources=(str(hosts),), vault_password_file=str(script))).hosts[0].user == "deploy"


def test_a_vault_value_without_a_password_is_one_line_naming_the_key(tmp_path: Path) -> None:
    hosts = _vault_inventory(tmp_path)
    with pytest.raises(InputError) as err:
        load_sources(str(hosts))
    assert str(err.value) == (
        f"{tmp_path}/group_vars/gpu.yml:1:15: ansible_user: is a !vault value: pass --vault-password-file FILE "
        "(or set FLEET_VAULT_PASSWORD_FILE) to decrypt it"
    )


def test_a_wrong_vault_password_is_one_line(tmp_path: Path) -> None:
    hosts = _vault_inventory(tmp_path)
    (tmp_path / "wrong").write_text("nope\n")
    with pytest.raises(InputError) as err:
        load_sources(InventorySources(sources=(str(hosts),), vault_password_file=str(tmp_path / "wrong")))
    assert str(err.value) == (
        f"{tmp_path}/group_vars/gpu.yml:1:15: ansible_user: !vault value does not decrypt with the password in "
        f"{tmp_path}/wrong"
    )


# ------------------------------------------------------------------------------ the CLI


def test_inventory_list_takes_i_twice_and_a_host_list(tmp_path: Path) -> None:
    _write(tmp_path, {"a.yaml": "gpu:\n  hosts:\n    gpu-01: {}\n"})
    result = CliRunner().invoke(cli, ["inventory", "list", "-i", str(tmp_path / "a.yaml"), "-i", "198.18.0.9,",
                                      "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    # Ansible's order too: `ungrouped` comes first under `all`
    assert [h["name"] for h in json.loads(result.stdout)["hosts"]] == ["198.18.0.9", "gpu-01"]


def test_vault_password_file_on_the_command_line(tmp_path: Path) -> None:
    hosts = _vault_inventory(tmp_path)
    result = CliRunner().invoke(cli, ["inventory", "list", "-i", str(hosts), "--json"])
    assert result.exit_code == 2
    assert "ansible_user: is a !vault value" in result.stderr
    result = CliRunner().invoke(cli, ["inventory", "list", "-i", str(hosts), "--vault-password-file",
                                      str(tmp_path / "vault-pass"), "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["hosts"][0]["user"] == "deploy"
