"""Pictures of a compile: the interactive viewer page and a placement PNG.

    from wsecc.view import load_outdir, render_viewer, write_placement_png
    v = load_outdir("model.wsecc")
    html = render_viewer(v.program, title=v.title, limits=v.limits)
    write_placement_png("placement.png", v.program.kg, v.program.placement, v.program.target,
                        v.title, limits=v.limits, routing=v.program.routing,
                        replicas=v.program.replicas)

matplotlib is imported only by `write_placement_png`'s module, on first use.
"""

from __future__ import annotations

from typing import Any

from wsecc.view.data import KIND_COLORS, router_colors_map, sram_map
from wsecc.view.outdir import ViewInputs, load_outdir
from wsecc.view.viewer import render_viewer

__all__ = [
    "KIND_COLORS",
    "ViewInputs",
    "load_outdir",
    "render_viewer",
    "router_colors_map",
    "sram_map",
    "write_placement_png",
]


def __getattr__(name: str) -> Any:
    if name == "write_placement_png":
        from wsecc.view.png import write_placement_png

        return write_placement_png
    raise AttributeError(f"module 'wsecc.view' has no attribute {name!r}")
