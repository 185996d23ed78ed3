"""The values in dashboards/fleet.json: ones Grafana accepts, and ones that make sense.

test_dashboard.py checks that every field is one Grafana's dashboard types declare; their
``from_json`` takes any value.  Here every value is held to the type the same types give it
(grafana-foundation-sdk 1769699998!10.1.0, generated from Grafana 10.1's schemas): the enums
(``thresholds.mode``, legend ``displayMode`` / ``placement``, variable ``type`` / ``refresh``, heatmap
``color.mode`` / ``yAxis.axisPlacement`` / ``rowsFrame.layout``, a Prometheus query's ``format`` ...),
ints, bools and strings.  Every ``unit`` is one of the SDK's unit ids, every panel ``type`` a panel
plugin it registers and every data source ``type`` a data source it registers.  What the types
leave as free strings is checked against Grafana's source where that is the only place the values
are listed (each list names its file and the commit it was read at).  Last, what only makes sense:
the grid, unique ids and refIds, the refresh, time and time zone, the legends naming labels the
query returns, ``pNN`` legends matching their quantile, and the metrics and ``kind`` values being
ones fleet's targets serve.

``problems`` gives one line a problem, naming the panel (id and title) or the dashboard and the
field; ``test_each_check_fails_on_a_bad_value`` plants one bad value a check and asserts its line.
"""

from __future__ import annotations

import copy
import enum
import json
import re
import types
import typing
import zoneinfo
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from grafana_foundation_sdk.cog import plugins as grafana_plugins
from grafana_foundation_sdk.cog import runtime as grafana_runtime
from grafana_foundation_sdk.cog import variants as grafana_variants
from grafana_foundation_sdk.models import dashboard as grafana
from grafana_foundation_sdk.models import units as grafana_units

from launcher.observe.names import NAMES
from launcher.observe.targets import LABELS
from tests.observe.test_dashboard import DASHBOARD, _exposed, _metrics

grafana_plugins.register_default_plugins()
_RUNTIME = grafana_runtime.Runtime()
PANEL_TYPES = set(_RUNTIME.panelcfg_variants) | {"row"}
# The types register a data source for each query model they declare; Grafana's built-in "grafana"
# data source (the built-in annotation's) has none: public/app/plugins/datasource/grafana/plugin.json
# ("id": "grafana"), grafana/grafana at 0345b654b87da8b6c7627194b0ab5bd0b9b7bdfb.
DATASOURCE_TYPES = set(_RUNTIME.dataquery_variants) | {"grafana"}
UNITS = {v for k, v in vars(grafana_units).items() if isinstance(v, str) and not k.startswith("_")}
REFRESH_INTERVALS = grafana.TimePicker().refresh_intervals  # the time picker's default choices
# public/app/core/constants.ts GRID_COLUMN_COUNT.
GRID_COLUMNS = 24
# Grafana migrates an older schemaVersion on load (36: the types' own default) and keeps a newer
# one as is; 41 is the newest migration seen in pkg/apis/dashboard/migration/schemaversion
# (v41_test.go, grafana/grafana at 6d0a6f47a87eb35a76d8a6a29edd8e761743c941).  From 38 (Grafana
# 10.1, the types') to the dashboard's 39, V39 only rewrites the timeSeriesTable transformation.
SCHEMA_VERSIONS = range(36, 42)
# packages/grafana-data/src/transformations/fieldReducer.ts ReducerID, grafana/grafana at
# 00f7793ab326aa460ef92592c87d2733d46cfbb1 (newer Grafanas add more, e.g. the percentiles).
REDUCERS = {"sum", "max", "min", "logmin", "mean", "last", "first", "count", "range", "diff", "delta", "step",
            "firstNotNull", "lastNotNull", "changeCount", "distinctCount", "allIsZero", "allIsNull"}  # fmt: skip
