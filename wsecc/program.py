"""`Program`: the compiled program, the record every simulator, the viewer and the report read.

    KernelGraph ─size─▶ Sizing ─place─▶ Placement ─route─▶ Routing   (+ the Target, Replicas)

One frozen record instead of the same five or six arguments to every consumer. Precision and
chunk size are the sizing's (`program.precision`, `program.chunk_tokens`): a program in another
precision is another program (`wsecc.kernels.sizing_at` re-costs the placed shapes).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from wsecc.kernels import KernelGraph, Sizing
from wsecc.place.problem import Placement
from wsecc.replicas import Replicas
from wsecc.route.problem import Routing
from wsecc.targets import Target


@dataclass(frozen=True)
class Program:
    kg: KernelGraph
    sizing: Sizing
    placement: Placement
    routing: Routing
    target: Target
    # k copies of it side by side, sharing the host I/O (`wsecc.replicas`); the other fields
    # are copy 0's
    replicas: Replicas = field(default_factory=Replicas)

    @property
    def precision(self) -> str:
        return self.sizing.precision

    @property
    def chunk_tokens(self) -> int:
        return self.sizing.chunk_tokens

    def in_precision(self, precision: str) -> Program:
        """The same placement and routing in `precision` (each kernel re-costed at its placed
        shape); raises SizingError when a region no longer fits its SRAM."""
        if precision == self.precision:
            return self
        from wsecc.kernels import sizing_at

        sizing = sizing_at(self.sizing, self.kg, self.target, precision)
        return replace(self, sizing=sizing)
