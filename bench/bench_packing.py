"""What a compile delivers once the sized regions must also pack (greedy placer, then routing).

    python bench/bench_packing.py bench/models/gpt2-small.onnx:1024 bench/models/bert-base.onnx:128

One markdown row per model: the fill at which the regions packed (sizing starts at 85% and
steps down, see wsecc/core/flow.py), PEs used, bottleneck, throughput, colors max / lower bound.
"""

from __future__ import annotations

import sys


def main() -> None:
    from wsecc.passes import DEFAULT_PIPELINE
    from wsecc.targets import load_target

    from wsecc.core.flow import lower_and_size, place_and_route
    from wsecc.frontend.onnx import import_model
    from wsecc.pm import PassManager

    target = load_target("wse2")
    print(
        "| model | seq | fill that packed | PEs used | bottleneck | samples/s / tokens/s | colors |"
    )
    print("|---|---|---|---|---|---|---|")
    for spec in sys.argv[1:]:
        path, _, seq = spec.partition(":")
        graph, _ = import_model(path, batch=1, seq=int(seq or 1024))
        fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
        kg, sizing = lower_and_size(fused, target, "mixed")
        placed = place_and_route(kg, sizing, target, "mixed", placer="greedy", time_budget_s=10)
        s, r = placed.program.sizing, placed.program.routing
        name = path.split("/")[-1].removesuffix(".onnx")
        print(
            f"| {name} | {seq} | {100 * s.fill:.0f}% | {s.pes_used:,} | {s.bottleneck} | "
            f"{s.samples_per_s:,.1f} / {s.tokens_per_s:,.0f} | {r.colors_used_max} / {r.color_lower_bound} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