# packages/grafana-data/src/transformations/transformers/ids.ts DataTransformerID, only the one
# the dashboard uses (grafana/grafana at beaa512eb3cfa8822ac0e86ad55ae3dd0b607c9c).
TRANSFORMATIONS = {"organize"}
# A Prometheus table frame's columns besides the labels: the Prometheus data source's
# result_transformer (getValueText: "Value", or "Value #<refId>" with more than one query).
TABLE_COLUMNS = {"Time", "Value"}
# public/app/plugins/panel/heatmap/palettes.ts colorSchemes, the sequential single-hue ones
# (grafana/grafana at 05b8f1931d94dd5f059267e13ea510e7d22726be).
HEATMAP_SCHEMES = {"Blues", "Greens", "Greys", "Oranges", "Purples", "Reds"}
# packages/grafana-data/src/themes/createVisualizationColors.ts: the named hues and shades
# getColorByName knows; it passes '#...' and 'rgb...' through (grafana/grafana at 07af29d5b78d).
COLORS = {f"{shade}{hue}" for hue in ("red", "orange", "yellow", "green", "blue", "purple")
          for shade in ("super-light-", "light-", "", "semi-dark-", "dark-")}  # fmt: skip
# Grafana's relative time (datemath units), e.g. now, now-6h, now-1d/d.
RELATIVE_TIME = re.compile(r"now(-\d+[smhdwMy])?(/[smhdwMy])?")
INTERVAL = re.compile(r"\d+(ms|s|m|h|d|w|y)")  # a Prometheus duration, as the annotation's step
KINDS = {kind for kind, _, _ in NAMES}


def _where(panel: dict[str, Any]) -> str:
    return f"panel {panel.get('id')} {panel.get('title')!r}"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _attr(hints: dict[str, Any], key: str) -> str | None:
    """The types' attribute for a JSON key (``yAxis``: ``y_axis``; ``type``: ``type_val``)."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key).lower()
    return next((a for a in (snake, f"{snake}_val") if a in hints), None)


def _typed(value: Any, hint: Any, path: str, panel_type: str, seen: set[str]) -> Iterator[str]:
    """``path: problem`` for each value in ``value`` that is not of the types' ``hint``; adds the
    path of each value held to a type to ``seen``.  A key the types do not declare is
    test_dashboard.py's business and skipped here."""
    args = typing.get_args(hint)
    if hint in (typing.Any, object):
        return
    if not isinstance(value, (dict, list)):
        seen.add(path)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        arms = [a for a in args if a is not type(None)]
        if value is None and len(arms) < len(args):
            return
        if grafana.Panel in arms:  # a row or a panel, by its type
            arms = [grafana.RowPanel if isinstance(value, dict) and value.get("type") == "row" else grafana.Panel]
        found = [list(_typed(value, a, path, panel_type, seen)) for a in arms]
        if all(found):
            yield from found[0] if len(arms) == 1 else [f"{path}: {value!r} is none of {', '.join(map(_name, arms))}"]
    elif typing.get_origin(hint) is typing.Literal:
        if isinstance(value, bool) != isinstance(args[0], bool) or value not in args:
            yield f"{path}: {value!r} is not one of {', '.join(map(repr, args))}"
    elif isinstance(hint, type) and issubclass(hint, enum.Enum):
        values = [m.value for m in hint]
        if isinstance(value, bool) or value not in values:
            yield f"{path}: {value!r} is not a {hint.__name__} ({', '.join(map(repr, values))})"
    elif hint in (bool, int, float, str):
        numbers = (int, float) if hint is float else hint
        if not isinstance(value, numbers) or (hint is not bool and isinstance(value, bool)):
            yield f"{path}: {value!r} is not a {hint.__name__}"
    elif typing.get_origin(hint) is list:
        if not isinstance(value, list):
            yield f"{path}: {value!r} is not a list"
            return
        for i, item in enumerate(value):
            yield from _typed(item, args[0], f"{path}[{i}]", panel_type, seen)
    elif typing.get_origin(hint) is dict:
        if not isinstance(value, dict):
            yield f"{path}: {value!r} is not an object"
            return
        for key, item in value.items():
            yield from _typed(item, args[1], _join(path, key), panel_type, seen)
    elif hint is grafana_variants.Dataquery:  # a query: its data source's own model
        source = value.get("datasource", {}) if isinstance(value, dict) else {}
        variant = _RUNTIME.dataquery_variants.get(source.get("type", "") if isinstance(source, dict) else "")
        if variant is not None:
            yield from _typed(value, variant.from_json_hook.__self__, path, panel_type, seen)  # type: ignore[attr-defined]
    elif isinstance(hint, type) and hasattr(hint, "from_json"):
        if not isinstance(value, dict):
            yield f"{path}: {value!r} is not an object"
            return
        hints = typing.get_type_hints(hint)
        for key, item in value.items():
            attr = _attr(hints, key)
            if attr is None:
                continue
            sub = hints[attr]
            plugin = _RUNTIME.panelcfg_config(panel_type)
            if hint is grafana.Panel and attr == "options" and plugin and plugin.options_from_json_hook:
                sub = plugin.options_from_json_hook.__self__  # type: ignore[attr-defined]
            if hint is grafana.FieldConfig and attr == "custom" and plugin and plugin.field_config_from_json_hook:
                sub = plugin.field_config_from_json_hook.__self__  # type: ignore[attr-defined]
            if key == "datasource" and typing.get_args(sub) == (object, type(None)):  # a query's: a reference
                sub = grafana.DataSourceRef
            if key == "unit" and isinstance(item, str) and item not in UNITS:
                yield f"{_join(path, key)}: {item!r} is no Grafana unit id"
            yield from _typed(item, sub, _join(path, key), panel_type, seen)


