"""The hostile-input corpus (issue 25): inputs an attacker or an unlucky operator hands fleet.

Every case runs the real CLI in a fresh process and must end in exactly one line on stderr
(``fleet: error: ...``, the exact text), exit 2, no traceback, within 2 s of CPU and 200 MB.
The bounds are not timed assertions: the child runs under ``RLIMIT_CPU`` (the kernel ends it
with SIGXCPU past 2 CPU-seconds, whatever the machine's load) and its peak resident memory is
the kernel's own count (``ru_maxrss`` from ``wait4``).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventories" / "example.yaml"
CPU_S = 2
MAX_RSS_MB = 200
_MAIN = "import sys; from launcher.cli import main; sys.argv[0] = 'fleet'; main()"


@dataclass(frozen=True)
class Case:
    id: str
    files: dict[str, str | Callable[[], str]]  # name -> text (or what makes it: big inputs)
    argv: tuple[str, ...]  # {d} is the case's directory
    line: str  # the one stderr line, {d} as above
    env: dict[str, str] = field(default_factory=dict)
    modes: dict[str, int] = field(default_factory=dict)  # file name -> mode (else the umask's)
    raw: dict[str, bytes] = field(default_factory=dict)  # files written as bytes


def _inv(host_vars: str) -> str:
    return f"all:\n  hosts:\n    h1: {{{host_vars}}}\n"


def _list(*more: str) -> tuple[str, ...]:
    return ("inventory", "list", "-i", "{d}/" + (more[0] if more else "hosts.yaml"))


DIGITS = "9" * 5000
HOST_MSG = "should be a host name of at most 240 letters, digits, '.', '_', '-' and ':' (not starting with '-' or '.')"
ADDR_MSG = "should be a hostname or an IP address"
JUMP_MSG = "a ProxyJump list of [user@]host[:port] hops (host names or IP addresses, user names as ansible_user)"
COMMON_ARGS_MSG = f"ssh options whose ProxyJump is {JUMP_MSG}"
USER_MSG = "should be a user name of at most 256 letters, digits, '.', '_', '-' and '@' (not starting with '-')"

CASES = [
    # -- item 1: addresses, users and names that reach shells; ranges the kernel and NCCL define
    Case("ansible_host-shell", {"hosts.yaml": "all:\n  hosts:\n    h1:\n      ansible_host: '127.0.0.1;touch {d}/pwned;true'\n"},
         ("run", "-i", "{d}/hosts.yaml", "all", "--", "true"),
         f"{{d}}/hosts.yaml:4:21: all/hosts/h1/ansible_host: {ADDR_MSG}, got '127.0.0.1;touch {{d}}/pwned;true'"),
    Case("ansible_user-option", {"hosts.ini": "[g]\nh1 ansible_user=-oProxyCommand=x\n"}, _list("hosts.ini"),
         f"{{d}}/hosts.ini:2:17: g/h1/ansible_user: {USER_MSG}, got '-oProxyCommand=x'"),
    Case("ansible_host-999", {"hosts.ini": "[g]\nh1 ansible_host=999.1.1.1\n"}, _list("hosts.ini"),
         f"{{d}}/hosts.ini:2:17: g/h1/ansible_host: {ADDR_MSG} (not a valid IPv4 address), got '999.1.1.1'"),
    Case("host-named-h;id", {"hosts.ini": "[g]\nh;id\n"}, _list("hosts.ini"),
         f"{{d}}/hosts.ini:2:1: g/h;id: {HOST_MSG}, got 'h;id'"),
    Case("host-named-option", {"hosts.yaml": "all:\n  hosts:\n    -oProxyCommand=x:\n"}, _list(),
         f"{{d}}/hosts.yaml:3:5: all/hosts/-oProxyCommand=x: {HOST_MSG}, got '-oProxyCommand=x'"),
    Case("host-name-as-bad-address", {"hosts.ini": "[g]\n999.1.1.1\n"}, _list("hosts.ini"),
         f"{{d}}/hosts.ini:2:1: g/999.1.1.1: without ansible_host, the name {ADDR_MSG} (not a valid IPv4 address), "
         "got '999.1.1.1'"),
    Case("mtu-negative", {"hosts.ini": "[g]\nh1 mtu=-5\n"}, _list("hosts.ini"),
         "{d}/hosts.ini:2:8: g/h1/mtu: should be 68-65535 (the kernel's MTU range), got -5"),
    Case("ib_tc-9999", {"hosts.ini": "[g]\nh1 ib_tc=9999\n"}, _list("hosts.ini"),
         "{d}/hosts.ini:2:10: g/h1/ib_tc: should be 0-255 (NCCL_IB_TC, an 8-bit traffic class), got 9999"),
    Case("gid_index-300", {"hosts.yaml": _inv("fabric: roce, gid_index: 300")}, _list(),
         "{d}/hosts.yaml:3:35: all/hosts/h1/gid_index: should be 0-255 (an index into the HCA port's GID table), "
         "got 300"),
    Case("ib_sl-16", {"hosts.yaml": _inv("ib_sl: 16")}, _list(),
         "{d}/hosts.yaml:3:17: all/hosts/h1/ib_sl: should be 0-15 (NCCL_IB_SL, an InfiniBand service level), got 16"),
    # -- a ProxyJump that would reach ssh_config's Match exec or ssh's command line: refused where it is written
    Case("proxyjump-shell-in-inventory",
         {"hosts.yaml": "all:\n  hosts:\n    h1: {ansible_ssh_common_args: '-o ProxyJump=j;touch {d}/pwned'}\n"},
         _list(), f"{{d}}/hosts.yaml:3:35: all/hosts/h1/ansible_ssh_common_args: should be {COMMON_ARGS_MSG}, got "
                  "'-o ProxyJump=j;touch {d}/pwned'"),
    Case("proxyjump-option-in-inventory", {"hosts.ini": "[g]\nh1 ansible_ssh_common_args='-J -oProxyCommand=x'\n"},
         _list("hosts.ini"),
         f"{{d}}/hosts.ini:2:28: g/h1/ansible_ssh_common_args: should be {COMMON_ARGS_MSG}, got '-J -oProxyCommand=x'"),
    Case("proxyjump-user-in-inventory", {"hosts.yaml": _inv("ansible_ssh_common_args: '-Jx`touch {d}/pwned`@j:22'")},
         _list(), f"{{d}}/hosts.yaml:3:35: all/hosts/h1/ansible_ssh_common_args: should be {COMMON_ARGS_MSG}, got "
                  "'-Jx`touch {d}/pwned`@j:22'"),
    Case("proxyjump-shell-in-ssh_config", {"hosts.yaml": _inv("ansible_host: 127.0.0.1"),
                                           ".ssh/config": "Host *\n  ProxyJump %r@j$(touch {d}/pwned)\n"},
         ("run", "-i", "{d}/hosts.yaml", "all", "--", "true"),
         f"{{d}}/.ssh/config:2:13: ProxyJump should be {JUMP_MSG}, got '%r@j$(touch {{d}}/pwned)'"),
    Case("ssh-dead-after-not-a-number", {"hosts.yaml": _inv("ansible_host: 127.0.0.1")},
         ("run", "-i", "{d}/hosts.yaml", "all", "--", "true"),
         "FLEET_SSH_DEAD_AFTER_S: ssh_dead_after_s should be a number of seconds from 1 to 3600, got 'nan'",
         env={"FLEET_SSH_DEAD_AFTER_S": "nan"}),
    # -- item 7: a secret file others may read, refused before anything connects
    Case("secret-file-0644", {"tok": "hf_secret\n"},
         ("up", str(REPO / "playbooks" / "pd-glm-2p1d-6000d.yaml"), "-i", str(EXAMPLE), "--secret", "HF_TOKEN=@{d}/tok"),
         "secret HF_TOKEN: {d}/tok is accessible by group or others (mode 0644); run chmod 600 {d}/tok, as ssh "
         "requires of a private key", modes={"tok": 0o644}),
    # -- item 11: unbounded input and values that fail to construct
    Case("bad-timestamp", {"hosts.yaml": _inv("gpu_count: 2024-13-45")}, _list(),
         "{d}/hosts.yaml:3:21: invalid YAML: '2024-13-45' is not a valid timestamp (month must be in 1..12)"),
    Case("float-abc", {"hosts.yaml": _inv("gpu_count: !!float abc")}, _list(),
         "{d}/hosts.yaml:3:21: invalid YAML: 'abc' is not a valid float (could not convert string to float: 'abc')"),
    Case("int-abc", {"hosts.yaml": _inv("gpu_count: !!int abc")}, _list(),
         "{d}/hosts.yaml:3:21: invalid YAML: 'abc' is not a valid int (invalid literal for int() with base 10: 'abc')"),
    Case("5000-digit-value", {"hosts.yaml": _inv(f"gpu_count: {DIGITS}")}, _list(),
         "{d}/hosts.yaml:3:21: a number of 5000 characters; fleet reads at most 64"),
    Case("5000-digit-key", {"hosts.yaml": f"all:\n  vars:\n    ? {DIGITS}\n    : 1\n"}, _list(),
         "{d}/hosts.yaml:3:7: a number of 5000 characters; fleet reads at most 64"),
    Case("5000-digit-playbook-value", {"book.yaml": f"name: x\nrecipe: qwen/sglang-tp2-h100-tuned\nreplicas: {DIGITS}\n"},
         ("plan", "{d}/book.yaml", "-i", str(EXAMPLE)),
         "{d}/book.yaml:3:11: a number of 5000 characters; fleet reads at most 64"),
    Case("ini-gpu_count-5000-digits", {"hosts.ini": f"[g]\nh1 gpu_count={DIGITS}\n"}, _list("hosts.ini"),
         f"{{d}}/hosts.ini:2:14: g/h1/gpu_count: should be an integer, got '{'9' * 159}... (5002 characters)"),
    Case("ini-port-5000-digits", {"hosts.ini": f"[g]\nh1:{DIGITS}\n"}, _list("hosts.ini"),
         f"{{d}}/hosts.ini:2:1: g/h1:{'9' * 195}...: {HOST_MSG}, got 'h1:{'9' * 156}... (5005 characters)"),
    Case("ini-range-200000", {"hosts.ini": "[g]\nh[0:200000]\n"}, _list("hosts.ini"),
         "{d}/hosts.ini:2:1: g: host range 'h[0:200000]': names 200001 hosts; an inventory holds at most 10000"),
    Case("ini-range-product", {"hosts.ini": "[g]\nh[0:99999]x[0:99999]\n"}, _list("hosts.ini"),
         "{d}/hosts.ini:2:1: g: host range 'h[0:99999]x[0:99999]': names 10000000000 hosts; an inventory holds at "
         "most 10000"),
    Case("ini-ranges-over-the-host-limit", {"hosts.ini": "[a]\nh[0:5999]\n[b]\nk[0:5999]\n"}, _list("hosts.ini"),
         "{d}/hosts.ini:4:1: b/k4000: more than 10000 hosts; an inventory holds at most 10000"),
    Case("ini-huge-value", {"hosts.ini": lambda: "[g]\nh1 x=[" + "1," * 40000 + "]\n"}, _list("hosts.ini"),
         "{d}/hosts.ini:2:6: g/h1/x: a value of 80002 characters; fleet reads at most 65536"),
    Case("yaml-huge-scalar", {"hosts.yaml": lambda: _inv("x: " + "a" * 70000)}, _list(),
         "{d}/hosts.yaml:3:13: a value of 70000 characters; fleet reads at most 65536"),
    Case("yaml-4.8MB-list", {"hosts.yaml": lambda: "all:\n  vars:\n    x: [" + "1, " * 1_600_000 + "]\n"}, _list(),
         "{d}/hosts.yaml: larger than 1048576 bytes, the most fleet reads from a config file"),
    Case("yaml-alias-bomb", {"hosts.yaml": "all:\n  vars:\n    a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"    {n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdef", "bcdefg"))}, _list(),
         "{d}/hosts.yaml:8:20: aliases expand the document past 250000 values"),
    # -- more of the same kind
    Case("python-object-tag", {"hosts.yaml": "all:\n  vars:\n    x: !!python/object:os.system ls\n"}, _list(),
         "{d}/hosts.yaml:3:8: invalid YAML: could not determine a constructor for the tag "
         "'tag:yaml.org,2002:python/object:os.system'"),
    Case("newline-in-ansible_host", {"hosts.yaml": 'all:\n  hosts:\n    h1: {ansible_host: "h\\nProxyCommand x"}\n'},
         _list(), f"{{d}}/hosts.yaml:3:24: all/hosts/h1/ansible_host: {ADDR_MSG}, got 'h\\nProxyCommand x'"),
    Case("ini-not-utf8", {}, _list("hosts.ini"), "{d}/hosts.ini: not UTF-8 text (invalid start byte at byte 0)",
         raw={"hosts.ini": b"\xff\xfe[g]\nh1\n"}),
    Case("ini-step-huge", {"hosts.ini": f"[g]\nh[0:9:{DIGITS}]\n"}, _list("hosts.ini"),
         f"{{d}}/hosts.ini:2:1: g: host range 'h[0:9:{'9' * 153}... (5009 characters): step should be a positive "
         f"integer, got '{'9' * 159}... (5002 characters)"),
]


def _bounded(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, float]:
    """Runs ``argv`` under ``RLIMIT_CPU``; (exit code, peak RSS in MB).  Output in cwd/out, cwd/err."""
    with (cwd / "out").open("wb") as out, (cwd / "err").open("wb") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, preexec_fn=_limits)
    watchdog = threading.Timer(120, proc.kill)  # a safety net only: RLIMIT_CPU is the bound
    watchdog.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)  # not proc.wait(): wait4 gives the child's own rusage
    finally:
        watchdog.cancel()
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    assert code != -signal.SIGXCPU, f"{argv[3:]}: more than {CPU_S} s of CPU"
    return code, usage.ru_maxrss / 1024


def _write(d: Path, case: Case) -> None:
    for name, text in case.files.items():
        body = text() if callable(text) else text
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(body.replace("{d}", str(d)))
        if name in case.modes:
            (d / name).chmod(case.modes[name])
    for name, data in case.raw.items():
        (d / name).write_bytes(data)


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_S, CPU_S + 1))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input_is_one_line_exit_2_within_bounds(case: Case, tmp_path: Path) -> None:
    _write(tmp_path, case)
    argv = [sys.executable, "-c", _MAIN, *(a.replace("{d}", str(tmp_path)) for a in case.argv)]
    env = {**os.environ, "HOME": str(tmp_path), **case.env}
    env.pop("SSH_AUTH_SOCK", None)
    code, rss_mb = _bounded(argv, tmp_path, env)
    assert rss_mb < MAX_RSS_MB, f"{case.id}: {rss_mb:.0f} MB resident"
    assert (code, (tmp_path / "err").read_text()) == (2, f"fleet: error: {case.line.replace('{d}', str(tmp_path))}\n")
    assert (tmp_path / "out").read_bytes() == b""
    assert not (tmp_path / "pwned").exists()


def test_the_largest_inventory_accepted_loads_within_the_same_bounds(tmp_path: Path) -> None:
    """10000 hosts from ranges (the most an inventory holds): group membership was quadratic."""
    (tmp_path / "hosts.ini").write_text("[a]\nh[0:4999] gpu_count=8\n[b]\nk[0:4999]\n[c:children]\na\nb\n")
    argv = [sys.executable, "-c", _MAIN, "inventory", "list", "-i", str(tmp_path / "hosts.ini"), "--limit", "h1"]
    code, rss_mb = _bounded(argv, tmp_path, {**os.environ, "HOME": str(tmp_path)})
    assert code == 0, (tmp_path / "err").read_text()
    assert rss_mb < MAX_RSS_MB
    assert [line.split()[0] for line in (tmp_path / "out").read_text().splitlines() if line.startswith("h1 ")] == ["h1"]
