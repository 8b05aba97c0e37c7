"""The placement problem of a sized KernelGraph: one rectangle per kernel, its flows as weights.

Shapes: sizing's (h rows, w columns) region and its alternatives become (w, h) shapes, the
preferred first, and its pool the kernel's pool. Flows between kernels carry bytes per sample
in the chosen precision; flows from or to graph ports are left out (the host I/O columns are
not placed).
"""

from __future__ import annotations

from wsecc.kernels import KernelGraph, Sizing
from wsecc.place.problem import PlaceFlow, PlaceKernel, PlacementProblem
from wsecc.targets import Target
from wsecc.vocab import Precision


def placement_problem(
    kg: KernelGraph, sizing: Sizing, target: Target, precision: Precision
) -> PlacementProblem:
    kernels = []
    for k in kg.kernels:
        ks = sizing.kernel(k.name)
        shapes = [(ks.w, ks.h)] + [(w, h) for h, w in ks.alternatives if (w, h) != (ks.w, ks.h)]
        menu = tuple(dict.fromkeys(shapes))
        pool = tuple(s for s in dict.fromkeys((w, h) for h, w in ks.pool) if s not in menu)
        kernels.append(PlaceKernel(k.name, menu, tuple(k.provenance), k.kind.value, pool))
    names = {k.name for k in kg.kernels}
    merged: dict[tuple[str, str], float] = {}
    for f in kg.flows:
        if f.src in names and f.dst in names and f.src != f.dst:
            key = (f.src, f.dst)
            merged[key] = merged.get(key, 0.0) + float(f.bytes_per_sample(precision))
    flows = tuple(PlaceFlow(s, d, b, f"{s}->{d}") for (s, d), b in merged.items())
    return PlacementProblem(
        target.fabric.program_width, target.fabric.program_height, tuple(kernels), flows
    )
