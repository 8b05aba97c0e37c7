"""The kernel library: kernel-level IR, per-kind cost models, and region sizing.

from wsecc.kernels import KernelGraph, size_regions
sizing = size_regions(kernel_graph, load_target("wse2"), "mixed")
"""

from wsecc.kernels.costs import (
    COST_MODELS,
    DEFAULT_CHUNK_TOKENS,
    CostContext,
    KernelCost,
    SramBreakdown,
    kernel_cost,
)
from wsecc.kernels.ir import (
    KIND_SPECS,
    Flow,
    Kernel,
    KernelGraph,
    KernelGraphError,
    KernelKind,
    Port,
    precision,
)
from wsecc.kernels.sizing import (
    FitBounds,
    KernelSizing,
    Sizing,
    SizingError,
    fit_bounds,
    size_regions,
    sizing_at,
    work_proportional_sizing,
)

__all__ = [
    "COST_MODELS",
    "DEFAULT_CHUNK_TOKENS",
    "KIND_SPECS",
    "CostContext",
    "Flow",
    "Kernel",
    "KernelCost",
    "KernelGraph",
    "KernelGraphError",
    "KernelKind",
    "FitBounds",
    "KernelSizing",
    "Port",
    "Sizing",
    "SizingError",
    "SramBreakdown",
    "kernel_cost",
    "precision",
    "fit_bounds",
    "size_regions",
    "sizing_at",
    "work_proportional_sizing",
]
