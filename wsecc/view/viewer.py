"""`render_viewer`: one self-contained HTML file showing a placed and routed compile."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from wsecc.core.program import Program
from wsecc.limits import KERNEL, Limits
from wsecc.route.problem import Point
from wsecc.version import __version__
from wsecc.view.data import (
    LINK_DIRS,
    kernel_records,
    kind_colors,
    lane_payload,
    limits_payload,
    link_load_planes,
    pack_array,
    routed_link_loads,
    router_colors_map,
    sram_map,
)
from wsecc.view.page import BODY, CSS, JS, TEMPLATE


def render_viewer(
    program: Program,
    *,
    title: str,
    kernel_info: Mapping[str, Mapping[str, Any]] | None = None,
    sram_per_pe: np.ndarray | None = None,
    link_util: Mapping[tuple[Point, str], float] | None = None,
    limits: Limits | None = None,
    systems: Sequence[Mapping[str, Any]] | None = None,
) -> str:
    """The viewer page for a placed, routed graph, as one HTML string.

    Self-contained: CSS, JavaScript and data are inline, nothing is fetched (a modern browser
    opens it from file://). It draws the program rectangle with every placed kernel's region
    colored by kind, the routed lanes, and heat maps of SRAM per PE, K/V cache per PE, colors
    per router and link load; hover shows a kernel's details, wheel zooms, drag pans, and a
    search box finds a kernel by name or ONNX node. A replicated program (`program.replicas`)
    shows copy 0 so, the other copies' regions outlined in their tiles.

    kernel_info: extra per-kernel details by kernel name, shown on hover and overriding the
        figures taken from `sizing` (keys such as "bound", "sram_bytes_per_pe",
        "cycles_per_sample", "onnx_nodes"; any other key is listed as is).
    sram_per_pe: bytes per PE as an (H, W) array over the program rectangle; default: each
        region filled with its kernel's fullest-PE figure from `sizing`.
    link_util: (router, outgoing direction "E"/"N"/"S"/"W") -> lanes; default
        `routing.link_loads()`.
    limits: what limits the throughput (`Compilation.limits()`, or `Limits.from_report` of a
        saved report): stated in the header, its on-wafer limit (a kernel's region or a flow's
        lanes) highlighted on the fabric; default: sizing's slowest kernel, said to be sizing's.
    systems: a program over several systems (`wsecc.view.data.systems_payload`): one panel
        each below the fabric (which shows system 0), the crossing flows marked.
    Raises ValueError if `sram_per_pe` has the wrong shape.
    """
    kg, sizing, placement, routing, target = (
        program.kg, program.sizing, program.placement, program.routing, program.target
    )  # fmt: skip
    fab = target.fabric
    W, H = fab.program_width, fab.program_height
    if sram_per_pe is None:
        sram_per_pe = sram_map(sizing, placement, target)
    elif np.shape(sram_per_pe) != (H, W):
        raise ValueError(
            f"sram_per_pe has shape {np.shape(sram_per_pe)}, expected (H, W) = ({H}, {W})"
        )
    sram = np.clip(np.rint(np.asarray(sram_per_pe, dtype=np.float64)), 0, 2**32 - 1)
    kv = sram_map(sizing, placement, target, "kv")
    if link_util is None:
        links, busiest = routed_link_loads(routing, W, H)
    else:
        links = link_load_planes(link_util, W, H)
        busiest = max((int(v) for v in link_util.values()), default=0)
    colors = router_colors_map(routing, W, H)
    kernels = kernel_records(kg, sizing, placement, kernel_info)
    if limits is None and sizing.kernels:
        limits = Limits(sizing.bottleneck, KERNEL, False, sizing.samples_per_s)
    pes = program.replicas.k * sum(k["w"] * k["h"] for k in kernels)  # every copy's
    data = {
        "fabric": {
            "target": target.name,
            "width": W,
            "height": H,
            "full_width": fab.width,
            "full_height": fab.height,
            "program_x": fab.program_x,
            "program_y": fab.program_y,
        },
        "kinds": kind_colors([k["kind"] for k in kernels]),
        "kernels": kernels,
        "lanes": lane_payload(routing),
        "heat": {
            "sram": {
                "label": "SRAM per PE",
                "unit": "B",
                "scale_max": target.sram.bytes_per_pe,
                "data": pack_array(sram.astype(np.uint32)),
            },
            "kv": {
                "label": "K/V cache per PE",
                "unit": "B",
                "scale_max": max(1, int(kv.max()) if kv.size else 1),
                "data": pack_array(kv),
            },
            "colors": {
                "label": "colors per router",
                "unit": "colors",
                "scale_max": routing.color_budget,
                "data": pack_array(colors),
            },
            "links": {
                "label": "link load (busiest outgoing link)",
                "unit": "lanes",
                "scale_max": max(1, int(links.max()) if links.size else 1),
                "dirs": LINK_DIRS,
                "data": pack_array(links),
            },
        },
        "stats": {
            "kernels": len(kernels),
            "pes_used": pes,
            "usable_pes": W * H,
            "lanes": len(routing.lanes),
            "colors_used_max": routing.colors_used_max,
            "color_budget": routing.color_budget,
            "link_load_max": busiest,
            "placer": placement.placer,
            "objective": placement.objective,
            "gap": placement.gap if placement.bound > 0 else None,  # no bound, no gap
            "bound_kind": placement.bound_kind,
            "stage_cycles": sizing.stage_cycles if sizing.kernels else 0,
        },
        "limits": limits_payload(limits, kernels, routing),
        "replicas": program.replicas.to_json(),
        "systems": list(systems or []),
    }
    # JSON inside <script>: escaping "<" keeps "</script>" and "<!--" in names harmless.
    blob = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
    # One pass, so no inserted text (a title, a kernel name) is ever read as a placeholder.
    parts = {
        "CSS": CSS,
        "BODY": BODY.replace("__TITLE__", html.escape(title)),
        "JS": JS,
        "VERSION": __version__,
        "TITLE": html.escape(title),
        "DATA": blob,
    }
    return re.sub(r"__([A-Z]+)__", lambda m: parts[m.group(1)], TEMPLATE)
