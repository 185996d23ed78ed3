"""Host rule family "disk <dir>" / "/dev/shm": room for weights and caches, and a /dev/shm as
large as the units with ``--ipc host`` want (warnings)."""

from __future__ import annotations

from launcher.preflight.rules.base import Check, HostCase, size_text, verdict


# Free space below which weights/caches are a warning (the recipe's weight size is not known
# for every entry, so this is a floor, not a fit check).
MIN_FREE_BYTES = 50 * 1024**3



def host(case: HostCase) -> list[Check]:
    hf, h, spec = case.facts, case.host.name, case.host.spec
    if hf is None:
        return []
    out: list[Check] = []
    for label, d in (("models", spec.models_dir), ("cache", spec.cache_dir)):
        disk = hf.disk(d)
        if disk is not None:
            out.append(verdict(h, "", f"disk {d}", disk.free >= MIN_FREE_BYTES,
                              f"{size_text(disk.free)} free on {disk.mount}",
                              f"only {size_text(disk.free)} free on {disk.mount} ({label} dir {d})",
                              f"free space for {'weights' if label == 'models' else 'caches'} under {d}",
                              bad_status="warn"))
    shm = hf.disk("/dev/shm")
    want = case.needs.shm
    if want and shm is not None:
        out.append(verdict(h, "", "/dev/shm", shm.total >= want, f"/dev/shm is {size_text(shm.total)}",
                          f"/dev/shm is {size_text(shm.total)}, units want {size_text(want)}: with --ipc host "
                          "the container uses the host's /dev/shm and --shm-size does not apply",
                          f"mount -o remount,size={want // 1024**3 or 1}G /dev/shm (and in /etc/fstab)",
                          bad_status="warn"))
    return out
