"""Rule family "weights" / "draft" / "tokenizer" / "weights-size" / "weights-revision": per unit,
the weights it reads are staged where it reads them, complete (:func:`unit`); across the ranks,
the same size and staged revision (:func:`consistency`)."""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from typing import Mapping, Sequence

from launcher.model import Host, Recipe, Unit
from launcher.preflight.rules.base import (
    MANIFEST, STAGE_FIX, Check, Level, PathProbe, PlanCase, Status, data_plane, size_text,
)  # fmt: skip
from launcher.weights import manifest as weights_manifest
from launcher.weights.needs import weight_needs


def unit(case: PlanCase, u: Unit) -> list[Check]:
    assert case.probes is not None
    host_paths = case.probes.paths.get(u.host)
    if host_paths is None:
        return []
    return _weight_checks(u, case.inventory.host(u.host), case.recipe, host_paths)


def consistency(case: PlanCase) -> list[Check]:
    assert case.probes is not None
    sizes: dict[str, dict[str, int | None]] = {}
    revisions: dict[str, dict[str, str]] = {}  # "weights"/"draft weights" -> host -> staged revision
    for u in case.plan.units:
        host_paths = case.probes.paths.get(u.host)
        if host_paths is None:
            continue
        for i, need in enumerate(weight_needs(u, case.inventory.host(u.host), case.recipe)):
            p = host_paths.get(need.local or need.hf_cache or "")
            if p is not None and p.exists and data_plane(u) and i == 0:
                sizes.setdefault(u.group, {})[u.host] = p.bytes
            if p is not None and p.revision is not None:
                revisions.setdefault(need.what, {})[u.host] = p.revision
    out: list[Check] = []
    for g, per_host in sorted(sizes.items()):
        present = {s for s in per_host.values() if s is not None}
        if len(present) > 1:
            detail = ", ".join(f"{h}={s}" for h, s in sorted(per_host.items()))
            out.append(Check(host=sorted(per_host)[0], unit=g, name="weights-size", status="warn",
                             message=f"weights differ in size across ranks: {detail}",
                             fix=STAGE_FIX + ": a truncated shard loads silently"))
    for what, revs in sorted(revisions.items()):
        if len(set(revs.values())) > 1:
            detail = ", ".join(f"{h}={r}" for h, r in sorted(revs.items()))
            out.append(Check(host=sorted(revs)[0], unit=case.plan.deployment, name="weights-revision", status="fail",
                             message=f"staged {what} differ in revision across ranks: {detail}",
                             fix=STAGE_FIX + ": every rank gets the source's copy"))
    return out


def _weight_checks(u: Unit, host: Host, recipe: Recipe, paths: Mapping[str, PathProbe]) -> list[Check]:
    out: list[Check] = []
    for need in weight_needs(u, host, recipe):
        name = {"draft weights": "draft", "tokenizer": "tokenizer"}.get(need.what, "weights")
        if need.local is not None:
            p = paths.get(need.local)
            if p is None:
                continue
            if not p.exists:
                out.append(Check(host=u.host, unit=u.name, name=name, status="fail",
                                 message=f"{need.what} missing: {need.local}"
                                 + (" (must sit beside the target on every rank)" if need.beside else ""),
                                 fix=STAGE_FIX))
                continue
            out.append(_present(u, name, need.what, need.local, p))
            continue
        if need.staged is None:
            continue
        hf_probe = paths.get(need.hf_cache) if need.hf_cache else None
        staged = paths.get(need.staged)
        if hf_probe is not None and hf_probe.exists:
            out.append(_present(u, name, need.what, need.hf_cache or "", hf_probe))
        elif staged is not None and staged.exists:
            out.append(Check(host=u.host, unit=u.name, name=name, status="warn",
                             message=f"{need.value} is staged at {need.staged}, but the engine is given the "
                             f"repo id and will download it into the HF cache"
                             + (f" ({need.hf_cache})" if need.hf_cache else ""),
                             fix="give the engine the local path in overrides.engine_args (e.g. "
                             f"--model-path {posixpath.join('/models', need.value)})"))
        elif hf_probe is not None or staged is not None:
            where = " nor ".join(p for p in (need.staged, need.hf_cache) if p)
            bad: Status = "fail" if need.offline else "warn"
            consequence = ("HF_HUB_OFFLINE is set, so the engine cannot download it" if need.offline
                           else "every rank downloads it at start")
            hub = posixpath.dirname(need.hf_cache) if need.hf_cache else None
            fix = (f"pre-download it on every rank: HF_HUB_CACHE={hub} huggingface-cli download {need.value}"
                   if hub else
                   f"{STAGE_FIX} (puts it at {need.staged} on every rank)")
            out.append(Check(host=u.host, unit=u.name, name=name, status=bad,
                             message=f"{need.what} {need.value} not staged: neither {where} exists; {consequence}",
                             fix=fix))
    return out


def _present(u: Unit, name: str, what: str, path: str, p: PathProbe) -> Check:
    size = f"{size_text(p.bytes)}, {p.files} files" if p.bytes is not None else "size unknown (du timed out)"
    if p.manifest not in (None, "ok"):
        return Check(host=u.host, unit=u.name, name=name, status="fail", message=f"{path}: {p.manifest}",
                     fix=f"re-sync the weights; {MANIFEST} lists what must be there")
    if p.files == 0:
        return Check(host=u.host, unit=u.name, name=name, status="fail", message=f"{what} at {path} are empty",
                     fix="stage the weights at the same path on every rank")
    if p.staged not in (None, "ok"):
        return Check(host=u.host, unit=u.name, name=name, status="fail", message=f"{path}: {p.staged}",
                     fix=STAGE_FIX + " (moves only the differing files)")
    checked = f"; {MANIFEST} ok" if p.manifest == "ok" else ""
    if p.staged == "ok":
        checked += f"; staged revision {p.revision}"
    return Check(host=u.host, unit=u.name, name=name, status="pass", message=f"{path} ({size}{checked})")


