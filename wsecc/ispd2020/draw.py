"""Draw a scored solution to a PNG: rectangles labelled by kernel name, edges centre to centre.

The only module of `wsecc.ispd2020` that imports matplotlib (lazily, with the Agg backend).
"""

from __future__ import annotations

from pathlib import Path

from wsecc.ispd2020.kgraph import KGraph
from wsecc.ispd2020.score import Score


def draw_placement(graph: KGraph, score: Score, path: str | Path, title: str = "") -> None:
    """Write the placement of `score.rects` on the `graph`'s fabric to `path` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    fig, ax = plt.subplots(figsize=(8, 8), dpi=120)
    ax.add_patch(Rectangle((0, 0), graph.width, graph.height, fill=False, lw=1.5, ec="black"))
    cmap = plt.get_cmap("tab20")
    for i, (name, r) in enumerate(sorted(score.rects.items())):
        ax.add_patch(
            Rectangle((r.x, r.y), r.w, r.h, fc=cmap(i % 20), ec="black", lw=0.5, alpha=0.7)
        )
        size = max(4.0, min(9.0, 0.05 * min(r.w, r.h) + 3))
        ax.text(r.x + r.w / 2, r.y + r.h / 2, name, ha="center", va="center", fontsize=size)
    for e in graph.kernel_edges:
        u, v = score.rects.get(graph.node(e.src).name), score.rects.get(graph.node(e.dst).name)
        if u is not None and v is not None:
            (ux, uy), (vx, vy) = u.center2(), v.center2()
            ax.plot([ux / 2, vx / 2], [uy / 2, vy / 2], color="black", lw=0.7, alpha=0.6)
    ax.set_xlim(-5, graph.width + 5)
    ax.set_ylim(-5, graph.height + 5)
    ax.set_aspect("equal")
    ax.set_title(title or f"{graph.source}: Δt={score.delta_t} WL={score.wirelength:g}")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
