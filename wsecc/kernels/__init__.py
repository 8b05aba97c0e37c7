"""The kernel library: kernel-level IR, the kernel kinds (each defined once, `kinds/`), the cost
machinery, and region sizing.

from wsecc.kernels import KernelGraph, size_regions
from wsecc.vocab import Precision
sizing = size_regions(kernel_graph, load_target("wse2"), Precision.MIXED)
"""

from wsecc.kernels.costs import (
    DEFAULT_CHUNK_TOKENS,
    CostContext,
    KernelCost,
    SramBreakdown,
    kernel_cost,
)
from wsecc.kernels.ir import (
    Flow,
    Kernel,
    KernelGraph,
    KernelGraphError,
    KernelKind,
    Port,
    precision,
)
from wsecc.kernels.kind import KindDef
from wsecc.kernels.kinds import KINDS, lower_node
from wsecc.kernels.sizing import (
    FitBounds,
    KernelSizing,
    Sizing,
    SizingError,
    fit_bounds,
    fits_a_region,
    size_for_decode,
    size_regions,
    sizing_at,
    smallest_region,
    work_proportional_sizing,
)

__all__ = [
    "DEFAULT_CHUNK_TOKENS",
    "KINDS",
    "KindDef",
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
    "lower_node",
    "precision",
    "fit_bounds",
    "fits_a_region",
    "size_for_decode",
    "size_regions",
    "sizing_at",
    "smallest_region",
    "work_proportional_sizing",
]
