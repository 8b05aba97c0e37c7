"""Kernel-level IR: kernels (work placed on one region of PEs) and flows (activations between them).

A `KernelGraph` is what lowering produces from the fused tensor Graph and what sizing, placement
and routing consume. Everything is *per sample*: one sample is one sequence of
`tokens_per_sample` tokens; a batch is a stream of samples through the pipeline, so the batch size
changes throughput and latency but no kernel's shape, work or SRAM.

Kernels
    `Kernel(name, kind, params, provenance)`. `kind` is a `KernelKind`; `params` holds plain
    ints/floats/bools/strs whose names and types are fixed by the kind's definition
    (`wsecc.kernels.kinds`, which the verifier checks against). Work (`flops_per_sample`) and
    resident weights (`weight_elems`) are derived from the params by the same definition, so lowering states shapes once and every consumer
    agrees on the numbers. Weight *bytes* depend on the precision chosen at sizing:
    `kernel.weight_bytes(Precision.MIXED)`.

Flows
    `Flow(src, dst, elems_per_sample, elem_type, src_edge, dst_edge, name)`. `elem_type` is `act`
    (an activation, stored in the precision's storage type) or a fixed type (`i32`, `f32`, `f16`),
    so `flow.bytes_per_sample(precision)` is exact. Token ids travel as `i32`: vocabularies are
    far below 2**31, so the ONNX int64 ids are narrowed on the host.

Region edges (`src_edge`, `dst_edge` in N/S/E/W)
    Which edge of its region a flow leaves or enters, so the router knows where lanes start and
    end. Each kind's definition has a default pair (its cost model's docstring says why):
    matmul-like kinds (linear, lm_head) and embedding take input on W (K split over rows) and emit
    on S (N split over columns); row-wise kinds (layernorm, softmax, elementwise) take input on N
    and emit on S (the feature dim split over columns); attention takes queries on N, keys/values on
    W, and emits on S; the contest's conv, dblock and cblock take input on W and emit on E.
    Graph inputs enter on the W edge and outputs leave on the E edge of the program rectangle:
    the host-I/O channels sit on the West and East edges (docs/hardware.md §7).
    `Flow.between` fills the defaults; lowering overrides `dst_edge` where a second input has its
    own edge (attention K/V enter on W; a linear's residual enters on S, where its outputs are
    finished).

Graph inputs and outputs
    `Port`s, named like kernels (all names distinct). A flow's `src` is a kernel or an input port;
    its `dst` a kernel or an output port. In `as_networkx()` ports are nodes with `role` 'input' or
    'output'; kernels have role 'kernel'.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from wsecc.errors import WseccError
from wsecc.kernels.kind import PARAM_CHECKS, Params
from wsecc.kernels.registry import KINDS
from wsecc.vocab import Precision

if TYPE_CHECKING:
    import networkx as nx

    from wsecc.kernels.kind import KindDef

Scalar = int | float | bool | str
EDGES: tuple[str, ...] = ("N", "S", "E", "W")


class KernelGraphError(WseccError, ValueError):
    """A malformed kernel graph; the message names the offending kernel, port or flow."""


class KernelKind(enum.StrEnum):
    LINEAR = "linear"
    ATTENTION = "attention"
    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"
    GATED_LINEAR = "gated_linear"
    MOE = "moe"
    SOFTMAX = "softmax"
    ELEMENTWISE = "elementwise"
    EMBEDDING = "embedding"
    LM_HEAD = "lm_head"
    GENERIC = "generic"
    # the ISPD 2020 contest's kernels (wsecc.kernels.conv): a convolution and ResNet blocks
    CONV = "conv"
    DBLOCK = "dblock"
    CBLOCK = "cblock"


# --- precisions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class NumberFormat:
    """How a precision (`wsecc.vocab.Precision`) stores tensors and accumulates sums, in bytes
    per element."""

    name: Precision
    storage_bytes: int
    accum_bytes: int


PRECISION_TABLE: Mapping[Precision, NumberFormat] = MappingProxyType(
    {
        Precision.FP32: NumberFormat(Precision.FP32, storage_bytes=4, accum_bytes=4),
        Precision.MIXED: NumberFormat(Precision.MIXED, storage_bytes=2, accum_bytes=4),
        Precision.FP16: NumberFormat(Precision.FP16, storage_bytes=2, accum_bytes=2),
    }
)


def precision(name: Precision) -> NumberFormat:
    if name not in PRECISION_TABLE:
        raise ValueError(
            f"unknown precision {name!r} (expected one of {', '.join(PRECISION_TABLE)})"
        )
    return PRECISION_TABLE[name]


ELEM_TYPE_BYTES: Mapping[str, int | None] = MappingProxyType(
    {"act": None, "i32": 4, "f32": 4, "f16": 2}  # None: the precision's storage type
)


def elem_bytes(elem_type: str, precision_name: Precision) -> int:
    fixed = ELEM_TYPE_BYTES[elem_type]
    return precision(precision_name).storage_bytes if fixed is None else fixed


# --- the IR -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kernel:
    """One unit of work that gets its own region. `params` is read-only after construction."""

    name: str
    kind: KernelKind
    params: Params = field(hash=False)
    provenance: tuple[str, ...] = ()  # the ONNX node names it came from

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", KernelKind(self.kind))
        params = dict(self.params)
        if self.kind in KINDS:
            params = {**KINDS[self.kind].defaults(params), **params}
        object.__setattr__(self, "params", MappingProxyType(params))
        object.__setattr__(self, "provenance", tuple(self.provenance))

    @property
    def spec(self) -> KindDef:
        """Its kind's definition (`wsecc.kernels.kinds`)."""
        return KINDS[self.kind]

    @property
    def flops_per_sample(self) -> int:
        return int(self.spec.flops(self.params))

    @property
    def weight_elems(self) -> int:
        """Weight elements resident in this kernel's region (tied tables included: see
        `KernelGraph.unique_weight_elems`)."""
        return int(self.spec.weight_elems(self.params))

    def weight_bytes(self, precision_name: Precision) -> int:
        return self.weight_elems * precision(precision_name).storage_bytes

    def describe(self) -> str:
        return f"kernel {self.name!r} ({self.kind.value})"

    def verify(self) -> None:
        """Raise KernelGraphError naming this kernel if its params do not match its kind."""
        if not self.name:
            raise KernelGraphError(f"kernel with empty name ({self.kind.value})")
        expected = self.spec.params
        for key in sorted(expected.keys() - self.params.keys()):
            raise KernelGraphError(f"{self.describe()}: missing param {key!r}")
        for key in sorted(self.params.keys() - expected.keys()):
            raise KernelGraphError(f"{self.describe()}: unknown param {key!r}")
        for key, tag in expected.items():
            ok, word = PARAM_CHECKS[tag]
            if not ok(self.params[key]):
                raise KernelGraphError(
                    f"{self.describe()}: param {key!r} must be {word}, got {self.params[key]!r}"
                )
        reason = self.spec.check(self.params)
        if reason:
            raise KernelGraphError(f"{self.describe()}: {reason}")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind.value,
            "params": dict(self.params),
            "provenance": list(self.provenance),
        }

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Kernel:
        return Kernel(d["name"], KernelKind(d["kind"]), d["params"], tuple(d.get("provenance", ())))


