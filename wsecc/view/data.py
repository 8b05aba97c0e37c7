"""What the viewer shows, as plain JSON-able data: kernels with their details, lanes as corner
polylines, and per-PE heat maps (SRAM, colors per router, link loads).

Everything here is an analysis computed on demand from the compile products; nothing is cached
on them. Big arrays travel as `pack_array` records: little-endian bytes, zlib-compressed, base64
(the page inflates them with the browser's built-in DecompressionStream). Heat maps are mostly
zeros, so a full WSE-2 map of 745,500 PEs compresses to a few kilobytes.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from itertools import chain
from typing import Any

import numpy as np

from wsecc.core.program import Systems
from wsecc.kernels import KernelGraph, Sizing
from wsecc.limits import Limits
from wsecc.place.problem import Placement
from wsecc.route.problem import STEPS, Point, Routing
from wsecc.targets import Target

KIND_COLORS: Mapping[str, str] = {
    "linear": "#4e79a7",
    "attention": "#e15759",
    "layernorm": "#59a14f",
    "softmax": "#edc948",
    "elementwise": "#76b7b2",
    "embedding": "#b07aa1",
    "lm_head": "#f28e2b",
    "generic": "#9c755f",
}
"""Fill color per kernel kind (`KernelKind` values); other kinds get `EXTRA_COLORS` in turn."""

EXTRA_COLORS: tuple[str, ...] = (
    "#ff9da7",
    "#bab0ac",
    "#8cd17d",
    "#86bcb6",
    "#d4a6c8",
    "#fabfd2",
    "#b6992d",
    "#499894",
    "#d37295",
    "#a0cbe8",
)

LIMIT_COLOR = "#ff4fd8"
"""What limits the throughput, highlighted on the fabric (viewer and PNG): no kind's color."""

LINK_DIRS = "ENSW"
"""Plane order of the link-load heat map."""

_UNSIGNED = (np.uint8, np.uint16, np.uint32)


def kind_colors(kinds: list[str]) -> dict[str, str]:
    """A color for each kind in `kinds` (first-seen order): the table's, else the next extra."""
    out: dict[str, str] = {}
    extra = 0
    for kind in kinds:
        if kind in out:
            continue
        if kind in KIND_COLORS:
            out[kind] = KIND_COLORS[kind]
        else:
            out[kind] = EXTRA_COLORS[extra % len(EXTRA_COLORS)]
            extra += 1
    return out


