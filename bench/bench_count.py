"""How many systems a model needs, in bytes (issue 30: Llama 3.1 70B's 4, 5 or 6).

    python bench/bench_count.py OUT/systems/model-kernels.json --counts 4 5 6

Reads the kernel graph a compile over several systems wrote (`systems/model-kernels.json`: the
whole model, before the split) and prints, for its layers with the embedding on the host (as
`--systems` above one has it), at one token per chunk double- and single-buffered:

- the SRAM of the kernels' smallest fitting shapes split into weights and K/V cache, reserve,
  buffers, tables, tile rounding and free bytes (`wsecc.core.sizing_bytes`), against N systems;
- per count N: the groups balanced by those PEs (`least_pes`, as auto's fallback balances them)
  and the fullest group's share of a system, against sizing's 85% and 90% fills;
- when N systems do not hold them at 85% fill: the largest per-PE reserve at which they would
  at 85%, 90% and 100% (bisection over the target's `sram.reserved_bytes`, the one figure here
  that no source settles; the PEs in all, not the fullest group's);
- the same smallest shapes with the linear kinds' menus not thinned (every breakpoint).

Arithmetic on the cost models only: no placement, nothing timed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from wsecc.targets import Target, load_target

from wsecc.core.partition import host_lookups, least_pes, split_layers, sram_at_smallest
from wsecc.kernels import KernelGraph
from wsecc.kernels.costs import CostContext, cdiv, costs_over
from wsecc.kernels.sizing import DEFAULT_MAX_ASPECT
from wsecc.vocab import Precision

FILLS = (0.85, 0.9, 1.0)
LINEAR_KINDS = ("linear", "gated_linear", "lm_head")


def groups_line(kg: KernelGraph, target: Target, n: int, single: bool) -> str:
    """The fullest of `n` groups balanced by the PEs of their kernels' smallest shapes."""
    pes = least_pes(kg, target, Precision.MIXED, 1, single)
    part = split_layers(kg, Precision.MIXED, n, pes)
    sizes = [p.layers for p in part.parts]
    index = {k.name: i for i, k in enumerate(kg.kernels)}
    need = [sum(pes[index[k.name]] for k in p.graph.kernels) for p in part.parts]
    worst = max(need)
    return (
        f"{n} groups of {sizes} layers: the fullest needs {worst:,} PEs = "
        f"{worst / target.usable_pes:.1%} of a system"
    )


def with_reserve(target: Target, reserve: int) -> Target:
    return dataclasses.replace(
        target, sram=dataclasses.replace(target.sram, reserved_bytes=reserve)
    )


def largest_reserve(kg: KernelGraph, target: Target, n: int, fill: float, single: bool) -> int:
    """The largest reserve (bytes a PE, to 16 B; at most the target's) at which the smallest
    shapes take at most `fill` of `n` systems' PEs; -1 if none does."""

    def fits(r: int) -> bool:
        got = sram_at_smallest(kg, with_reserve(target, r), Precision.MIXED, 1, single)
        return got.pes <= fill * n * target.usable_pes

    lo, hi = -1, target.sram.reserved_bytes
    if fits(hi):  # the sourced reserve already does
        return hi
    while hi - lo > 16:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(max(mid, 0)) else (lo, mid)
    return lo


def exact_pes(kg: KernelGraph, target: Target, single: bool) -> int:
    """The smallest shapes' PEs with every breakpoint of the linear kinds' K and N offered."""
    ctx = CostContext(target, Precision.MIXED, 1, single_buffered=single)
    fab = target.fabric
    memo: dict[object, int] = {}
    total = 0
    for k in kg.kernels:
        key = (k.kind, tuple(sorted(k.params.items())))
        if key not in memo:
            p = k.params
            rows, cols = k.spec.shapes(p, fab.program_height, fab.program_width)  # type: ignore[misc]
            if k.kind.value in LINEAR_KINDS:
                n = p["N"] if "N" in p else p["vocab"]
                rows = _every(p["K"], fab.program_height)
                cols = _every(n, fab.program_width)
            fit = [
                c
                for c in costs_over(k, rows, cols, ctx)
                if c.sram.total <= target.sram.bytes_per_pe
                and max(c.h, c.w) <= DEFAULT_MAX_ASPECT * min(c.h, c.w)
            ]
            memo[key] = min(c.area for c in fit)
        total += memo[key]
    return total


def _every(extent: int, cap: int) -> list[int]:
    return [v for v in range(1, min(extent, cap) + 1) if v == cdiv(extent, cdiv(extent, v))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernels", type=Path, help="systems/model-kernels.json of a compile")
    ap.add_argument("--target", default="wse3")
    ap.add_argument("--counts", type=int, nargs="+", default=[4, 5, 6])
    args = ap.parse_args()
    target = load_target(args.target)
    whole = KernelGraph.from_json(json.loads(args.kernels.read_text()))
    kg = host_lookups(whole, Precision.MIXED).graph
    for single in (False, True):
        how = "single-buffered" if single else "double-buffered"
        got = sram_at_smallest(kg, target, Precision.MIXED, 1, single)
        print(f"## one token per chunk, {how}")
        for n in args.counts:
            print(f"- {got.line(n)}")
            print(f"  - {groups_line(kg, target, n, single)}")
            if got.pes <= FILLS[0] * n * target.usable_pes:
                print(
                    f"  - in all within {FILLS[0]:.0%} of {n} systems' PEs with this reserve "
                    "(the fullest group, above, decides)"
                )
                continue
            reserves = ", ".join(
                f"{fill:.0%} fill: {largest_reserve(kg, target, n, fill, single):,} B"
                for fill in FILLS
            )
            print(f"  - the largest reserve at which {n} would hold them: {reserves}")
        exact = exact_pes(kg, target, single)
        print(
            f"- every breakpoint of the linear kinds' K and N offered: {exact:,} PEs against "
            f"{got.pes:,} ({got.pes - exact:,} fewer: "
            f"{(got.pes - exact) * target.sram.bytes_per_pe / 1e9:.2f} GB)"
        )


if __name__ == "__main__":
    main()