@dataclass(frozen=True)
class Port:
    """A graph input or output: what the host sends or receives per sample."""

    name: str
    elems_per_sample: int
    elem_type: str = "act"


@dataclass(frozen=True)
class Flow:
    """Activations moving from `src` (kernel or input port) to `dst` (kernel or output port)."""

    src: str
    dst: str
    elems_per_sample: int
    elem_type: str = "act"
    src_edge: str = "S"
    dst_edge: str = "W"
    name: str = ""  # the tensor it carries, for messages

    def bytes_per_sample(self, precision_name: Precision) -> int:
        return self.elems_per_sample * elem_bytes(self.elem_type, precision_name)

    @staticmethod
    def between(
        src: Kernel | Port,
        dst: Kernel | Port,
        elems_per_sample: int,
        *,
        elem_type: str = "act",
        name: str = "",
        dst_edge: str | None = None,
    ) -> Flow:
        """A flow with the edges of its endpoints' kinds (ports: in on W, out on E)."""
        src_edge = src.spec.out_edge if isinstance(src, Kernel) else "W"
        default_dst = dst.spec.in_edge if isinstance(dst, Kernel) else "E"
        return Flow(
            src.name, dst.name, elems_per_sample, elem_type, src_edge, dst_edge or default_dst, name
        )