def _name(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


def _datasources(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every data source reference below ``node``, with its path."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource" and isinstance(value, dict):
                yield _join(path, key), value
            else:
                yield from _datasources(value, _join(path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _datasources(value, f"{path}[{i}]")


def _datasource_problems(node: Any, where: str, variables: dict[str, dict[str, Any]]) -> Iterator[str]:
    for path, ref in _datasources(node):
        kind, uid = ref.get("type"), ref.get("uid", "")
        if kind not in DATASOURCE_TYPES:
            yield f"{where}: {path}.type: {kind!r} is no Grafana data source plugin"
        named = re.fullmatch(r"\$\{(\w+)\}|\$(\w+)", uid) if isinstance(uid, str) else None
        if named and kind in DATASOURCE_TYPES:
            variable = variables.get(named.group(1) or named.group(2), {})
            chosen = variable.get("query") if variable.get("query") in DATASOURCE_TYPES else kind  # else said below
            if variable.get("type") != "datasource" or chosen != kind:
                yield f"{where}: {path}.uid: {uid!r} is no data source variable of type {kind!r}"


def _result_labels(expr: str) -> tuple[float | None, set[str]] | None:
    """The quantile (if a ``histogram_quantile``) and the labels of what ``expr`` returns, read
    off its outer ``<aggregation> by (...)``; None when it has none (any label may come back)."""
    m = re.match(r"\s*(?:histogram_quantile\(\s*([0-9.]+)\s*,\s*)?(?:sum|max|min|avg|count)\s+by\s*\(([^)]*)\)", expr)
    if m is None:
        return None
    labels = {x.strip() for x in m.group(2).split(",") if x.strip()}
    quantile = float(m.group(1)) if m.group(1) else None
    return quantile, labels - {"le"} if quantile is not None else labels


def _template_labels(text: str) -> set[str]:
    return set(re.findall(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}", text))


def _query_problems(panel: dict[str, Any], exposed: set[str]) -> Iterator[str]:
    where, ref_ids = _where(panel), [t.get("refId") for t in panel.get("targets", [])]
    for ref_id in sorted({r for r in ref_ids if ref_ids.count(r) > 1}):
        yield f"{where}: refId {ref_id!r} is used by more than one query"
    for i, target in enumerate(panel.get("targets", [])):
        expr, legend = target.get("expr", ""), target.get("legendFormat", "")
        missing = _metrics(expr) - exposed
        if missing:
            yield f"{where}: targets[{i}].expr: {', '.join(sorted(missing))} is served by no engine, router or fleet"
        for op, values in re.findall(r'\bkind\s*(=~|!~|!=|=)\s*"([^"]*)"', expr):
            for kind in sorted(set(values.split("|") if "~" in op else [values]) - KINDS):
                yield f"{where}: targets[{i}].expr: kind {kind!r} is no kind fleet labels a target with"
        result = _result_labels(expr)
        if result is None:
            continue
        quantile, labels = result
        unknown = _template_labels(legend) - labels
        if unknown:
            yield (f"{where}: targets[{i}].legendFormat: {', '.join(sorted(unknown))} is not a label of the "
                   f"query's result ({', '.join(sorted(labels))})")  # fmt: skip
        said = re.search(r"\bp(\d+(?:\.\d+)?)\b", legend)
        if said and quantile is not None and float(said.group(1)) / 100 != quantile:
            yield f"{where}: targets[{i}].legendFormat: says p{said.group(1)} of histogram_quantile({quantile})"


def _option_problems(panel: dict[str, Any]) -> Iterator[str]:
    where, options = _where(panel), panel.get("options", {})
    if panel.get("type") not in PANEL_TYPES:
        yield f"{where}: type: {panel.get('type')!r} is no Grafana panel plugin"
    for calc in options.get("reduceOptions", {}).get("calcs", []):
        if calc not in REDUCERS:
            yield f"{where}: options.reduceOptions.calcs: {calc!r} is no Grafana reducer"
    color = options.get("color", {})
    if panel.get("type") == "heatmap" and color.get("mode") == "scheme" and color.get("scheme") not in HEATMAP_SCHEMES:
        yield f"{where}: options.color.scheme: {color.get('scheme')!r} is no heatmap color scheme"
    columns = set(TABLE_COLUMNS)
    for target in panel.get("targets", []):
        columns |= (_result_labels(target.get("expr", "")) or (None, set()))[1]
    for i, step in enumerate(panel.get("transformations", [])):
        if step.get("id") not in TRANSFORMATIONS:
            yield f"{where}: transformations[{i}].id: {step.get('id')!r} is no transformation the check knows"
        for field in ("excludeByName", "renameByName", "indexByName"):
            for column in sorted(set(step.get("options", {}).get(field, {})) - columns):
                yield f"{where}: transformations[{i}].options.{field}: {column!r} is no column of the query's table"


def _grid_problems(panels: list[dict[str, Any]]) -> Iterator[str]:
    seen: set[Any] = set()
    for panel in panels:
        if not isinstance(panel.get("id"), int) or panel["id"] < 1 or panel["id"] in seen:
            yield f"{_where(panel)}: id: {panel.get('id')!r} is not a positive id of its own"
        seen.add(panel.get("id"))
    placed: list[tuple[dict[str, Any], tuple[int, int, int, int]]] = []
    for panel in panels:
        box = panel.get("gridPos")
        if not isinstance(box, dict) or not all(type(box.get(k)) is int for k in "xywh"):
            continue  # the types' check says so
        x, y, w, h = (int(box[k]) for k in "xywh")
        if x < 0 or y < 0 or w < 1 or h < 1 or x + w > GRID_COLUMNS:
            yield f"{_where(panel)}: gridPos: x={x} y={y} w={w} h={h} is not within Grafana's {GRID_COLUMNS} columns"
        for other, (ox, oy, ow, oh) in placed:
            if x < ox + ow and ox < x + w and y < oy + oh and oy < y + h:
                yield f"{_where(panel)}: gridPos: overlaps {_where(other)}"
        placed.append((panel, (x, y, w, h)))


def _dashboard_problems(doc: dict[str, Any], variables: dict[str, dict[str, Any]], exposed: set[str]) -> Iterator[str]:
    if doc.get("schemaVersion") not in SCHEMA_VERSIONS:
        lowest, highest = SCHEMA_VERSIONS[0], SCHEMA_VERSIONS[-1]
        yield f"dashboard: schemaVersion: {doc.get('schemaVersion')!r} is not within {lowest}..{highest}"
    intervals = doc.get("timepicker", {}).get("refresh_intervals", REFRESH_INTERVALS)
    if isinstance(doc.get("refresh"), str) and doc["refresh"] not in intervals + [""]:  # else the types say
        yield f"dashboard: refresh: {doc.get('refresh')!r} is not one of the time picker's {', '.join(intervals)}"
    time = doc.get("time", {})
    for key in ("from", "to"):
        if not RELATIVE_TIME.fullmatch(str(time.get(key))):
            yield f"dashboard: time.{key}: {time.get(key)!r} is no Grafana relative time (now, now-6h, now-1d/d)"
    if time.get("from") == time.get("to"):
        yield f"dashboard: time: from and to are both {time.get('to')!r}"
    zone = doc.get("timezone", "")
    if zone not in ("", "browser", "utc") and zone not in zoneinfo.available_timezones():
        yield f"dashboard: timezone: {zone!r} is not browser, utc or an IANA time zone"
    names = [v.get("name") for v in doc.get("templating", {}).get("list", [])]
    for name in sorted({n for n in names if names.count(n) > 1}):
        yield f"dashboard: templating: variable {name!r} is defined more than once"
    for name, variable in variables.items():
        if variable.get("type") == "datasource" and variable.get("query") not in DATASOURCE_TYPES:
            yield f"dashboard: variable {name!r}: query {variable.get('query')!r} is no Grafana data source plugin"
        query = variable.get("query", {}).get("query", "") if isinstance(variable.get("query"), dict) else ""
        if "definition" in variable and variable["definition"] != query:
            yield f"dashboard: variable {name!r}: definition {variable['definition']!r} is not its query {query!r}"
        for metric, label in re.findall(r"label_values\(\s*(\w+)\s*,\s*(\w+)\s*\)", query):
            if metric not in exposed or label not in LABELS:
                yield f"dashboard: variable {name!r}: query.query: {metric}'s label {label} is not one fleet's targets carry"
    yield from _datasource_problems({k: v for k, v in doc.items() if k != "panels"}, "dashboard", variables)
    for ann in doc.get("annotations", {}).get("list", []):
        where = f"annotation {ann.get('name')!r}"
        color = ann.get("iconColor", "")
        if color not in COLORS and not color.startswith(("#", "rgb")):
            yield f"{where}: iconColor: {color!r} is no Grafana color name, '#...' or 'rgb...'"
        if "step" in ann and not INTERVAL.fullmatch(str(ann["step"])):
            yield f"{where}: step: {ann['step']!r} is no Prometheus duration (30s, 1m)"
        result = _result_labels(ann.get("expr", ""))
        if result is None:
            continue
        for field in ("titleFormat", "textFormat", "tagKeys"):
            text = ann.get(field, "")
            said = {k.strip() for k in text.split(",") if k.strip()} if field == "tagKeys" else _template_labels(text)
            if said - result[1]:
                yield (f"{where}: {field}: {', '.join(sorted(said - result[1]))} is not a label of the query's "
                       f"result ({', '.join(sorted(result[1]))})")  # fmt: skip


def problems(doc: dict[str, Any], seen: set[str] | None = None) -> list[str]:
    """One line a value Grafana would refuse, or that makes no sense, in the dashboard ``doc``;
    adds to ``seen`` the path (``panels[i].…`` or the dashboard's own) of each value held to a type."""
    seen = set() if seen is None else seen
    variables = {v.get("name"): v for v in doc.get("templating", {}).get("list", [])}
    exposed, rest = _exposed(), {k: v for k, v in doc.items() if k != "panels"}
    found = [f"dashboard: {p}" for p in _typed(rest, grafana.Dashboard, "", "", seen)]
    for i, panel in enumerate(doc.get("panels", [])):
        held: set[str] = set()
        found += [f"{_where(panel)}: {p}" for p in _typed(panel, grafana.Panel | grafana.RowPanel, "", panel["type"], held)]
        seen |= {f"panels[{i}].{p}" for p in held}
        found += _option_problems(panel)
        found += _datasource_problems(panel, _where(panel), variables)
        found += _query_problems(panel, exposed)
    found += _grid_problems(doc.get("panels", []))
    found += _dashboard_problems(doc, variables, exposed)
    return found


def _dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def test_every_value_is_one_grafana_accepts_and_makes_sense() -> None:
    assert problems(_dashboard()) == []


def test_the_lists_hold_what_the_dashboard_uses() -> None:
    """The SDK's lists are Grafana's own, not empty or cut short."""
    assert {"timeseries", "heatmap", "table", "stat", "row"} <= PANEL_TYPES
    assert {"prometheus", "grafana", "loki"} <= DATASOURCE_TYPES
    assert {"short", "s", "percentunit", "ms", "reqps", "bytes"} <= UNITS and len(UNITS) > 200
    assert "10s" in REFRESH_INTERVALS
    assert {p["type"] for p in _dashboard()["panels"]} == {"timeseries", "heatmap", "table"}


# The values no type holds, and what checks them instead.
UNTYPED = {
    "annotations.list[0].builtIn",  # Grafana's own built-in annotation, as Grafana writes it
    "annotations.list[1].step",  # INTERVAL
    "annotations.list[1].tagKeys", "annotations.list[1].textFormat", "annotations.list[1].titleFormat",  # labels
    "templating.list[1].definition",  # the query's text
    "templating.list[1].query.query",  # label_values of a metric and label the targets serve
    "templating.list[1].query.refId",
    "panels[11].transformations[0].options.excludeByName.Time",  # TABLE_COLUMNS
    "panels[11].transformations[0].options.renameByName.Value",
}  # fmt: skip


def _leaves(node: Any, path: str = "") -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, _join(path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _leaves(value, f"{path}[{i}]")
    else:
        yield path


def test_every_value_is_held_to_a_type_or_listed() -> None:
    """The walk over Grafana's types reaches every value but the few no type declares; a value
    it stopped reaching (an option it no longer descends into) fails here."""
    doc, seen = _dashboard(), set[str]()
    assert problems(doc, seen) == []
    assert set(_leaves(doc)) - seen == UNTYPED
    doc["panels"][0]["options"]["frobnicate"] = 1
    seen.clear()
    problems(doc, seen)
    assert set(_leaves(doc)) - seen == UNTYPED | {"panels[0].options.frobnicate"}


def _panel(doc: dict[str, Any], panel_id: int) -> dict[str, Any]:
    panel: dict[str, Any] = next(p for p in doc["panels"] if p["id"] == panel_id)
    return panel


def _set(path: str, value: Any, panel_id: int | None = None) -> Callable[[dict[str, Any]], None]:
    """A mutation: set ``path`` (dots and [i]) in panel ``panel_id`` or the dashboard to ``value``."""

    def mutate(doc: dict[str, Any]) -> None:
        node: Any = _panel(doc, panel_id) if panel_id is not None else doc
        keys = [int(k) if k.isdigit() else k for k in re.findall(r"[^.\[\]]+", path)]
        for key in keys[:-1]:
            if isinstance(node, dict):
                node = node.setdefault(key, {})
            else:
                node = node[key]
        node[keys[-1]] = value

    return mutate


def _each(*mutations: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def mutate(doc: dict[str, Any]) -> None:
        for one in mutations:
            one(doc)

    return mutate


TTFT_HEATMAP = "panel 7 'TTFT distribution'"
TOKENS = "panel 1 'Generated tokens/s per deployment'"
KV = "panel 4 'KV-cache use per instance'"
TABLE = "panel 11 'Targets by unit and generation'"
ROLLOUTS = "annotation 'Rollouts (a new generation appears)'"

BAD_VALUES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("axisPlacement", _set("options.yAxis.axisPlacement", "bogus", 7),
     f"{TTFT_HEATMAP}: options.yAxis.axisPlacement: 'bogus' is not a AxisPlacement "
     "('auto', 'top', 'right', 'bottom', 'left', 'hidden')"),
    ("heatmap color mode", _set("options.color.mode", "schema", 7),
     f"{TTFT_HEATMAP}: options.color.mode: 'schema' is not a HeatmapColorMode ('opacity', 'scheme')"),
    ("heatmap cell layout", _set("options.rowsFrame.layout", "lt", 7),
     f"{TTFT_HEATMAP}: options.rowsFrame.layout: 'lt' is not a HeatmapCellLayout ('le', 'ge', 'unknown', 'auto')"),
    ("heatmap calculate", _set("options.calculate", "nope", 7),
     f"{TTFT_HEATMAP}: options.calculate: 'nope' is not a bool"),
    ("gridPos type", _set("gridPos.w", "wide", 1), f"{TOKENS}: gridPos.w: 'wide' is not a int"),
    ("gridPos object", _set("gridPos", [0, 0, 12, 8], 1), f"{TOKENS}: gridPos: [0, 0, 12, 8] is not an object"),
    ("tags", _set("tags", "fleet"), "dashboard: tags: 'fleet' is not a list"),
    ("style", _set("style", "gray"), "dashboard: style: 'gray' is not one of 'light', 'dark'"),
    ("refresh type", _set("refresh", True), "dashboard: refresh: True is none of str, Literal[False]"),
    ("thresholds.mode", _set("fieldConfig.defaults.thresholds", {"mode": "relative", "steps": []}, 1),
     f"{TOKENS}: fieldConfig.defaults.thresholds.mode: 'relative' is not a ThresholdsMode ('absolute', 'percentage')"),
    ("legend displayMode", _set("options.legend", {"displayMode": "grid", "placement": "bottom", "showLegend": True}, 1),
     f"{TOKENS}: options.legend.displayMode: 'grid' is not a LegendDisplayMode ('list', 'table', 'hidden')"),
    ("legend placement", _set("options.legend", {"displayMode": "list", "placement": "side", "showLegend": True}, 1),
     f"{TOKENS}: options.legend.placement: 'side' is not a LegendPlacement ('bottom', 'right')"),
    ("draw style", _set("fieldConfig.defaults.custom", {"drawStyle": "area"}, 1),
     f"{TOKENS}: fieldConfig.defaults.custom.drawStyle: 'area' is not a GraphDrawStyle ('line', 'bars', 'points')"),
    ("query format", _set("targets[0].format", "tabel", 11),
     f"{TABLE}: targets[0].format: 'tabel' is not a PromQueryFormat ('time_series', 'table', 'heatmap')"),
    ("variable refresh", _set("templating.list[1].refresh", 3),
     "dashboard: templating.list[1].refresh: 3 is not a VariableRefresh (0, 1, 2)"),
    ("variable type", _set("templating.list[1].type", "prometheus"),
     "dashboard: templating.list[1].type: 'prometheus' is not a VariableType ('query', 'adhoc', 'constant', "
     "'datasource', 'interval', 'textbox', 'custom', 'system')"),
    ("unit", _set("fieldConfig.defaults.unit", "percent01", 4),
     f"{KV}: fieldConfig.defaults.unit: 'percent01' is no Grafana unit id"),
    ("heatmap axis unit", _set("options.yAxis.unit", "secs", 7),
     f"{TTFT_HEATMAP}: options.yAxis.unit: 'secs' is no Grafana unit id"),
    ("panel type", _set("type", "lines", 1), f"{TOKENS}: type: 'lines' is no Grafana panel plugin"),
    ("datasource type", _set("datasource.type", "promethus", 1),
     f"{TOKENS}: datasource.type: 'promethus' is no Grafana data source plugin"),
    ("datasource uid", _set("targets[0].datasource.uid", "${ds}", 1),
     f"{TOKENS}: targets[0].datasource.uid: '${{ds}}' is no data source variable of type 'prometheus'"),
    ("query datasource", _set("targets[0].datasource.uid", 7, 1), f"{TOKENS}: targets[0].datasource.uid: 7 is not a str"),
    ("annotation step", _set("annotations.list[1].step", "30 s"),
     f"{ROLLOUTS}: step: '30 s' is no Prometheus duration (30s, 1m)"),
    ("variable definition", _set("templating.list[1].definition", "label_values(up, group)"),
     "dashboard: variable 'deployment': definition 'label_values(up, group)' is not its query 'label_values(up, deployment)'"),
    ("variable query", _each(_set("templating.list[1].definition", "label_values(up, pod)"),
                             _set("templating.list[1].query.query", "label_values(up, pod)")),
     "dashboard: variable 'deployment': query.query: up's label pod is not one fleet's targets carry"),
    ("variable name", lambda doc: doc["templating"]["list"].append(copy.deepcopy(doc["templating"]["list"][1])),
     "dashboard: templating: variable 'deployment' is defined more than once"),
    ("datasource variable", _set("templating.list[0].query", "prom"),
     "dashboard: variable 'datasource': query 'prom' is no Grafana data source plugin"),
    ("grid width", _set("gridPos.x", 2, 12),
     "panel 12 'Inter-token latency p50 / p99 per deployment': gridPos: x=2 y=40 w=24 h=8 is not within Grafana's 24 columns"),
    ("grid overlap", _set("gridPos.x", 6, 2),
     "panel 2 'Prompt tokens/s per deployment': gridPos: overlaps panel 1 'Generated tokens/s per deployment'"),
    ("panel id", _set("id", 11, 12),
     f"{TABLE}: id: 11 is not a positive id of its own"),  # the later of the two
    ("refId", _set("targets[1].refId", "A", 3),
     "panel 3 'Requests running / waiting per deployment and role': refId 'A' is used by more than one query"),
    ("refresh", _set("refresh", "7s"),
     "dashboard: refresh: '7s' is not one of the time picker's 5s, 10s, 30s, 1m, 5m, 15m, 30m, 1h, 2h, 1d"),
    ("time", _set("time.from", "1h ago"),
     "dashboard: time.from: '1h ago' is no Grafana relative time (now, now-6h, now-1d/d)"),
    ("time range", _set("time.from", "now"), "dashboard: time: from and to are both 'now'"),
    ("schemaVersion", _set("schemaVersion", 16), "dashboard: schemaVersion: 16 is not within 36..41"),
    ("timezone", _set("timezone", "Mars/Olympus"),
     "dashboard: timezone: 'Mars/Olympus' is not browser, utc or an IANA time zone"),
    ("calcs", _set("options.reduceOptions", {"calcs": ["average"]}, 1),
     f"{TOKENS}: options.reduceOptions.calcs: 'average' is no Grafana reducer"),
    ("heatmap scheme", _set("options.color.scheme", "Orange", 7),
     f"{TTFT_HEATMAP}: options.color.scheme: 'Orange' is no heatmap color scheme"),
    ("transformation", _set("transformations[0].id", "organise", 11),
     f"{TABLE}: transformations[0].id: 'organise' is no transformation the check knows"),
    ("table column", _set("transformations[0].options.renameByName", {"Valeu": "up"}, 11),
     f"{TABLE}: transformations[0].options.renameByName: 'Valeu' is no column of the query's table"),
    ("iconColor", _set("annotations.list[1].iconColor", "orangey"),
     f"{ROLLOUTS}: iconColor: 'orangey' is no Grafana color name, '#...' or 'rgb...'"),
    ("annotation labels", _set("annotations.list[1].titleFormat", "{{unit}} rolled"),
     f"{ROLLOUTS}: titleFormat: unit is not a label of the query's result (deployment, generation, group)"),
    ("annotation tags", _set("annotations.list[1].tagKeys", "deployment,host"),
     f"{ROLLOUTS}: tagKeys: host is not a label of the query's result (deployment, generation, group)"),
    ("legend label", _set("targets[0].legendFormat", "{{group}} ({{instance}})", 4),
     f"{KV}: targets[0].legendFormat: instance is not a label of the query's result (deployment, group, host)"),
    ("legend quantile", _set("targets[1].legendFormat", "{{deployment}} p95", 5),
     "panel 5 'TTFT p50 / p99 per deployment': targets[1].legendFormat: says p95 of histogram_quantile(0.99)"),
    ("metric", _set("targets[0].expr", 'sum by (deployment) (rate(vllm:prompt_token_total{deployment=~"$deployment"}[1m]))', 2),
     "panel 2 'Prompt tokens/s per deployment': targets[0].expr: vllm:prompt_token_total is served by no engine, "
     "router or fleet"),
    ("kind", _set("targets[0].expr", 'max by (deployment) (up{kind=~"sglang-router|vllm_router", deployment=~"$deployment"})', 10),
     "panel 10 'Router: requests running at its workers / routed per second': targets[0].expr: kind 'vllm_router' "
     "is no kind fleet labels a target with"),
]  # fmt: skip


@pytest.mark.parametrize("mutate, message", [b[1:] for b in BAD_VALUES], ids=[b[0] for b in BAD_VALUES])
def test_each_check_fails_on_a_bad_value(mutate: Callable[[dict[str, Any]], None], message: str) -> None:
    doc = copy.deepcopy(_dashboard())
    mutate(doc)
    assert problems(doc) == [message]
