"""Host rule family "driver" / "gpu-*" / "mig" / "npus": the accelerators the units use are there,
of the recipe's kind, size and count, whole (no MIG slices)."""

from __future__ import annotations

from launcher.engines import registry
from launcher.facts.host import HostFacts
from launcher.model import Recipe
from launcher.preflight.rules.base import Check, HostCase, verdict


def host(case: HostCase) -> list[Check]:
    if case.facts is None or not case.needs.gpus:
        return []
    return _accelerator_checks(case.host.name, case.recipe, case.facts, case.needs.gpus)


def _accelerator_checks(h: str, recipe: Recipe, hf: HostFacts, need: int) -> list[Check]:
    if registry.get(recipe.engine).accelerator == "npu":
        if hf.npu_error:
            return [Check(host=h, unit="", name="npus", status="fail", message=f"npu-smi: {hf.npu_error}",
                          fix="check the Ascend driver and that no other process holds the NPUs")]
        return [verdict(h, "", "npus", len(hf.npus) >= need, f"{len(hf.npus)} NPUs",
                       f"{len(hf.npus)} NPUs found, units need {need}",
                       "check npu-smi info and the Ascend driver")]
    out: list[Check] = []
    if not hf.gpus:
        if hf.gpu_error:
            message = f"nvidia-smi: {hf.gpu_error}"
        elif "gpus" in hf.missing_tools:
            message = "nvidia-smi not found: no NVIDIA driver installed"
        else:
            message = "nvidia-smi found no GPU"
        return [Check(host=h, unit="", name="driver", status="fail", message=message,
                      fix="install/load the NVIDIA driver; nvidia-smi must list the GPUs")]
    out.append(Check(host=h, unit="", name="driver", status="pass",
                     message=f"driver {hf.gpus[0].driver}" + (f", CUDA {hf.cuda_version}" if hf.cuda_version else "")))
    skus = sorted({g.sku or g.name for g in hf.gpus})
    ok_sku = all(g.sku in recipe.hardware.skus for g in hf.gpus)
    out.append(verdict(h, "", "gpu-sku", ok_sku, f"{len(hf.gpus)}x {', '.join(skus)}",
                      f"GPUs are {', '.join(skus)}; recipe {recipe.id} needs {' or '.join(recipe.hardware.skus)}",
                      "place the recipe on matching hosts (fleet recipes fit)"))
    out.append(verdict(h, "", "gpu-count", len(hf.gpus) >= need, f"{len(hf.gpus)} GPUs",
                      f"{len(hf.gpus)} GPUs found, units use indices up to {need - 1}",
                      "fix gpu_count in the inventory or the placement"))
    want = recipe.hardware.min_gpu_memory_gib
    weights = recipe.measured.weights_gib_per_card
    known = [g.memory_mib for g in hf.gpus if g.memory_mib]
    if want is not None and known:
        have = min(known) // 1024
        out.append(verdict(h, "", "gpu-memory", have >= want, f"{have} GiB per GPU",
                          f"{have} GiB per GPU, recipe needs {want} GiB",
                          "place the recipe on hosts with larger GPUs"))
    elif weights is not None and known:
        have_gib = min(known) / 1024
        out.append(verdict(h, "", "gpu-memory", have_gib > weights, f"{have_gib:.0f} GiB per GPU",
                          f"{have_gib:.0f} GiB per GPU cannot hold the recipe's {weights:g} GiB of weights per card",
                          "place the recipe on hosts with larger GPUs"))
    mig = sorted(i for i in hf.mig_enabled if i < need)
    if mig:
        shown = ", ".join(map(str, mig))
        out.append(Check(host=h, unit="", name="mig", status="fail",
                         message=f"MIG is enabled on GPU {shown}: engines would see MIG slices, not whole GPUs",
                         fix=f"nvidia-smi -i {mig[0]} -mig 0 on each such GPU, then reset it (nvidia-smi -r)"))
    return out
