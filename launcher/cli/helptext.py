"""Help text kept beside the commands: one example per command, shown at the end of its ``-h``,
and the one-line summaries ``fleet --help`` lists where a command's first sentence is longer
than a line (tests/unit/test_cli_help.py checks that every command has an example, that each
parses, and that every summary fits)."""

from __future__ import annotations

import click

PB = "playbooks/pd-glm-2p1d-6000d.yaml"
INV = "inventories/prod.yaml"

EXAMPLES: dict[str, str] = {
    "recipes": "fleet recipes list --gpu RTX-6000D",
    "recipes list": "fleet recipes list --engine sglang --topology pd --json",
    "recipes show": "fleet recipes show glm/sglang-pd-tp8pp2ep8-6000d",
    "recipes fit": f"fleet recipes fit glm/sglang-pd-tp8pp2ep8-6000d -i {INV}",
    "inventory": f"fleet inventory list -i {INV} --limit 'rtx6000d:!rtx-06'",
    "inventory list": f"fleet inventory list -i inventories/ -i 'spare-01,spare-02,' --json",
    "plan": f"fleet plan {PB} -i {INV}",
    "render": f"fleet render {PB} -i {INV} -o out/",
    "facts": f"fleet facts -i {INV} --limit rtx6000d",
    "preflight": f"fleet preflight {PB} -i {INV}",
    "up": f"fleet up {PB} -i {INV} --secret HF_TOKEN=@~/.hf --check --diff",
    "down": f"fleet down {PB} -i {INV}",
    "weights": f"fleet weights stage {PB} -i {INV} --source /data/models",
    "weights stage": f"fleet weights stage {PB} -i {INV} --source /data/models",
    "weights verify": f"fleet weights verify {PB} -i {INV} --full",
    "weights warm": f"fleet weights warm {PB} -i {INV}",
    "unlock": f"fleet unlock {PB} -i {INV}",
    "restart": f"fleet restart {PB} -i {INV} --rolling --max-unavailable 1",
    "rollback": f"fleet rollback {PB} -i {INV}",
    "watch": f"fleet watch {PB} -i {INV} --once --dry-run",
    "export": f"fleet export k8s {PB} -i {INV} -o k8s/",
    "export k8s": f"fleet export k8s {PB} -i {INV} -o k8s/",
    "run": f"fleet run -i {INV} 'rtx*' -- nvidia-smi -L",
    "status": f"fleet status {PB} -i {INV} --json",
    "logs": f"fleet logs {PB} -i {INV} --tail 50",
    "top": f"fleet top {PB} -i {INV} --once",
    "metrics": f"fleet metrics targets playbooks/*.yaml -i {INV} -o /etc/prometheus/fleet.json",
    "metrics targets": f"fleet metrics targets playbooks/*.yaml -i {INV} -o /etc/prometheus/fleet.json --limit rtx-05",
    "collect": f"fleet collect {PB} -i {INV} -o evidence.tar.gz",
    "history": "fleet history --deployment glm-pd -n 5",
    "bench": f"fleet bench run {PB} -i {INV} --shape 8k+1k",
    "bench run": f"fleet bench run {PB} -i {INV} --shape 8k+1k --concurrency 1,4,16",
    "bench list": "fleet bench list --json",
    "bench compare": "fleet bench compare 3 4",
    "sandbox": "fleet sandbox up -n 6 && fleet sandbox status",
    "sandbox up": "fleet sandbox up -n 6 --systemd-hosts 2",
    "sandbox down": "fleet sandbox down",
    "sandbox status": "fleet sandbox status --json",
    "sandbox fault": "fleet sandbox fault loss h3 --percent 100",
    "sandbox image": "fleet sandbox image",
    "demo": "fleet demo --keep",
    "completion": "eval \"$(fleet completion bash)\"",
}


SUMMARIES: dict[str, str] = {
    "history": "The runs that changed hosts, newest last (the local record).",
    "facts": "Gather each host's facts in one SSH round and cache them for planning.",
    "preflight": "Check every host of PLAYBOOK before launching (GPUs, RDMA, network, weights).",
    "restart": "Restart PLAYBOOK's engine groups, rolling with --rolling.",
    "rollback": "Return every group of PLAYBOOK to the generation kept in prev/.",
    "collect": "One evidence bundle (logs, facts, rendered files) from every host of PLAYBOOK.",
    "demo": "Bring up a sandbox fleet, deploy a PD and a PP playbook, send real requests.",
    "logs": "Recent log lines of PLAYBOOK's units (or one UNIT).",
    "plan": "Show the units TARGET (a playbook or a recipe id) would run, host by host.",
    "render": "Write the files TARGET (a playbook or a recipe id) would put on each host.",
    "unlock": "Break PLAYBOOK's deploy lock on every host (when its holder is dead).",
    "status": "Per unit: host, role, rank, state, health, generation and drift.",
    "bench": "Measure a deployment, list kept runs, compare two.",
    "sandbox": "A fleet of real SSH hosts on this machine (network namespaces).",
    "run": "Run a command on the hosts of PATTERN; each host's exit and output.",
    "watch": "Keep PLAYBOOKS' deployments alive: recreate broken groups, re-register workers.",
}


def first_sentence(text: str) -> str:
    """The first sentence of a help text, whole (never cut mid-phrase)."""
    text = " ".join(text.split("\n\n")[0].split())
    end = text.find(". ")
    return text[: end + 1] if end >= 0 else text


def attach(cmd: click.Command, path: str) -> None:
    """Set the example of ``cmd`` (found by its path below ``fleet``) and of its subcommands;
    drop the docstrings' ``literal`` markup from their help; attach the shell completers."""
    from launcher.cli.complete import completers

    completers(cmd)
    cmd.help = cmd.help.replace("``", "") if cmd.help else cmd.help
    for param in cmd.params:
        if isinstance(param, click.Option) and param.help:
            param.help = param.help.replace("``", "")
    cmd.short_help = SUMMARIES.get(path) or first_sentence(cmd.help or "")
    example = EXAMPLES.get(path)
    if example is not None and not (cmd.epilog or "").startswith("\b\nExample:"):
        cmd.epilog = f"\b\nExample:\n  {example}" + (f"\n\n{cmd.epilog}" if cmd.epilog else "")
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            attach(sub, f"{path} {name}")