@dataclass(frozen=True)
class KernelGraph:
    """Kernels in topological order, the flows between them, and the graph's ports."""

    name: str
    tokens_per_sample: int
    kernels: tuple[Kernel, ...]
    flows: tuple[Flow, ...]
    inputs: tuple[Port, ...] = ()
    outputs: tuple[Port, ...] = ()

    def __post_init__(self) -> None:
        for attr in ("kernels", "flows", "inputs", "outputs"):
            object.__setattr__(self, attr, tuple(getattr(self, attr)))

    def kernel(self, name: str) -> Kernel:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)

    @property
    def flops_per_sample(self) -> int:
        return sum(k.flops_per_sample for k in self.kernels)

    @property
    def train_flops_per_sample(self) -> int:
        """Forward and backward work of a training step per sample (each kind's `GradRule`);
        ValueError naming the kinds that have none."""
        untrainable = sorted({k.kind.value for k in self.kernels if k.spec.grad is None})
        if untrainable:
            raise ValueError(f"{', '.join(untrainable)} kernels have no gradient rule")
        return sum(
            k.flops_per_sample + int(g.flops(k.params))
            for k in self.kernels
            if (g := k.spec.grad) is not None
        )

    def unique_weight_elems(self) -> int:
        """Model parameters, a tied LM head counted once (its table is the embedding's).
        Each region still holds its own copy: see `Kernel.weight_elems`."""
        tied = KernelKind.LM_HEAD
        return sum(
            k.weight_elems for k in self.kernels if not (k.kind is tied and k.params["tied"])
        )

    def verify(self) -> None:
        """Raise KernelGraphError naming the first offending kernel, port or flow."""
        if type(self.tokens_per_sample) is not int or self.tokens_per_sample <= 0:
            raise KernelGraphError(
                f"graph {self.name!r}: tokens_per_sample must be a positive int, "
                f"got {self.tokens_per_sample!r}"
            )
        if not self.kernels:
            raise KernelGraphError(
                f"graph {self.name!r} has no kernels: it computes nothing (only layout ops "
                "or constants), so there is nothing to place; check the export"
            )
        seen: set[str] = set()
        names = [p.name for p in self.inputs] + [k.name for k in self.kernels]
        for name in names + [p.name for p in self.outputs]:
            if name in seen:
                raise KernelGraphError(f"duplicate name {name!r}")
            seen.add(name)
        for k in self.kernels:
            k.verify()
        for port in (*self.inputs, *self.outputs):
            if port.elem_type not in ELEM_TYPE_BYTES or port.elems_per_sample <= 0:
                raise KernelGraphError(f"port {port.name!r}: bad elem_type or size")
        order = {k.name: i for i, k in enumerate(self.kernels)}
        sources = {p.name: -1 for p in self.inputs} | order
        sinks = order | {p.name: len(order) for p in self.outputs}
        for f in self.flows:
            self._verify_flow(f, sources, sinks)
        used_in = {f.dst for f in self.flows}
        used_out = {f.src for f in self.flows}
        for k in self.kernels:
            if k.name not in used_in:
                raise KernelGraphError(f"{k.describe()}: no incoming flow")
            if k.name not in used_out:
                raise KernelGraphError(f"{k.describe()}: no outgoing flow")
        for port in self.outputs:
            if port.name not in used_in:
                raise KernelGraphError(f"output {port.name!r}: no flow reaches it")

    @staticmethod
    def _verify_flow(f: Flow, sources: Mapping[str, int], sinks: Mapping[str, int]) -> None:
        what = f"flow {f.src!r} -> {f.dst!r}"
        if f.src not in sources:
            raise KernelGraphError(f"{what}: unknown source {f.src!r}")
        if f.dst not in sinks:
            raise KernelGraphError(f"{what}: unknown destination {f.dst!r}")
        if sources[f.src] >= sinks[f.dst]:
            raise KernelGraphError(f"{what}: goes backwards (kernels must be in topological order)")
        if type(f.elems_per_sample) is not int or f.elems_per_sample <= 0:
            raise KernelGraphError(f"{what}: elems_per_sample must be a positive int")
        if f.elem_type not in ELEM_TYPE_BYTES:
            raise KernelGraphError(f"{what}: unknown elem_type {f.elem_type!r}")
        if f.src_edge not in EDGES or f.dst_edge not in EDGES:
            raise KernelGraphError(f"{what}: edges must be one of N, S, E, W")

    def as_networkx(self) -> nx.MultiDiGraph:
        """Nodes: kernels (attr `kernel`) and ports (attr `port`), each with `role`; one edge
        per flow (attr `flow`), keyed by the flow's index."""
        import networkx as nx  # 0.1 s to import, and a compile never needs it

        g = nx.MultiDiGraph(name=self.name)
        for p in self.inputs:
            g.add_node(p.name, role="input", port=p)
        for k in self.kernels:
            g.add_node(k.name, role="kernel", kernel=k)
        for p in self.outputs:
            g.add_node(p.name, role="output", port=p)
        for i, f in enumerate(self.flows):
            g.add_edge(f.src, f.dst, key=i, flow=f)
        return g

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "tokens_per_sample": self.tokens_per_sample,
            "kernels": [k.to_json() for k in self.kernels],
            "flows": [asdict(f) for f in self.flows],
            "inputs": [asdict(p) for p in self.inputs],
            "outputs": [asdict(p) for p in self.outputs],
        }

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> KernelGraph:
        """Load and verify."""
        kg = KernelGraph(
            name=d["name"],
            tokens_per_sample=d["tokens_per_sample"],
            kernels=tuple(Kernel.from_json(k) for k in d["kernels"]),
            flows=tuple(Flow(**f) for f in d["flows"]),
            inputs=tuple(Port(**p) for p in d.get("inputs", ())),
            outputs=tuple(Port(**p) for p in d.get("outputs", ())),
        )
        kg.verify()
        return kg
