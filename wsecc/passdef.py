"""The pass interface: what a pass is (`Pass`), the IR `Level`s it requires and produces, the
`PassContext` it reads options from and records notes in, and the `PassError` it raises.

The passes (`passes/`, installed as `wsecc.passes`) import this module; the `PassManager`
(`wsecc.pm`) imports the passes' registry and this module. Neither imports the other's
importer, so the import graph has no cycle (issue 31). `wsecc.pm` re-exports these names."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from wsecc.errors import WseccError
from wsecc.ir.core import Graph
from wsecc.kernels.ir import KernelGraph

Product = Graph | KernelGraph


class PassError(WseccError):
    """A pass broke the IR or the numerics, or got a product below the level it requires."""


class Level(enum.Enum):
    """The IR levels a pass requires and produces, each with its verifier."""

    GRAPH = "graph"  # a wsecc IR Graph: every op has a rule, types agree (verify)
    FUSED = "fused"  # a Graph with no unfused math outside fused ops (verify, allow_unfused)
    KERNELS = "kernels"  # a KernelGraph (KernelGraph.verify)


@dataclass
class PassContext:
    """Options for the passes, and where a pass records why its rules did not fire."""

    options: dict[str, object] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def note(self, pass_name: str, text: str) -> None:
        self.notes.append(f"{pass_name}: {text}")


@dataclass(frozen=True)
class Pass:
    """A named, pure transformation with the IR level it requires and the one it produces."""

    name: str
    run: Callable[[Graph, PassContext], Product]
    requires: Level = Level.GRAPH
    produces: Level = Level.GRAPH

    def __call__(self, graph: Graph, ctx: PassContext) -> Product:
        return self.run(graph, ctx)
