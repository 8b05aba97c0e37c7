"""`Program`: the compiled program, the record every simulator, the viewer and the report read.

    KernelGraph ─size─▶ Sizing ─place─▶ Placement ─route─▶ Routing   (+ the Target, Replicas)

One frozen record instead of the same five or six arguments to every consumer. Precision and
chunk size are the sizing's (`program.precision`, `program.chunk_tokens`): a program in another
precision is another program (`wsecc.kernels.sizing_at` re-costs the placed shapes).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from wsecc.core.replicas import Replicas
from wsecc.kernels import KernelGraph, Sizing, sizing_at
from wsecc.place.problem import Placement
from wsecc.route.problem import Routing
from wsecc.targets import Target
from wsecc.vocab import Precision


@dataclass(frozen=True)
class Program:
    kg: KernelGraph
    sizing: Sizing
    placement: Placement
    routing: Routing
    target: Target
    # k copies of it side by side, sharing the host I/O (`wsecc.core.replicas`); the other fields
    # are copy 0's
    replicas: Replicas = field(default_factory=Replicas)

    @property
    def precision(self) -> Precision:
        return self.sizing.precision

    @property
    def chunk_tokens(self) -> int:
        return self.sizing.chunk_tokens

    def in_precision(self, precision: Precision) -> Program:
        """The same placement and routing in `precision` (each kernel re-costed at its placed
        shape); raises SizingError when a region no longer fits its SRAM."""
        if precision == self.precision:
            return self
        sizing = sizing_at(self.sizing, self.kg, self.target, precision)
        return replace(self, sizing=sizing)


@dataclass(frozen=True)
class Crossing:
    """A flow between two systems' programs: from kernel `src` of system `src_system` to kernel
    `dst` of system `dst_system`, over the systems' I/O."""

    src_system: int
    src: str
    dst_system: int
    dst: str
    bytes_per_sample: float


@dataclass(frozen=True)
class Systems:
    """A placed program over one or more systems: a `Program` per system, and the flows that
    cross between them. A model that fits a wafer is one system and no crossings; a program
    split over several systems (`wsecc.core.partition`, a pipeline over layer groups) is more of the
    same data."""

    programs: tuple[Program, ...]
    crossings: tuple[Crossing, ...] = ()
    # system i's program is the one placed for system placed_as[i] (systems whose layer groups
    # have the same shapes share one placement; empty: each its own)
    placed_as: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.programs:
            raise ValueError("Systems: at least one system's program")
        n = len(self.programs)
        if self.placed_as and (
            len(self.placed_as) != n
            or any(not 0 <= p <= i or self.placed_as[p] != p for i, p in enumerate(self.placed_as))
        ):
            raise ValueError(f"Systems: placed_as {self.placed_as} is not a placement per system")
        for c in self.crossings:
            if not (0 <= c.src_system < n and 0 <= c.dst_system < n):
                raise ValueError(
                    f"Systems: crossing {c.src} -> {c.dst} names a system not among {n}"
                )

    @classmethod
    def one(cls, program: Program) -> Systems:
        return cls((program,))

    @property
    def count(self) -> int:
        return len(self.programs)

    def placed(self, system: int) -> int:
        """The system whose placement system `system` uses (itself unless shared)."""
        return self.placed_as[system] if self.placed_as else system

    @property
    def only(self) -> Program:
        """The program of a one-system compile (every mode today); ValueError otherwise."""
        if len(self.programs) != 1:
            raise ValueError(f"a program over {len(self.programs)} systems has no single program")
        return self.programs[0]
