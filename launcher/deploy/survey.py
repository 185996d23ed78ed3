"""What runs where now, and what a plan changes about it: one round trip per host reads this
deployment's manifests, the liveness of its units, the SHA-256 of each planned secrets file and
(when asked) which planned images are present; :func:`decide` turns that into a restart decision
per group.

Secret values are compared through the hash of the 0600 secrets file, taken on the host at
survey time: no digest of a secret is kept anywhere on the host (a digest in the world-readable
manifest let any local user check guesses offline).

Contract: :func:`decide` and :func:`next_generation` are pure; :func:`survey_host` is one round
trip (two when manifests name units not planned here: their liveness by the runtime they were
deployed with).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal, Mapping, Sequence

from launcher.deploy.desired import Desired, groups, secrets_file, step_of
from launcher.deploy.manifest import LEGACY_KEY, Manifest, parse
from launcher.remote import STEP_TIMEOUT_S, failure
from launcher.deploy.steps import hashes_argv, parse_hashes, read_manifests_argv
from launcher.execute.files import Step, run_batch
from launcher.execute.transport import Result, Transport
from launcher.model import Runtime
from launcher.render import FLEET_ROOT
from launcher.runtimes import registry as runtimes
from launcher.runtimes.base import MISSING, Liveness
from launcher.runtimes.container import images_argv, parse_images


def deployment_dir(deployment: str) -> str:
    return f"{FLEET_ROOT}/{deployment}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Survey:
    """What runs on one host: this deployment's manifests (of this host only), liveness, and
    (when asked for) which of the planned units' images are present."""

    manifests: Mapping[str, Manifest]
    live: Mapping[str, Liveness]
    images: Mapping[str, bool] = field(default_factory=dict)  # image -> present
    secret_hashes: Mapping[str, str | None] = field(default_factory=dict)  # secrets file -> sha256 (None: absent)
    legacy: tuple[str, ...] = ()  # units whose manifest still holds an older fleet's secrets digest


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupChange:
    group: str
    step: int
    action: Literal["unchanged", "start", "restart"]
    reason: str
    units: tuple[Desired, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    groups: tuple[GroupChange, ...]
    orphans: tuple[Manifest, ...]  # deployed here before, not in the plan any more

    @property
    def changing(self) -> tuple[GroupChange, ...]:
        return tuple(g for g in self.groups if g.action != "unchanged")


def decide(
    units: Sequence[Desired], surveys: Mapping[str, Survey], secrets: Mapping[str, str] | None = None
) -> Decision:
    """Per restart group: ``start`` when no rank is deployed, ``restart`` when a rank is missing,
    its render hash changed, its secret values changed (``secrets``: the resolved values,
    compared with the secrets file the survey hashed; a file the survey did not hash counts as
    unchanged), or a rank is not running."""
    changes = []
    for group, members in groups(units).items():
        olds = {d.name: surveys[d.host].manifests.get(d.name) for d in members}
        missing = [d for d in members if olds[d.name] is None]
        changed = [d for d in members if (m := olds[d.name]) is not None and m.render_hash != d.render_hash]
        resecret = [
            d for d in members
            if d not in changed and olds[d.name] is not None and secrets_changed(d, surveys[d.host], secrets)
        ]
        down = [d for d in members if surveys[d.host].live.get(d.name, Liveness(state="missing")).state != "running"]
        action: Literal["unchanged", "start", "restart"]
        if len(missing) == len(members):
            action, reason = "start", "new"
        elif missing or changed or resecret:
            parts = [f"{d.host}/{d.name}" for d in (*missing, *changed)] + [f"secrets of {d.host}/{d.name}" for d in resecret]
            action, reason = "restart", "changed: " + ", ".join(parts)
        elif down:
            state = surveys[down[0].host].live.get(down[0].name, Liveness(state="missing")).state
            action, reason = "restart", f"{down[0].host}/{down[0].name} is {state}"
        else:
            action, reason = "unchanged", ""
        changes.append(GroupChange(group=group, step=step_of(members), action=action, reason=reason, units=members))
    wanted = {(d.host, d.name) for d in units}
    orphans = tuple(
        m for host, s in sorted(surveys.items()) for name, m in sorted(s.manifests.items()) if (host, name) not in wanted
    )
    return Decision(groups=tuple(changes), orphans=orphans)


def secrets_changed(d: Desired, survey: Survey, values: Mapping[str, str] | None) -> bool:
    """Whether ``d``'s secrets file on its host (as ``survey`` hashed it) differs from the one
    ``values`` give: digests compared, never values.  False when there is nothing to compare (not
    hashed, or a secret not resolved here)."""
    if values is None or d.secrets_path not in survey.secret_hashes:
        return False
    if any(ref.name not in values for ref in d.unit.secrets):
        return False  # not resolved here: nothing to compare
    sf = secrets_file(d, values)
    return sf is not None and survey.secret_hashes[d.secrets_path] != hashlib.sha256(sf.content).hexdigest()


def next_generation(old: Manifest | None, d: Desired) -> int:
    """The generation number ``d`` runs as once installed over ``old`` (its manifest found on
    the host, None: nothing deployed): a new render is the next number, the same render keeps
    its number."""
    if old is None:
        return 1
    return old.generation if old.render_hash == d.render_hash else old.generation + 1


def missing(surveys: Mapping[str, Survey], d: Desired) -> bool:
    """The survey found ``d``'s unit absent from its host (nothing to hold or stop)."""
    s = surveys.get(d.host)
    return s is not None and s.live.get(d.name, MISSING).state == "missing"


def survey_host(t: Transport, host: str, deployment: str, units: Sequence[Desired]) -> Survey:
    """One round trip (two when manifests name units not planned here: their liveness by the
    runtime they were deployed with)."""
    ask = SurveyAsk.of(host, units, images=False)
    return ask.survey(t, deployment, run_batch(t, ask.steps(deployment), timeout=STEP_TIMEOUT_S))


@dataclass(frozen=True, slots=True, kw_only=True)
class SurveyAsk:
    """The survey's commands for one host, and how to read their answers."""

    host: str
    names: Mapping[str, tuple[str, ...]]  # planned units by (planned) runtime name
    images: tuple[str, ...]
    secret_files: tuple[str, ...]  # the planned units' secrets files (hashed, never read)

    @classmethod
    def of(cls, host: str, units: Sequence[Desired], images: bool) -> SurveyAsk:
        mine = [d for d in units if d.host == host]
        names = {rt: tuple(sorted(d.name for d in mine if d.unit.runtime == rt)) for rt in runtimes.names()}
        wanted = tuple(sorted({d.image for d in mine if d.image is not None})) if images else ()
        secret_files = tuple(sorted(d.secrets_path for d in mine if d.unit.secrets))
        return cls(host=host, names=names, images=wanted, secret_files=secret_files)

    def steps(self, deployment: str) -> list[Step]:
        ddir = deployment_dir(deployment)
        out = [Step(argv=read_manifests_argv(ddir), label=f"cat {ddir}/*/manifest.json")]
        out += [Step(argv=rt.liveness_argv(self.names[rt.name]), label=f"{rt.name} liveness")
                for rt in runtimes.runtimes() if self.names[rt.name]]  # fmt: skip
        if self.images:
            out.append(Step(argv=images_argv(self.images), label="docker image inspect"))
        if self.secret_files:
            out.append(Step(argv=hashes_argv(self.secret_files), label="sha256sum secrets files"))
        return out

    def survey(self, t: Transport, deployment: str, results: Sequence[Result]) -> Survey:
        answers = iter(results)
        read = next(answers)
        if not read.ok:
            raise failure(read, read.command)
        manifests: dict[str, Manifest] = {}
        legacy: list[str] = []
        for line in read.stdout_text.splitlines():
            m = parse(line) if line.strip() else None
            if m is not None and m.host == self.host and m.deployment == deployment:
                manifests[m.unit] = m
                if f'"{LEGACY_KEY}"' in line:
                    legacy.append(m.unit)
        live: dict[str, Liveness] = {}
        for rt in runtimes.runtimes():
            if self.names[rt.name]:
                live.update(rt.liveness_from(next(answers), self.names[rt.name]))
        images = parse_images(next(answers).stdout_text) if self.images else {}
        hashes: dict[str, str | None] = {}
        if self.secret_files:
            hashed = next(answers)
            if not hashed.ok:
                raise failure(hashed, hashed.command)
            hashes = parse_hashes(hashed.stdout_text)
        for rt in runtimes.runtimes():
            live.update(rt.run_liveness(t, sorted(m.unit for m in manifests.values() if m.unit not in live and m.runtime == rt.name)))
        return Survey(manifests=manifests, live=live, images=images, secret_hashes=hashes, legacy=tuple(legacy))