DU_TIMEOUT_S = 120



def probe_sections(paths: Sequence[str], level: Level) -> list[tuple[str, str]]:
    """The host probe's sections this family reads, per path ``i``: ``path:<i>`` (``exists bytes
    files``), ``manifest:<i>`` (its fleet.sha256 verdict: files present, or with ``level``
    ``full`` their hashes), ``weights:<i>`` (its fleet-weights.json and the files' sizes and
    times)."""
    parts = []
    for i, p in enumerate(paths):
        q = shlex.quote(p)
        parts.append((
            f"path:{i}",
            f"if [ -e {q} ]; then b=$(fleet_t {DU_TIMEOUT_S} du -sbL {q} 2>/dev/null | cut -f1); "
            f"n=$(find -L {q} -type f 2>/dev/null | wc -l); echo \"1 ${{b:--}} $n\"; else echo '0 - -'; fi",
        ))
        m = shlex.quote(posixpath.join(p, MANIFEST))
        if level == "full":
            verify = (f"cd {q} && o=$(sha256sum -c --quiet {MANIFEST} 2>&1); r=$?; "
                      f"printf '%s\\n' \"$o\" | head -n 20; echo \"listed $(grep -c . {MANIFEST})\"; exit $r")
        else:
            verify = (f"cd {q} && n=0; while read -r s f; do f=${{f#\\*}}; n=$((n+1)); "
                      f"[ -f \"$f\" ] || echo \"$f: missing\"; done < {MANIFEST}; echo \"listed $n\"")
        parts.append((f"manifest:{i}", f"if [ -f {m} ]; then ( {verify} ); else echo none; fi"))
        w = shlex.quote(posixpath.join(p, weights_manifest.MANIFEST_NAME))
        parts.append((f"weights:{i}", f"if [ -f {w} ]; then cat {w}; echo {_FILES_MARK}; "
                                      f"find {q} -type f -printf '%s %Ts %P\\n'; fi"))
    return parts


def parse_probe(s: Mapping[str, tuple[int, str]], paths: Sequence[str], level: Level) -> dict[str, PathProbe]:
    """Each path's :class:`PathProbe` from the probe's sections (a path without its section:
    left out)."""
    found: dict[str, PathProbe] = {}
    for i, p in enumerate(paths):
        cells = s.get(f"path:{i}", (0, ""))[1].split()
        if len(cells) != 3:
            continue
        exists = cells[0] == "1"
        m_rc, m_text = s.get(f"manifest:{i}", (0, "none"))
        staged, revision = _staged_verdict(s.get(f"weights:{i}", (0, ""))[1]) if exists else (None, None)
        found[p] = PathProbe(
            exists=exists,
            bytes=int(cells[1]) if cells[1].isdigit() else None,
            files=int(cells[2]) if cells[2].isdigit() else None,
            manifest=_manifest_verdict(m_rc, m_text, level) if exists else None,
            staged=staged,
            revision=revision,
        )
    return found


def _manifest_verdict(rc: int, text: str, level: Level) -> str | None:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if lines == ["none"]:
        return None
    listed = next((int(ln.split()[1]) for ln in lines if re.fullmatch(r"listed \d+", ln)), 0)
    bad = [ln for ln in lines if not re.fullmatch(r"listed \d+", ln)]
    if level == "cheap":
        missing = [ln.rsplit(": missing", 1)[0] for ln in bad if ln.endswith(": missing")]
        if not missing:
            return "ok"
        shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        return f"{len(missing)} of {listed} files listed in {MANIFEST} are missing ({shown})"
    if rc == 0:
        return "ok"
    failed = [ln.rsplit(":", 1)[0] for ln in bad if ln.endswith("FAILED") or ln.endswith("FAILED open or read")]
    shown = ", ".join(failed[:3]) + (", ..." if len(failed) > 3 else "")
    return f"{len(failed)} of {listed} files fail {MANIFEST} ({shown})" if failed else (bad[-1] if bad else f"sha256sum exited {rc}")


_FILES_MARK = "--fleet-weights-files--"


def _staged_verdict(text: str) -> tuple[str | None, str | None]:
    """(verdict, revision) of a ``weights:<i>`` section: the dir's fleet-weights.json and its
    files (size, mtime), compared the way ``fleet weights verify`` does without --full."""
    if not text.strip():
        return None, None
    doc, _, listing = text.partition(_FILES_MARK)
    try:
        manifest = weights_manifest.from_json(json.loads(doc))
    except ValueError as err:
        return f"{weights_manifest.MANIFEST_NAME}: {err}", None
    files: dict[str, tuple[int, int]] = {}
    for line in listing.splitlines():
        cells = line.split(" ", 2)
        if len(cells) == 3 and cells[0].isdigit() and cells[1].isdigit() and cells[2].split("/")[0] not in weights_manifest.SKIP:
            files[cells[2]] = (int(cells[0]), int(cells[1]))
    bad = weights_manifest.compare(manifest, weights_manifest.Listing(exists=True, files=files, manifest=manifest))
    if not bad:
        return "ok", manifest.revision
    shown = ", ".join(m.line() for m in bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
    return f"{len(bad)} file(s) differ from {weights_manifest.MANIFEST_NAME}: {shown}", manifest.revision
