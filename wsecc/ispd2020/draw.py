"""Pictures of a scored solution: a PNG (rectangles labelled by kernel name, edges centre to
centre) and the interactive placement viewer page.

The only module of `wsecc.ispd2020` that imports matplotlib (lazily, with the Agg backend).
"""

from __future__ import annotations

import math
from pathlib import Path

from wsecc.ispd2020.kgraph import KGraph
from wsecc.ispd2020.score import Score, Solution


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


def viewer_page(graph: KGraph, solution: Solution, score: Score) -> str:
    """The placement viewer (`wsecc.view`, as `wsecc view` shows a compile) for a scored
    solution: regions by kind on the contest fabric, each kernel's time, memory and execution
    parameters on hover, the SRAM layer from the contest memory. There are no routed lanes (the
    contest scores centre-to-centre wirelength instead)."""
    from wsecc.ispd2020.perf import kernel_graph, kernel_spec
    from wsecc.ispd2020.size import BYTES_PER_WORD, PRECISION, contest_target
    from wsecc.kernels import KernelSizing, Sizing, SramBreakdown
    from wsecc.place.problem import Placement
    from wsecc.route.problem import Routing
    from wsecc.view.viewer import render_viewer

    kg, target = kernel_graph(graph), contest_target(graph)
    nodes = {n.name: n for n in graph.kernels}
    sized, info = [], {}
    for k in solution.kernels:
        spec = kernel_spec(nodes[k.name])
        params = spec.params_from_args(k.args)
        perf = spec.perf(params)
        r = score.rects[k.name]
        sram = SramBreakdown(math.ceil(perf.memory * BYTES_PER_WORD), 0, 0, 0)
        sized.append(KernelSizing(k.name, k.kind, r.h, r.w, sram, perf.time, 0))
        info[k.name] = {
            "time": perf.time,
            "memory_words": round(float(perf.memory), 2),
            "exec_params": f"h'={params.h} w'={params.w} c'={params.c} k'={params.k} {k.rot}",
        }
    sizing = Sizing(
        strategy="ispd2020",
        graph=kg.name,
        target=target.name,
        precision=PRECISION,
        fill=1.0,
        chunk_tokens=1,
        clock_hz=target.clock.hz,
        usable_pes=target.usable_pes,
        sram_bytes_per_pe=target.sram.bytes_per_pe,
        tokens_per_sample=kg.tokens_per_sample,
        flops_per_sample=kg.flops_per_sample,
        peak_flops_per_cycle=target.usable_pes * target.flops_per_cycle[PRECISION],
        kernels=tuple(sized),
    )
    placement = Placement(
        rects=dict(score.rects),
        placer="ispd2020",
        objective=score.wirelength,
        bound=0.0,
        gap=1.0,
        status="scored",
        seconds=0.0,
        seed=0,
    )
    routing = Routing.of((), target.color_budget, 0)
    title = f"{graph.source}: Δt={score.delta_t} WL={score.wirelength:g} score={score.score:g}"
    return render_viewer(kg, sizing, placement, routing, target, title=title, kernel_info=info)
