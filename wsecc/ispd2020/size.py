"""Sizing a contest graph with the shared machinery of `wsecc.kernels`.

The kgraph's kernels are a `KernelGraph` of kinds conv, dblock and cblock (perf.kernel_graph),
whose cost model (`wsecc.kernels.conv`, defined in `wsecc.kernels.kinds.contest`) lists each kernel's
(height, width) frontier at a Δt. The contest's fabric is the `cs1-ispd2020` target with the
kgraph header's width, height and memlimit; its 16-bit words are the fp16 storage type.

- The area lower bound on Δt is `size_regions` at fill 1 with no aspect preference: the least
  stage time at which every kernel's smallest shape fits W·H together — the search that balances
  a transformer's pipeline. No legal solution has a smaller Δt.
- The pair bound tightens it: two rectangles inside W×H that do not overlap are side by side
  (w₁ + w₂ ≤ W, both h ≤ H) or one above the other (h₁ + h₂ ≤ H, both w ≤ W), so at a feasible
  Δt every two kernels have frontier shapes (R0 or R90) that fit so. Feasibility is monotone in
  Δt (a slower Δt only adds shapes), so the least Δt at which every pair fits is a lower bound.
  It matters when a few kernels each want about half the fabric (two 3x3 convs of 1024
  channels: the area bound 28224, the pair bound 30240, which packs). Both bounds search the
  same frontier (exact when memory does not bind, see `wsecc.kernels.conv.frontier`).
- The score bound: score = wdeltat·Δt + wlength·WL, and a large wlength buys wirelength with
  Δt, so Δt / Δt_LB says little there. Two rectangles that do not overlap have centres at least
  (w₁ + w₂)/2 apart along x or (h₁ + h₂)/2 along y, so an edge's L1 length is at least
  (s₁ + s₂)/2, s = the shorter side; a legal shape at Δt is dominated by a frontier shape, so
  s ≥ s(Δt) = the least shorter side on the frontier at Δt, which does not increase with Δt.
  WL_LB(Δt) = Σ_edges (s_u(Δt) + s_v(Δt))/2. A solution with Δt ∈ [a, b] scores at least
  wdeltat·a + wlength·WL_LB(b), and one with Δt ≥ b at least wdeltat·b + wlength·WL_LB(∞)
  (the frontier at the Δt of every parameter at 1, the slowest choice, is complete); the least
  of these over a grid from Δt_LB is a lower bound on the score (`score_lower_bound`).
- `Sizer.frontier` is the same frontier with the execution parameters the floorplan and the
  solution need, memoised per (convs, Δt) for one solve (C has 100 kernels of 24 kinds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction

import numpy as np

from wsecc.ispd2020.kgraph import KGraph
from wsecc.ispd2020.perf import ExecParams, KernelSpec
from wsecc.kernels import CostContext, KernelGraph, SizingError, precision, size_regions
from wsecc.kernels.conv import ConvShape, frontier
from wsecc.kernels.costs import least_true
from wsecc.kernels.kinds.contest import conv_memlimit
from wsecc.targets import Target, load_target
from wsecc.vocab import Precision

PRECISION = Precision.FP16
"""The contest counts memory in 16-bit words (reference/ispd2020.md §1.1): fp16 storage."""
BYTES_PER_WORD = precision(PRECISION).storage_bytes


def contest_target(graph: KGraph) -> Target:
    """`cs1-ispd2020` with the kgraph header's fabric (all of it placeable) and memlimit."""
    base = load_target("cs1-ispd2020")
    fabric = replace(
        base.fabric,
        width=graph.width,
        height=graph.height,
        program_width=graph.width,
        program_height=graph.height,
    )
    sram = replace(base.sram, bytes_per_pe=graph.memlimit * BYTES_PER_WORD, reserved_bytes=0)
    return replace(base, fabric=fabric, sram=sram)


