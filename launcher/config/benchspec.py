"""What a bench run asks for, parsed from flags or a playbook's ``bench`` section: workload shapes
(``50k+1.5k``, ``8k+1k``, ``IN+OUT``), the SLO goodput counts against, the concurrency sweep.

Contract: pure; every bad value raises :class:`~launcher.errors.UsageError` (a flag) or
:class:`~launcher.errors.InputError` (a playbook line, when ``source`` is given) naming it.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from launcher.errors import InputError, UsageError
from launcher.model import Source

# The catalog's two workloads (its reports quote "+X% (50k + 1.5k), +Y% (8k + 1k)").
CATALOG_SHAPES = ("50k+1.5k", "8k+1k")
DEFAULT_CONCURRENCY = (1, 4, 16)
# The catalog does not state the SLO its figures were measured within; this one is fleet's own
# default and every report shows where its SLO came from.
DEFAULT_TTFT_MS = 10000.0
DEFAULT_TPOT_MS = 100.0
MAX_CONCURRENCY = 4096
# DistServe's goodput: the highest load at which at least this share of requests meets both SLOs.
ATTAINMENT_TARGET = 0.9
SEED_RANGE = 2**31  # seeds are 0 .. 2**31-1 (what the client's --random-seed takes)


def new_seed() -> int:
    """A fresh run seed: no two runs send the same prompts (an engine's prefix cache would
    answer a repeated prompt from cache); recorded in the report so a run can be repeated."""
    return secrets.randbelow(SEED_RANGE)


def level_seed(run_seed: int, index: int) -> int:
    """The seed of a run's ``index``-th level: each level its own prompts (the first requests
    of a higher level are not the lower level's, cached), reproducible from the run's seed."""
    return (run_seed + 7919 * index) % SEED_RANGE

_LEN = re.compile(r"^(\d+(?:\.\d+)?)([kKmM]?)$")


@dataclass(frozen=True, slots=True, kw_only=True)
class Shape:
    """A fixed-length workload: every request has ``input_len`` prompt tokens and asks for
    exactly ``output_len`` tokens.  ``label`` is how it was written (``50k+1.5k``)."""

    label: str
    input_len: int
    output_len: int

    def scaled(self, factor: float) -> Shape:
        """Lengths multiplied by ``factor`` (at least 1 token each); the label says so."""
        if factor == 1.0:
            return self
        return Shape(
            label=f"{self.label} x{factor:g}",
            input_len=max(1, round(self.input_len * factor)),
            output_len=max(1, round(self.output_len * factor)),
        )

    @property
    def base_label(self) -> str:
        """The label without its scale suffix: the catalog's workload name."""
        return self.label.split(" ", 1)[0]


@dataclass(frozen=True, slots=True, kw_only=True)
class Slo:
    """Per-request limits a request must meet to count towards goodput; ``origin`` says where
    they were set (``--slo``, the playbook's line, or fleet's default)."""

    ttft_ms: float
    tpot_ms: float
    origin: str


def _tokens(text: str) -> int | None:
    m = _LEN.match(text.strip())
    if m is None:
        return None
    scale = {"": 1, "k": 1000, "m": 1000000}[m.group(2).lower()]
    value = float(m.group(1)) * scale
    return int(value) if value >= 1 and value == int(value) else None


def _bad(source: Source | None, key: str, message: str) -> Exception:
    return InputError(source, message, key) if source is not None else UsageError(message)


def parse_shape(text: str, source: Source | None = None, key: str = "bench/shapes") -> Shape:
    """``IN+OUT`` token counts, each an integer with an optional ``k``/``m`` suffix."""
    parts = text.split("+")
    lens = [_tokens(p) for p in parts] if len(parts) == 2 else []
    if len(lens) != 2 or None in lens:
        raise _bad(source, key, f"bad shape {text!r}: expected IN+OUT token counts such as 8k+1k or 512+64")
    return Shape(label=text.replace(" ", ""), input_len=lens[0] or 0, output_len=lens[1] or 0)


def parse_slo(text: str, origin: str, source: Source | None = None) -> Slo:
    """``ttft=MS,tpot=MS`` (milliseconds; ``s`` or ``ms`` suffixes allowed); both required."""
    values: dict[str, float] = {}
    for item in text.split(","):
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or key not in ("ttft", "tpot") or key in values:
            raise _bad(source, "bench/slo", f"bad SLO {text!r}: expected ttft=MS,tpot=MS")
        raw = raw.strip()
        factor = 1000.0 if raw.endswith("s") and not raw.endswith("ms") else 1.0
        try:
            value = float(raw.removesuffix("ms").removesuffix("s")) * factor
        except ValueError:
            value = -1.0
        if not value > 0:
            raise _bad(source, "bench/slo", f"bad SLO {text!r}: {key} must be a positive number of milliseconds")
        values[key] = value
    if set(values) != {"ttft", "tpot"}:
        raise _bad(source, "bench/slo", f"bad SLO {text!r}: expected ttft=MS,tpot=MS")
    return Slo(ttft_ms=values["ttft"], tpot_ms=values["tpot"], origin=origin)


def parse_concurrency(text: str) -> tuple[int, ...]:
    """``1,4,16``: distinct positive integers, kept in the order given."""
    levels: list[int] = []
    for item in text.split(","):
        item = item.strip()
        if not item.isdigit() or not 1 <= int(item) <= MAX_CONCURRENCY or int(item) in levels:
            raise UsageError(
                f"bad --concurrency {text!r}: expected distinct integers from 1 to {MAX_CONCURRENCY}, such as 1,4,16"
            )
        levels.append(int(item))
    return tuple(levels)


MAX_RATE = 10000.0


def parse_rates(text: str) -> tuple[float, ...]:
    """``0.5,1,2`` requests/s (open loop): distinct positive numbers, kept in the order given."""
    rates: list[float] = []
    for item in text.split(","):
        try:
            value = float(item.strip())
        except ValueError:
            value = -1.0
        if not 0 < value <= MAX_RATE or value in rates:
            raise UsageError(f"bad --request-rate {text!r}: expected distinct requests/s above 0 (at most "
                             f"{MAX_RATE:g}), such as 0.5,1,2")  # fmt: skip
        rates.append(value)
    return tuple(rates)


def parse_target(value: float) -> float:
    """``--attainment-target`` in percent (DistServe's 90 by default) -> a share."""
    if not 0 < value <= 100:
        raise UsageError(f"bad --attainment-target {value:g}: expected a percentage above 0, at most 100")
    return value / 100.0


def default_slo() -> Slo:
    return Slo(ttft_ms=DEFAULT_TTFT_MS, tpot_ms=DEFAULT_TPOT_MS, origin="fleet default")
