"""`write_placement_png`: the placement as a static picture (matplotlib, Agg, no pyplot)."""

from __future__ import annotations

import os

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PatchCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from wsecc.kernels import KernelGraph
from wsecc.place.problem import Placement
from wsecc.targets import Target
from wsecc.view.data import kind_colors

_LONG_SIDE_IN = 9.0  # figure size of the fabric's long side, inches
_DPI = 120


def write_placement_png(
    path: str | os.PathLike[str],
    kg: KernelGraph,
    placement: Placement,
    target: Target,
    title: str,
) -> None:
    """Write a PNG of the program rectangle with each placed kernel's region filled by kind,
    a legend of kinds, and names on the regions big enough to hold them."""
    fab = target.fabric
    W, H = fab.program_width, fab.program_height
    kinds = {k.name: k.kind.value for k in kg.kernels}
    placed = [(n, r, kinds.get(n, "unknown")) for n, r in placement.rects.items()]
    colors = kind_colors([kind for _, _, kind in placed])
    scale = _LONG_SIDE_IN / max(W, H)
    fig = Figure(figsize=(W * scale + 2.6, H * scale + 0.8), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.add_collection(
        PatchCollection(
            [Rectangle((r.x, r.y), r.w, r.h) for _, r, _ in placed],
            facecolors=[colors[kind] for _, _, kind in placed],
            edgecolors="#202020",
            linewidths=0.3,
        )
    )
    ax.add_patch(Rectangle((0, 0), W, H, fill=False, edgecolor="black", linewidth=1.2))
    for name, r, _ in placed:
        if r.w >= 0.12 * W and r.h >= 0.02 * H:  # room for a label at this figure size
            ax.text(r.x + r.w / 2, r.y + r.h / 2, name, ha="center", va="center", fontsize=6)
    ax.set_xlim(-0.01 * W, 1.01 * W)
    ax.set_ylim(1.01 * H, -0.01 * H)  # y grows south, as on the fabric
    ax.set_aspect("equal")
    ax.set_xlabel("x (PE columns)")
    ax.set_ylabel("y (PE rows)")
    used = sum(r.area for _, r, _ in placed)
    ax.set_title(
        f"{title}\n{target.name} {W}x{H} PEs, {len(placed)} kernels, "
        f"{used:,} PEs ({used / (W * H):.1%})",
        fontsize=9,
    )
    counts = {kind: sum(1 for _, _, k in placed if k == kind) for kind in colors}
    handles = [
        Patch(facecolor=c, edgecolor="#202020", label=f"{k} ({counts[k]})")
        for k, c in colors.items()
    ]
    ax.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        fontsize=8,
        title="kernel kind",
        title_fontsize=8,
        frameon=False,
    )
    fig.savefig(os.fspath(path), format="png")