@dataclass(frozen=True)
class Sizer:
    """A contest graph's kernels on its fabric: frontiers with parameters, and the Δt bound."""

    kernel_graph: KernelGraph
    target: Target
    _cache: dict[tuple[object, ...], tuple[ConvShape, ...]] = field(
        default_factory=dict, repr=False
    )

    @property
    def memlimit(self) -> Fraction:
        """Words per PE."""
        return conv_memlimit(CostContext(self.target, PRECISION))

    @property
    def fabric(self) -> tuple[int, int]:
        return (self.target.fabric.program_width, self.target.fabric.program_height)

    def frontier(self, spec: KernelSpec, dt: int) -> tuple[ConvShape, ...]:
        """Non-dominated shapes of `spec` with time ≤ dt, memory ≤ memlimit, fitting the
        fabric in R0 or R90 (`wsecc.kernels.conv.frontier`)."""
        key = (spec.convs, spec.H, spec.W, dt)
        if key not in self._cache:
            self._cache[key] = frontier(spec.convs, spec.H, spec.W, dt, self.memlimit, self.fabric)
        return self._cache[key]

    def pairs_fit(self, specs: tuple[KernelSpec, ...], dt: int, largest: int = 40) -> bool:
        """Every two of the `largest` kernels (by least area at dt) fit the fabric together at
        dt, side by side or one above the other (module doc); False if one has no shape."""
        W, H = self.fabric
        shapes = []
        for spec in specs:
            front = self.frontier(spec, dt)
            if not front:
                return False
            both = [(s.width, s.height) for s in front] + [(s.height, s.width) for s in front]
            shapes.append(np.array(sorted(set(both)), dtype=np.int64))
        shapes.sort(key=lambda a: -int((a[:, 0] * a[:, 1]).min()))
        shapes = shapes[:largest]
        for i, a in enumerate(shapes):
            for b in shapes[i + 1 :]:
                wa, ha = a[:, None, 0], a[:, None, 1]
                wb, hb = b[None, :, 0], b[None, :, 1]
                beside = (wa + wb <= W) & (np.maximum(ha, hb) <= H)
                above = (ha + hb <= H) & (np.maximum(wa, wb) <= W)
                if not (beside | above).any():
                    return False
        return True

    def pair_lower_bound(self, specs: tuple[KernelSpec, ...], lower: int, upper: int) -> int:
        """Least Δt in [lower, upper] at which `pairs_fit` (upper: a Δt known to pack)."""
        if self.pairs_fit(specs, lower):
            return lower
        return least_true(lambda dt: self.pairs_fit(specs, dt), lower, upper)

    def wirelength_lower_bound(
        self, specs: tuple[KernelSpec, ...], edges: tuple[tuple[int, int], ...], dt: int
    ) -> Fraction:
        """Σ over edges (u, v) of (s_u + s_v)/2, s = the least shorter side of a frontier shape
        at dt (module doc); `edges` index `specs`. Every kernel must have a shape at dt."""
        short = [min(min(f.width, f.height) for f in self.frontier(spec, dt)) for spec in specs]
        return Fraction(sum(short[u] + short[v] for u, v in edges), 2)

    def score_lower_bound(
        self,
        specs: tuple[KernelSpec, ...],
        edges: tuple[tuple[int, int], ...],
        weights: tuple[float, float],
        lower: int,
        upper: int,
        steps: int = 32,
    ) -> float:
        """Least wdeltat·a + wlength·WL_LB(b) over a geometric grid of intervals [a, b] from
        `lower` (a Δt bound at which every kernel has a shape) to `upper`, and Δt ≥ upper
        (module doc). `weights` = (wdeltat, wlength), both ≥ 0."""
        wdeltat, wlength = weights
        slowest = max(
            spec.perf(ExecParams(1, 1, (1,) * len(spec.convs), (1,) * len(spec.convs))).time
            for spec in specs
        )
        upper = max(upper, lower)
        grid = sorted({round(lower * (upper / lower) ** (i / steps)) for i in range(steps + 1)})
        grid = [lower, *[d for d in grid if lower < d < upper], upper] if upper > lower else [lower]
        best = wdeltat * upper + wlength * float(
            self.wirelength_lower_bound(specs, edges, max(upper, slowest))
        )
        for a, b in zip(grid, grid[1:], strict=False):
            best = min(
                best, wdeltat * a + wlength * float(self.wirelength_lower_bound(specs, edges, b))
            )
        return best

    def area_lower_bound(self) -> int:
        """Least Δt at which Σ_kernels min area ≤ W·H (`size_regions` at fill 1)."""
        try:
            sizing = size_regions(
                self.kernel_graph, self.target, PRECISION, fill=1.0, max_aspect=math.inf
            )
        except SizingError as exc:
            raise ValueError(f"the kernels do not fit the fabric at any Δt: {exc}") from exc
        return sizing.stage_cycles
