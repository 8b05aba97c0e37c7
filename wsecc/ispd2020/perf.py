"""Contest kernels as `wsecc.kernels` sees them, and their solution-format arguments.

The cost model itself — `convperf`, `dblockperf`, `cblockperf`, our conventions for the
handout's open points — is the `conv`/`dblock`/`cblock` kinds' model in `wsecc.kernels.conv`
(re-exported here). `KernelSpec` adds what only the contest needs: the formal arguments a
solution line repeats, parameter bounds, and reading parameters back from a solution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from wsecc.ispd2020.kgraph import KGraph, KGraphError, KNode, kernel_sequence
from wsecc.kernels import Flow, Kernel, KernelGraph, KernelKind, Port
from wsecc.kernels.conv import (
    BLOCK_ARGS,
    CONV_ARGS,
    Conv,
    ExecParams,
    Perf,
    blockperf,
    cblock_convs,
    cblockperf,
    conv_memory,
    conv_time,
    convperf,
    convs_of,
    dblock_convs,
    dblockperf,
)

__all__ = [
    "Conv",
    "ExecParams",
    "KernelSpec",
    "Perf",
    "blockperf",
    "cblock_convs",
    "cblockperf",
    "conv_memory",
    "conv_time",
    "convperf",
    "dblock_convs",
    "dblockperf",
    "kernel_graph",
    "kernel_params",
    "kernel_spec",
    "to_kernel",
]


@dataclass(frozen=True)
class KernelSpec:
    """A kernel to size: its kind, formal arguments, and the convs its cost is made of.

    `formal` is what the solution line repeats before the parameters: (H, W, C, K, R, S, T, U)
    for a conv, (H, W, F) for a block.
    """

    name: str
    kind: str
    formal: tuple[int, ...]
    convs: tuple[Conv, ...]

    @property
    def H(self) -> int:
        return self.formal[0]

    @property
    def W(self) -> int:
        return self.formal[1]

    def perf(self, p: ExecParams) -> Perf:
        return blockperf(self.convs, p.h, p.w, p.c, p.k)

    def param_errors(self, p: ExecParams) -> list[str]:
        """Why `p` is not a legal parameter choice (positive integers within our bounds)."""
        n = len(self.convs)
        if len(p.c) != n or len(p.k) != n:
            return [f"{self.name}: {self.kind} needs {n} c' and {n} k' values"]
        errors = []
        bounds = [("h'", p.h, self.H), ("w'", p.w, self.W)]
        for i, (conv, c, k) in enumerate(zip(self.convs, p.c, p.k, strict=True), start=1):
            tag = "" if n == 1 else str(i)
            bounds += [(f"c{tag}'", c, conv.C), (f"k{tag}'", k, conv.K)]
        for label, value, upper in bounds:
            if not isinstance(value, int) or not 1 <= value <= upper:
                errors.append(f"{self.name}: {label}={value} is not an integer in [1, {upper}]")
        return errors

    def solution_args(self, p: ExecParams) -> tuple[int, ...]:
        """Numbers inside `kind( ... )` of a solution line: conv `H W C K R S T U h w c k`,
        blocks `H W F h w c1.. k1..`."""
        return self.formal + (p.h, p.w) + p.c + p.k

    def params_from_args(self, args: tuple[int, ...]) -> ExecParams:
        """Inverse of `solution_args`; raises ValueError if the formal part does not match."""
        n, f = len(self.convs), len(self.formal)
        if len(args) != f + 2 + 2 * n:
            raise ValueError(f"{self.kind} takes {f + 2 + 2 * n} numbers, got {len(args)}")
        if args[:f] != self.formal:
            raise ValueError(
                f"formal arguments {' '.join(map(str, args[:f]))} do not match the kgraph's "
                f"{' '.join(map(str, self.formal))}"
            )
        rest = args[f:]
        return ExecParams(rest[0], rest[1], tuple(rest[2 : 2 + n]), tuple(rest[2 + n :]))


def kernel_spec(node: KNode) -> KernelSpec:
    """The cost model of a kgraph kernel node."""
    if not node.is_kernel:
        raise ValueError(f"{node.kind}[{node.index}] is not a kernel")
    p = kernel_params(node)
    formal_keys = ("H", "W", "C", "K", "R", "S", "T", "U") if node.kind == "conv" else BLOCK_ARGS
    return KernelSpec(
        node.name, node.kind, tuple(p[k] for k in formal_keys), convs_of(node.kind, p)
    )


def kernel_params(node: KNode) -> dict[str, int]:
    """A kgraph kernel node's formal arguments as `wsecc.kernels` params (conv: H W R S C K T U;
    blocks: H W F — the kgraph spells them h, w, f)."""
    if node.kind == "conv":
        return {k: node.arg(k) for k in CONV_ARGS}
    return {k: node.arg(k.lower()) for k in BLOCK_ARGS}


def to_kernel(node: KNode) -> Kernel:
    """A kgraph kernel node as a `wsecc.kernels.Kernel` of kind conv, dblock or cblock."""
    return Kernel(
        node.name, KernelKind(node.kind), kernel_params(node), (f"{node.kind}[{node.index}]",)
    )


def kernel_graph(graph: KGraph) -> KernelGraph:
    """The kgraph as a `KernelGraph` the shared sizing and placer take: its kernels in
    `kernel_sequence` order, input/output nodes as ports, one flow per edge (elements = the
    product of its shape; the contest does not weigh them). A kernel the file leaves without
    an incoming or outgoing edge gets a port of its own (`kN.in` / `kN.out`): the contest scores
    kernel-to-kernel edges only. Raises KGraphError (file:line) on an edge that closes a cycle."""
    order = kernel_sequence(graph)
    pos = {n.index: i for i, n in enumerate(order)}
    nodes = {n.index: n for n in graph.nodes}
    kernels = [to_kernel(n) for n in order]
    inputs = [Port(n.name, max(1, math.prod(n.dims))) for n in graph.nodes if n.kind == "input"]
    outputs = [Port(n.name, max(1, math.prod(n.dims))) for n in graph.nodes if n.kind == "output"]
    flows = []
    for e in graph.edges:
        src, dst = nodes[e.src], nodes[e.dst]
        if src.is_kernel and dst.is_kernel and pos[e.src] >= pos[e.dst]:
            raise KGraphError(
                f"{graph.source}:{e.line}: edge {src.kind}[{src.index}] -> {dst.kind}[{dst.index}] "
                "closes a cycle; expected an acyclic kernel graph (a pipeline)"
            )
        flows.append(
            Flow(src.name, dst.name, max(1, math.prod(e.shape)), src_edge="E", dst_edge="W")
        )
    fed = {f.dst for f in flows}
    feeding = {f.src for f in flows}
    for k in kernels:
        if k.name not in fed:
            inputs.append(Port(f"{k.name}.in", 1))
            flows.append(Flow(f"{k.name}.in", k.name, 1, src_edge="E", dst_edge="W"))
        if k.name not in feeding:
            outputs.append(Port(f"{k.name}.out", 1))
            flows.append(Flow(k.name, f"{k.name}.out", 1, src_edge="E", dst_edge="W"))
    return KernelGraph(
        graph.test or graph.source, 1, tuple(kernels), tuple(flows), tuple(inputs), tuple(outputs)
    )
