"""The interactive placement viewer page of a scored solution (its PNG is
`wsecc.view.png.draw_contest_placement`)."""

from __future__ import annotations

import math

from wsecc.core.program import Program
from wsecc.ispd2020.kgraph import KGraph
from wsecc.ispd2020.perf import kernel_graph, kernel_spec
from wsecc.ispd2020.score import Score, Solution
from wsecc.ispd2020.size import BYTES_PER_WORD, PRECISION, contest_target
from wsecc.kernels import KernelSizing, Sizing, SramBreakdown
from wsecc.place.problem import Placement
from wsecc.route.problem import Routing
from wsecc.view.viewer import render_viewer


def viewer_page(graph: KGraph, solution: Solution, score: Score) -> str:
    """The placement viewer (`wsecc.view`, as `wsecc view` shows a compile) for a scored
    solution: regions by kind on the contest fabric, each kernel's time, memory and execution
    parameters on hover, the SRAM layer from the contest memory. There are no routed lanes (the
    contest scores centre-to-centre wirelength instead)."""
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
    program = Program(kg, sizing, placement, routing, target)
    return render_viewer(program, title=title, kernel_info=info)
