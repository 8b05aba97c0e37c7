"""Loaded products are checked before they are used.

`wsecc simulate`, `wsecc view`, `wsecc diff` and a sweep's resume read files a user can edit,
truncate or replace. Before any of them uses what it read, the products go through the same
solver-free validators a compile runs on its own results:

- `check_report`: report.json's types and keys by `wsecc/report/report.schema.json` (`schema_errors`
  implements the part of JSON Schema that file uses, so no dependency is added);
- `check_program`: the placement legal on the target's fabric (every kernel placed once, inside
  the fabric, no overlap, a shape sizing offered: `validate_placement`), the routing consistent
  with it (every flow's lanes, paths on the fabric between facing edges, colors within the
  budget, no conflict at a router: `validate_routing`), and the sizing within the target's SRAM.

A compile over several systems has a program per system (`systems/N/`, docs/systems.md): each
goes through `check_program` as system 0's does (`wsecc.view.outdir.load_outdir`), after its
kernels.json is checked to be the split of `systems/model-kernels.json`.

A failure is a `ProductError` naming the file, the entry and what is wrong, in one line.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from wsecc.errors import WseccError
from wsecc.place.from_kernels import placement_problem
from wsecc.place.problem import tailored, validate_placement
from wsecc.route.problem import RouteFlow, RoutingProblem, validate_routing

MAX_SHOWN = 3  # violations named in one message; the count says how many there are


class ProductError(WseccError):
    """A saved product (report.json, placement.json, ...) is malformed or inconsistent."""


def _fail(where: Path | str, problems: list[str]) -> ProductError:
    more = f" (and {len(problems) - MAX_SHOWN} more)" if len(problems) > MAX_SHOWN else ""
    return ProductError(f"{where}: " + "; ".join(problems[:MAX_SHOWN]) + more)


# ---- report.json by its schema --------------------------------------------------------------


@cache
def report_schema() -> dict[str, Any]:
    """`wsecc/report/report.schema.json` (the `wsecc.report/1` schema, docs/report-schema.md)."""
    text = (resources.files("wsecc.report") / "report.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "null": (type(None),),
    "number": (int, float),
    "integer": (int,),
}


def _is(value: Any, kind: str) -> bool:
    if kind in ("number", "integer") and isinstance(value, bool):
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    if kind == "number" and isinstance(value, float) and not math.isfinite(value):
        return False  # NaN and Infinity are not JSON
    return isinstance(value, _TYPES[kind])


def schema_errors(value: Any, schema: Mapping[str, Any], at: str = "") -> Iterator[str]:
    """Where `value` breaks `schema`, as "at: what" lines. The keywords report.schema.json uses:
    type, enum, const, minimum, maximum, exclusiveMinimum, pattern, required, properties,
    additionalProperties, items, minItems, maxItems, uniqueItems, allOf, oneOf, if/then/else."""
    here = at or "(top level)"
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not any(_is(value, k) for k in kinds):
            yield f"{here}: {_show(value)} is not {' or '.join(kinds)}"
            return
    if "enum" in schema and value not in schema["enum"]:
        yield f"{here}: {_show(value)} is not one of {schema['enum']}"
    if "const" in schema and value != schema["const"]:
        yield f"{here}: {_show(value)} is not {schema['const']!r}"
    if _is(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            yield f"{here}: {value} is below {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            yield f"{here}: {value} is above {schema['maximum']}"
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            yield f"{here}: {value} must be above {schema['exclusiveMinimum']}"
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        yield f"{here}: {_show(value)} does not match {schema['pattern']!r}"
    if isinstance(value, dict):
        yield from _object_errors(value, schema, at)
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            yield f"{here}: {len(value)} items, at least {schema['minItems']} expected"
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            yield f"{here}: {len(value)} items, at most {schema['maxItems']} expected"
        if schema.get("uniqueItems") and len({json.dumps(v, sort_keys=True) for v in value}) < len(
            value
        ):
            yield f"{here}: items repeat"
        if isinstance(schema.get("items"), dict):
            for i, v in enumerate(value):
                yield from schema_errors(v, schema["items"], f"{at}[{i}]")
    for sub in schema.get("allOf", ()):
        yield from schema_errors(value, sub, at)
    if "oneOf" in schema:
        matching = sum(not any(schema_errors(value, s, at)) for s in schema["oneOf"])
        if matching != 1:
            yield f"{here}: matches {matching} of the {len(schema['oneOf'])} allowed forms, not 1"
    if "if" in schema:
        branch = "then" if not any(schema_errors(value, schema["if"], at)) else "else"
        if branch in schema:
            yield from schema_errors(value, schema[branch], at)


def _object_errors(value: dict[str, Any], schema: Mapping[str, Any], at: str) -> Iterator[str]:
    for key in schema.get("required", ()):
        if key not in value:
            yield f"{at or '(top level)'}: missing key {key!r}"
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, v in value.items():
        path = f"{at}.{key}" if at else str(key)
        if key in props:
            yield from schema_errors(v, props[key], path)
        elif extra is False:
            yield f"{path}: unknown key"
        elif isinstance(extra, dict):
            yield from schema_errors(v, extra, path)


def _show(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def check_report(
    doc: Any, where: Path | str, may_lack: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """`doc` (a parsed report.json) if it follows the report schema, else ProductError naming
    `where` and the first keys that are wrong. `may_lack`: top-level keys the caller does
    without (the viewer draws an unsimulated compile from sizing's figures)."""
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("wsecc.report/"):
        raise ProductError(f"{where}: not a wsecc report (no 'schema': 'wsecc.report/1')")
    lacking = {f"(top level): missing key {k!r}" for k in may_lack}
    problems = [p for p in schema_errors(doc, report_schema()) if p not in lacking]
    if problems:
        raise _fail(where, problems)
    return doc


# ---- the placed and routed program ----------------------------------------------------------


def check_program(program: Any, folder: Path, pinned: bool = False, layer: bool = False) -> None:
    """A loaded program (`wsecc.core.program.Program`) through the compile's validators: sizing
    within the target's SRAM and covering every kernel, the placement legal on the target's
    program rectangle, the routing consistent with it. `pinned`: the compile had --pins, so a
    placed shape need not be one sizing offered; `layer`: a train-mode compile, which sizes and
    places one layer's kernels of kernels.json (`wsecc.modes.train`). ProductError names the file
    and the entry."""
    kg, sizing, target = program.kg, program.sizing, program.target
    sized = {k.name for k in sizing.kernels}
    every = {k.name for k in kg.kernels}
    if layer:
        kernels = tuple(k for k in kg.kernels if k.name in sized)
        flows = tuple(f for f in kg.flows if f.src in sized and f.dst in sized)
        kg = replace(kg, kernels=kernels, flows=flows)
    names = [k.name for k in kg.kernels]
    usable = target.sram.bytes_per_pe  # a kernel's total counts the reserve (`SramBreakdown`)
    problems = [f"kernel {n!r} has no sizing" for n in names if n not in sized]
    problems += [f"kernel {n!r} is sized but not in kernels.json" for n in sorted(sized - every)]
    problems += [
        f"kernel {k.name!r} needs {k.sram.total:,} B/PE, the target's PEs hold {usable:,}"
        for k in sizing.kernels
        if k.sram.total > usable
    ]
    if problems:
        raise _fail(folder / "sizing.json", problems)
    rects = program.placement.rects
    problem = tailored(placement_problem(kg, sizing, target, program.precision), rects)
    if pinned:
        problem = replace(problem, pins={n: r for n, r in rects.items() if n in set(names)})
    problems = [p for p in validate_placement(problem, program.placement) if "objective" not in p]
    if problems:
        raise _fail(folder / "placement.json", problems)
    problems = _routing_problems(problem, program)
    if problems:
        raise _fail(folder / "routing.json", problems)
    problems = _replica_problems(program)
    if problems:
        raise _fail(folder / "report.json", problems)


def _replica_problems(program: Any) -> list[str]:
    """The copies (`wsecc.core.replicas`): k origins, each tile inside the program rectangle, no two
    tiles overlapping, copy 0's rectangles inside its tile; one copy has no tile."""
    reps, fab = program.replicas, program.target.fabric
    W, H = fab.program_width, fab.program_height
    if reps.k != len(reps.origins) or reps.k < 1:
        return [f"replicas.k {reps.k} but {len(reps.origins)} origins"]
    if reps.tile is None:
        return [] if reps.k == 1 else [f"replicas.k {reps.k} copies but no tile"]
    w, h = reps.tile
    out = [
        f"replicas: tile at {o} ({w}x{h}) leaves the {W}x{H} program rectangle"
        for o in reps.origins
        if w < 1 or h < 1 or o[0] < 0 or o[1] < 0 or o[0] + w > W or o[1] + h > H
    ]
    ordered = sorted(reps.origins)
    for i, (x, y) in enumerate(ordered):  # sweep in x: only tiles starting within w overlap
        for x2, y2 in ordered[i + 1 :]:
            if x2 >= x + w:
                break
            if abs(y2 - y) < h:
                out.append(f"replicas: tiles at {(x, y)} and {(x2, y2)} overlap")
                break
    out += [
        f"kernel {n!r} at x={r.x}, y={r.y} ({r.w}x{r.h}) leaves copy 0's {w}x{h} tile"
        for n, r in sorted(program.placement.rects.items())
        if r.x + r.w > w or r.y + r.h > h
    ]
    return out


def _routing_problems(problem: Any, program: Any) -> list[str]:
    """`validate_routing` against the flows the placement implies, each with as many lanes as
    the routing gives it (at least one), and the target's color budget."""
    routing, target = program.routing, program.target
    lanes: dict[str, int] = {}
    for ln in routing.lanes:
        lanes[ln.flow] = max(lanes.get(ln.flow, 0), ln.index + 1)
    seen: dict[str, int] = {}
    flows = []
    for f in problem.flows:
        if f.src == f.dst:
            continue
        base = f.name or f"{f.src}->{f.dst}"
        seen[base] = seen.get(base, 0) + 1
        name = base if seen[base] == 1 else f"{base}#{seen[base]}"
        flows.append(RouteFlow(name, f.src, f.dst, max(1, lanes.get(name, 0)), f.bytes_per_sample))
    budget = target.colors.total - target.colors.reserved
    rp = RoutingProblem(problem.width, problem.height, tuple(flows), budget, 1)
    return validate_routing(rp, program.placement, routing)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def read_json(path: Path, missing: str = "") -> Any:
    """A product file's JSON; ProductError naming it when it is missing (followed by `missing`,
    a hint) or not JSON."""
    try:
        return json.loads(path.read_bytes(), parse_constant=_no_constant)
    except FileNotFoundError:
        raise ProductError(f"{path}: missing{missing}") from None
    except IsADirectoryError:
        raise ProductError(f"{path}: a folder, not a file") from None
    except OSError as e:
        raise ProductError(f"{path}: cannot read ({e.strerror or e})") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ProductError(f"{path}: cannot read: not JSON ({e})") from None
    except RecursionError:
        raise ProductError(f"{path}: cannot read: nested too deeply") from None