def pack_array(a: np.ndarray) -> dict[str, Any]:
    """{"dtype", "shape", "b64"}: the array in the smallest unsigned type holding its values
    (ValueError for negative values), little-endian, zlib level 6, base64."""
    a = np.asarray(a)
    if a.size and a.min() < 0:
        raise ValueError("pack_array: negative values")
    top = int(a.max()) if a.size else 0
    dtype = next((t for t in _UNSIGNED if top <= np.iinfo(t).max), None)
    if dtype is None:
        raise ValueError(f"pack_array: {top} does not fit 32 bits")
    raw = np.ascontiguousarray(a, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()
    return {
        "dtype": np.dtype(dtype).name.replace("uint", "u"),
        "shape": list(a.shape),
        "b64": base64.b64encode(zlib.compress(raw, 6)).decode("ascii"),
    }


def unpack_array(d: Mapping[str, Any]) -> np.ndarray:
    """Inverse of `pack_array` (for tests and tools)."""
    dtype = np.dtype(str(d["dtype"]).replace("u", "uint")).newbyteorder("<")
    raw = zlib.decompress(base64.b64decode(d["b64"]))
    return np.frombuffer(raw, dtype=dtype).reshape(d["shape"])


# --- heat maps -----------------------------------------------------------------------------


def sram_map(
    sizing: Sizing, placement: Placement, target: Target, part: str = "total"
) -> np.ndarray:
    """H x W bytes per PE: each placed kernel's region filled with its fullest PE's SRAM
    (sizing reports the fullest PE only), 0 where no kernel is placed; `part` "kv" (or
    "weights", "buffers") maps that share of it alone."""
    fab = target.fabric
    out = np.zeros((fab.program_height, fab.program_width), dtype=np.uint32)
    sized = {k.name: k for k in sizing.kernels}
    for name, r in placement.rects.items():
        if name in sized:
            out[r.y : r.y + r.h, r.x : r.x + r.w] = getattr(sized[name].sram, part)
    return out


def _lane_points(routing: Routing) -> tuple[np.ndarray, np.ndarray]:
    """(points N x 2 as x, y; lane index of each point) over every lane's path."""
    counts = np.array([len(ln.path) for ln in routing.lanes], dtype=np.int64)
    n = int(counts.sum())
    if not n:
        return np.zeros((0, 2), dtype=np.int64), np.zeros(0, dtype=np.int64)
    flat = chain.from_iterable(chain.from_iterable(ln.path for ln in routing.lanes))
    points = np.fromiter(flat, np.int64, count=2 * n).reshape(-1, 2)
    return points, np.repeat(np.arange(len(routing.lanes)), counts)


def router_colors_map(routing: Routing, width: int, height: int) -> np.ndarray:
    """H x W: distinct colors passing each router (what the color budget limits)."""
    out = np.zeros((height, width), dtype=np.uint32)
    points, lane = _lane_points(routing)
    inside = (points[:, 0] >= 0) & (points[:, 0] < width)
    inside &= (points[:, 1] >= 0) & (points[:, 1] < height)
    if not inside.any():
        return out
    colors = np.array([ln.color for ln in routing.lanes], dtype=np.int64)[lane[inside]]
    cell = points[inside, 1] * width + points[inside, 0]
    n_colors = int(colors.max()) + 1
    if colors.min() >= 0 and width * height * n_colors <= _PRESENCE_CELLS:
        present = np.zeros((width * height, n_colors), dtype=bool)  # each (router, color) seen
        present[cell, colors] = True
        out.ravel()[:] = np.count_nonzero(present, axis=1)
        return out
    unique = np.unique(cell * n_colors + colors)
    out.ravel()[:] = np.bincount(unique // n_colors, minlength=width * height)
    return out


_PRESENCE_CELLS = 1 << 27
"""`router_colors_map` marks each (router, color) in a table of this many booleans at most (WSE-3's
program rectangle with 24 colors: 18 million), the same counts as sorting the pairs
(np.unique) in a tenth of its time; beyond it, it sorts."""


def link_load_planes(
    loads: Mapping[tuple[Point, str], float], width: int, height: int
) -> np.ndarray:
    """4 x H x W: lanes on each router's outgoing link, planes in `LINK_DIRS` order, clipped
    to 255 (loads beyond that are a routing failure anyway); links off the fabric are dropped."""
    out = np.zeros((len(LINK_DIRS), height, width), dtype=np.uint8)
    plane = {d: i for i, d in enumerate(LINK_DIRS)}
    kept = [
        (plane[d], y, x, n)
        for ((x, y), d), n in loads.items()
        if 0 <= x < width and 0 <= y < height and d in plane
    ]
    if kept:  # one numpy assignment, not one per link (GPT-2 small has 10^5 loaded links)
        p, ys, xs, n = zip(*kept, strict=True)
        out[p, ys, xs] = np.clip(np.rint(np.asarray(n, np.float64)), 0, 255)
    return out


def routed_link_loads(routing: Routing, width: int, height: int) -> tuple[np.ndarray, int]:
    """`link_load_planes(routing.link_loads(), width, height)` and the busiest link's lanes
    (the largest of `routing.link_loads()`, links off the fabric included), counted over every
    lane step at once with numpy rather than a dictionary entry per step (Llama 3.1 8B's
    routing has millions of them)."""
    out = np.zeros((len(LINK_DIRS), height, width), dtype=np.uint8)
    points, lane = _lane_points(routing)
    if len(points) < 2:
        return out, 0
    start, step = points[:-1], points[1:] - points[:-1]
    plane = np.full(len(step), -1, np.int64)  # a unit step's LINK_DIRS plane, else -1
    for k, d in enumerate(LINK_DIRS):
        dx, dy = STEPS[d]
        plane[(step[:, 0] == dx) & (step[:, 1] == dy)] = k
    link = (plane >= 0) & (lane[1:] == lane[:-1])  # a step within one lane's path
    xs, ys, ks = start[link, 0], start[link, 1], plane[link]
    inside = (xs >= 0) & (xs < width) & (ys >= 0) & (ys < height)
    counts = np.bincount(
        (ks[inside] * height + ys[inside]) * width + xs[inside], minlength=out.size
    )
    out.ravel()[:] = np.minimum(counts, 255)  # clipped as link_load_planes clips
    busiest = int(counts.max(initial=0))
    if not inside.all():  # links off the fabric: counted by (x, y, direction) too
        off = np.stack([xs[~inside], ys[~inside], ks[~inside]], axis=1)
        busiest = max(busiest, int(np.unique(off, axis=0, return_counts=True)[1].max()))
    return out, busiest


# --- lanes ---------------------------------------------------------------------------------


def corners(path: tuple[Point, ...]) -> list[Point]:
    """The path's first and last PE and every PE where it turns: the polyline to draw."""
    if len(path) <= 2:
        return list(path)
    out = [path[0]]
    for a, b, c in zip(path, path[1:], path[2:], strict=False):
        if (b[0] - a[0], b[1] - a[1]) != (c[0] - b[0], c[1] - b[1]):
            out.append(b)
    out.append(path[-1])
    return out


def _corner_arrays(routing: Routing) -> tuple[np.ndarray, np.ndarray]:
    """(start, pts) of `lane_payload`: every lane's `corners`, as x, y pairs one after another
    in `pts` (uint32), lane i's from pair start[i] to start[i + 1]; found for every lane step
    at once (numpy: a point is a corner where its lane begins or ends or its step changes)."""
    points, lane = _lane_points(routing)
    if len(points) and points.min() < 0:  # numpy's error for a negative uint32, as before
        raise OverflowError(f"Python integer {int(points.min())} out of bounds for uint32")
    keep = np.ones(len(points), dtype=bool)
    if len(points) > 2:
        step = points[1:] - points[:-1]
        turns = (step[1:] != step[:-1]).any(axis=1)
        inner = (lane[1:-1] == lane[:-2]) & (lane[1:-1] == lane[2:])  # not a lane's end
        keep[1:-1] = ~inner | turns
    n = np.bincount(lane[keep], minlength=len(routing.lanes))
    start = np.concatenate([[0], np.cumsum(n)]).astype(np.uint32)
    return start, points[keep].reshape(-1).astype(np.uint32)


def lane_payload(routing: Routing) -> dict[str, Any]:
    """Lanes as packed arrays: `start[i]:start[i+1]` are lane i's corners in `pts` (x, y
    pairs), `flow[i]` indexes `flows` (sorted flow names), `index[i]` is the lane's number
    within its flow and `color[i]` its routing color."""
    flows = sorted({ln.flow for ln in routing.lanes})
    index = {f: i for i, f in enumerate(flows)}
    start, pts = _corner_arrays(routing)
    return {
        "count": len(routing.lanes),
        "flows": flows,
        "segments": sum(max(0, len(ln.path) - 1) for ln in routing.lanes),
        "start": pack_array(start),
        "pts": pack_array(pts),
        "flow": pack_array(np.array([index[ln.flow] for ln in routing.lanes], dtype=np.uint32)),
        "index": pack_array(np.array([ln.index for ln in routing.lanes], dtype=np.uint32)),
        "color": pack_array(np.array([ln.color for ln in routing.lanes], dtype=np.uint32)),
    }


# --- what limits the throughput -----------------------------------------------------------


def limits_payload(
    limits: Limits | None, kernels: list[dict[str, Any]], routing: Routing
) -> dict[str, Any] | None:
    """`limits` as the page shows it: its fields, `lines` (the header's statement) and
    `color` and `highlight`: what the fabric picks out ({name, kind, label, kernel: index in `kernels` or
    -1, flow: index in `lane_payload`'s `flows` or -1, lanes: that flow's lane count}), None
    when there is nothing on the fabric to point at."""
    if limits is None:
        return None
    out: dict[str, Any] = asdict(limits) | {
        "lines": limits.lines(),
        "color": LIMIT_COLOR,
        "highlight": None,
    }
    if limits.highlight is not None:
        name, kind = limits.highlight
        flows = sorted({ln.flow for ln in routing.lanes})
        out["highlight"] = {
            "name": name,
            "kind": kind,
            "label": limits.highlight_label,
            "kernel": next((i for i, k in enumerate(kernels) if k["name"] == name), -1),
            "flow": flows.index(name) if name in flows else -1,
            "lanes": sum(1 for ln in routing.lanes if ln.flow == name),
        }
    return out


# --- kernels -------------------------------------------------------------------------------


def kernel_records(
    kg: KernelGraph,
    sizing: Sizing,
    placement: Placement,
    kernel_info: Mapping[str, Mapping[str, Any]] | None,
) -> list[dict[str, Any]]:
    """One record per placed kernel, in graph order (kernels the graph does not know last):
    name, kind, region and `info` (sizing's figures, the ONNX nodes, the params, then
    `kernel_info`'s entries for it, which win)."""
    by_name = {k.name: k for k in kg.kernels}
    sized = {k.name: k for k in sizing.kernels}
    names = [k.name for k in kg.kernels if k.name in placement.rects]
    names += sorted(n for n in placement.rects if n not in by_name)
    out = []
    for name in names:
        r = placement.rects[name]
        info: dict[str, Any] = {"pes": r.w * r.h}
        kernel = by_name.get(name)
        ks = sized.get(name)
        if ks is not None:
            info |= {
                "sram_bytes_per_pe": ks.sram.total,
                "sram_breakdown": ks.sram.as_dict(),
                "cycles_per_sample": ks.cycles_per_sample,
                "compute_cycles": ks.compute_cycles,
                "link_cycles": ks.link_cycles,
                "bound": "compute" if ks.compute_cycles >= ks.link_cycles else "link",
            }
        if kernel is not None:
            info["onnx_nodes"] = list(kernel.provenance)
            info["params"] = dict(kernel.params)
        info |= dict((kernel_info or {}).get(name, {}))
        if kernel is not None:
            kind = kernel.kind.value
        else:
            kind = str(info.get("kind", ks.kind if ks is not None else ""))
        out.append(
            {"name": name, "kind": kind, "x": r.x, "y": r.y, "w": r.w, "h": r.h, "info": info}
        )
    return out


def systems_payload(
    systems: Systems,
    kernel_names: Sequence[Sequence[str]],
    rows: Sequence[Mapping[str, Any]],
    crossing_latency_s: float,
) -> list[dict[str, Any]]:
    """One panel per system of a program over several systems (`wsecc.core.partition`): its regions
    as [x, y, w, h, kind, crossing end] (the placement it uses; a shared one is its source's,
    kernel for kernel), the lines the panel states (from the report's `systems` rows) and the
    bytes per sample crossing into it. `kernel_names[i]` are system i's kernels in order."""
    ends = {(c.src_system, c.src) for c in systems.crossings}
    ends |= {(c.dst_system, c.dst) for c in systems.crossings}
    panels = []
    for i, (names, row) in enumerate(zip(kernel_names, rows, strict=True)):
        program = systems.programs[i]
        rects = []
        for name, k in zip(names, program.kg.kernels, strict=True):
            r = program.placement.rects[k.name]
            rects.append([r.x, r.y, r.w, r.h, k.kind.value, (i, name) in ends])
        shared = f" (placement of system {row['placed_as']})" if row["placed_as"] != i else ""
        panels.append(
            {
                "system": i,
                "rects": rects,
                "crossing_in_bytes": row["crossing_in_bytes"],
                "crossing_latency_us": 1e6 * crossing_latency_s,
                "lines": [
                    f"system {i}{shared}",
                    f"L{row['first_layer']}\u2013L{row['last_layer']} ({row['layers']} layers)",
                    f"{row['pes']:,} PEs, {row['resident_bytes'] / 1e9:,.2f} GB",
                    f"{1e6 * row['seconds']:,.1f} \u00b5s ({100 * row['time_share']:.0f}%)",
                    *(
                        ["moe shards " + ", ".join(row["expert_shards"])]
                        if row.get("expert_shards")
                        else []
                    ),
                ],
            }
        )
    return panels
