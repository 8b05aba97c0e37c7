"""L0 analytical performance: throughput, latency, utilization and bounds of a compiled program.

The program is a pipeline of *stages*, each streaming every sample as n = cdiv(tokens_per_sample,
chunk_tokens) chunks:

    host-in ─▶ kernel ─▶ flow ─▶ kernel ─▶ ... ─▶ kernel ─▶ host-out

Kernels. Cycles per sample on the busiest PE of the *placed* rectangle (the placer may have taken
one of sizing's alternative shapes), from the kernel's cost model (`wsecc.kernels.costs`):
compute (SIMD rates), link (the region's busiest internal lane) and memory (SRAM ports, below).
    cycles_k = max(compute, link, memory); its bound is the resource that reaches it (ties go to
    compute, then fabric).
Memory ports are not in the cost models: their SIMD rates are the documented rates "when there are
no bank conflicts" (docs/hardware.md §3.1), with operands streaming through the ports. So memory cycles
= compute cycles x `memory_port_demand`, the busiest port's share at those rates (≤ 1 on WSE-2/3:
memory never binds there; it does on a target with narrow ports).

Flows. A routed flow (the kernel graph's flows between one pair of kernels, as `place` merges
them) moves bytes_per_sample over its lanes, each one link direction of L = link_bytes_per_cycle:
    cycles_f = edge_cycles(bytes_per_sample, lanes, L) = cdiv(bytes_per_sample, lanes x L)
(`wsecc.core.lanes`, the formula sizing charges a region's edges and the router counts lanes by)
and each chunk reaches the consumer latency_f = hops x hop_latency + 2 x ramp_latency cycles after
it left (on- and off-ramp; hops = the longest lane's unit steps).

Host I/O (`host_io=True`). Graph inputs arrive and outputs leave through the off-wafer channels at
target.io.offwafer_bytes_per_s per direction (our assumption: the 12 x 100 GbE links are full
duplex, so 1.2 Tb/s each way); each port's bytes cross once per sample (fan-out of an input to
several kernels happens on the wafer and is not routed). Host link latency is not modelled.
The k copies of a replicated program (`program.replicas`) share the channels: a copy's host I/O
gets 1/k of them, so every figure here is one copy's (the report's throughput is k times it).

Throughput. The pipeline's period is its slowest stage: stage_cycles = max over all stages;
samples/s = clock_hz / stage_cycles, tokens/s = samples/s x tokens_per_sample.

Latency (one sample through an empty pipeline, infinite buffers). Stage s takes t_s =
cycles_s / n per chunk; chunk j of s starts when s finished chunk j - 1 and every input has
delivered chunk j (the whole sample from a *barrier* input: the keys and values, and the mask, of
a non-causal attention, whose first query needs every key):
    finish_s[j] = max(finish_s[j - 1], max over inputs u of finish_u[j'] + latency_u) + t_s
The sample's latency is host-out's finish of chunk n - 1. Along a chain without barriers this is
    latency = sum_s (t_s + latency_s) + (n - 1) max_s t_s
the first chunk's trip along the critical path plus the other chunks through its slowest stage;
`critical_path` lists the stages that set it. A batch of B samples: latency + (B - 1) stage_cycles.

Utilization. flops_per_sample x samples/s over target.peak_flops_per_s(precision) (the whole
program rectangle), and over the PEs of the placed regions; vector ops count as flops, as in
`KernelGraph.flops_per_sample`. Never above 1 (checked).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from wsecc.core.lanes import edge_cycles
from wsecc.core.program import Program
from wsecc.errors import SimulationError
from wsecc.kernels import Kernel, KernelCost, KernelKind, kernel_cost
from wsecc.kernels.costs import cdiv
from wsecc.kernels.ir import elem_bytes
from wsecc.kernels.ir import precision as precision_info
from wsecc.place.problem import Placement
from wsecc.targets import Target
from wsecc.vocab import Precision

HOST_IN = "host-in"
HOST_OUT = "host-out"
KERNEL, FLOW, HOST = "kernel", "flow", "host"


def flow_name(src: str, dst: str) -> str:
    """The routed flow carrying the kernel graph's flows from `src` to `dst` (as `place` names
    it: `wsecc.place.from_kernels.placement_problem` merges them per kernel pair)."""
    return f"{src}->{dst}"


def memory_port_demand(target: Target, precision: Precision) -> float:
    """Busiest SRAM port's share of its bandwidth while a PE computes at the target's rates.

    FMAC path, f flops/cycle = f / 2 FMAs: each reads a weight (storage bytes) and an accumulator
    (accumulate bytes) and writes the accumulator; the activation is a register operand (a DSD
    scalar). Vector path, v ops/cycle: each op reads two operands and writes one, in the
    accumulate type (elementwise math runs in fp32 in mixed, target TOML [sources]). Ports:
    reads_per_cycle and writes_per_cycle of width_bits each (docs/hardware.md §4). Our model.
    """
    p = precision_info(precision)
    port = target.memory.width_bits / 8
    read_bw, write_bw = target.memory.reads_per_cycle * port, target.memory.writes_per_cycle * port
    fmas = target.flops_per_cycle[precision] / 2
    v = target.vector_ops_per_cycle[precision]
    fmac = max(fmas * (p.storage_bytes + p.accum_bytes) / read_bw, fmas * p.accum_bytes / write_bw)
    vector = max(2 * v * p.accum_bytes / read_bw, v * p.accum_bytes / write_bw)
    return max(fmac, vector)


# --- the pipeline model (shared with the event-level simulator) ----------------------------------


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: a kernel, a routed flow, or a host I/O direction."""

    name: str
    kind: str  # KERNEL, FLOW or HOST
    cycles_per_sample: int
    latency_cycles: int = 0  # from finishing a chunk to the consumer holding it (flows)
    bytes_per_sample: int = 0  # flows and host I/O
    lanes: int = 0  # flows
    hops: int = 0  # flows: the longest lane's unit steps
    # kernels whose chunks differ in work (causal attention): each chunk's cycles for L1 (they
    # sum to at least cycles_per_sample); empty: every chunk takes cycles_per_sample / n
    chunk_cycles: tuple[float, ...] = ()


@dataclass(frozen=True)
class Edge:
    """Data from stage `src` to stage `dst` (indices in `Pipeline.stages`)."""

    src: int
    dst: int
    bytes_per_sample: int
    barrier: bool = False  # dst needs the whole sample from this edge before its first chunk


@dataclass(frozen=True)
class KernelStage:
    """A kernel's cost on its placed rectangle."""

    name: str
    kind: str
    h: int
    w: int
    shape_from: str  # "sizing" or "alternative" (a shape sizing offered the placer)
    cost: KernelCost
    memory_cycles: int
    flops_per_sample: int
    crossing_cycles: int = 0  # other flows' lanes through the region, on its busiest link

    @property
    def link_cycles(self) -> int:
        """Its busiest lane's cycles, plus the lanes of other flows that cross its region on
        the busiest of those links (charged as if they met: the cost model does not say which
        of its links a lane crossing the region takes)."""
        return self.cost.link_cycles + self.crossing_cycles

    @property
    def cycles_per_sample(self) -> int:
        return max(self.cost.compute_cycles, self.link_cycles, self.memory_cycles)

    @property
    def bound(self) -> str:
        c = self.cost
        if self.memory_cycles > max(c.compute_cycles, self.link_cycles):
            return "memory"
        return "fabric" if self.link_cycles > c.compute_cycles else "compute"


@dataclass(frozen=True)
class Pipeline:
    """Stages in topological order (host-in, each kernel followed by its outgoing flows,
    host-out) and the edges between them; what L0 and L1 both simulate."""

    graph: str
    target: str
    precision: Precision
    clock_hz: float
    tokens_per_sample: int
    chunk_tokens: int
    n_chunks: int
    host_io: bool
    stages: tuple[Stage, ...]
    edges: tuple[Edge, ...]
    kernels: tuple[KernelStage, ...]
    flow_lanes: Mapping[str, tuple[tuple[tuple[int, int], ...], ...]]  # flow -> lane paths

    def index(self, name: str) -> int:
        for i, s in enumerate(self.stages):
            if s.name == name:
                return i
        raise KeyError(name)

    def chunk_cycles(self) -> np.ndarray:
        """Per-chunk time of every stage as L0 sees it (cycles_per_sample / n); L1 takes a
        kernel's own `Stage.chunk_cycles` where its chunks differ."""
        return np.array([s.cycles_per_sample for s in self.stages], float) / self.n_chunks

    def inputs(self) -> list[list[int]]:
        """Per stage, the indices of the edges into it."""
        ins: list[list[int]] = [[] for _ in self.stages]
        for i, e in enumerate(self.edges):
            ins[e.dst].append(i)
        return ins

    def outputs(self) -> list[list[int]]:
        """Per stage, the indices of the edges out of it."""
        outs: list[list[int]] = [[] for _ in self.stages]
        for i, e in enumerate(self.edges):
            outs[e.src].append(i)
        return outs

    def edge_name(self, e: Edge) -> str:
        return f"{self.stages[e.src].name} => {self.stages[e.dst].name}"


def crossing_cycles(
    placement: Placement,
    lanes: Mapping[str, list[tuple[tuple[int, int], ...]]],
    pair_bytes: Mapping[tuple[str, str], float],
    link_bytes_per_cycle: int,
) -> dict[str, int]:
    """Kernel -> the cycles per sample other flows' lanes add to the busiest link inside its
    region (both routers in it: the links the kernel's own partial sums and multicasts use; a
    lane only entering or leaving by the region's edge uses none). A lane carries its flow's
    bytes over its lane count; a flow's own source and destination regions are not crossed."""
    names = list(placement.rects)
    if not names:
        return {}
    index = {n: i for i, n in enumerate(names)}
    width = max(r.x + r.w for r in placement.rects.values()) + 1
    height = max(r.y + r.h for r in placement.rects.values()) + 1
    owner = np.full((height + 1, width + 1), -1, np.int64)  # region index per PE
    for i, r in enumerate(placement.rects.values()):
        owner[r.y : r.y + r.h, r.x : r.x + r.w] = i
    # every lane's points, one after another (flows in `pair_bytes` order, then lanes): a
    # routed GPT-2 small has a million steps, each a numpy element here, not a Python object
    paths: list[np.ndarray] = []
    per_lane: list[float] = []  # per path: its flow's bytes over its lanes, in link cycles
    own: list[tuple[int, int]] = []  # per path: its flow's source and destination regions
    for (src, dst), total in pair_bytes.items():
        lanes_of = lanes.get(flow_name(src, dst), [])
        if not lanes_of:
            continue
        ends = [index[n] for n in (src, dst) if n in index] or [-2]
        for path in lanes_of:
            paths.append(np.asarray(path, np.int64).reshape(-1, 2))
            per_lane.append(total / len(lanes_of) / link_bytes_per_cycle)
            own.append((ends[0], ends[-1]))
    if not paths:
        return {}
    p = np.clip(np.concatenate(paths), 0, [width, height])
    lane = np.repeat(np.arange(len(paths)), [len(q) for q in paths])[:-1]  # each step's path
    o0, o1 = owner[p[:-1, 1], p[:-1, 0]], owner[p[1:, 1], p[1:, 0]]
    ends_of = np.asarray(own, np.int64)[lane]
    inside = _steps_within_a_path(p, [len(q) for q in paths])
    inside &= (o0 == o1) & (o0 >= 0) & (o0 != ends_of[:, 0]) & (o0 != ends_of[:, 1])
    if not inside.any():
        return {}
    routers = (width + 1) * (height + 1)
    at = p[:, 1] * (width + 1) + p[:, 0]
    link = at[:-1] * routers + at[1:]  # a link is its (from-router, to-router) pair
    region, link, load = o0[inside], link[inside], np.asarray(per_lane)[lane[inside]]
    # one int64 key per (region, link), ordered as the pairs are: np.unique on a 1-D key, not
    # on rows (axis=0 sorts a structured view, ten times slower)
    assert len(names) * routers * routers < 2**62, "the fabric is too large for one key"
    key = region * (routers * routers) + link
    both, where = np.unique(key, return_inverse=True)
    per_link = np.bincount(where.ravel(), weights=load)  # a link's lanes' loads, in lane order
    busiest = np.zeros(len(names))
    np.maximum.at(busiest, both // (routers * routers), per_link)
    return {
        names[r]: max(0, math.ceil(float(busiest[r]) - 1e-9))
        for r in np.unique(both // (routers * routers)).tolist()
    }


def _steps_within_a_path(points: np.ndarray, lengths: list[int]) -> np.ndarray:
    """Per step between consecutive `points` (paths of `lengths` laid end to end), whether
    both ends are of one path (the step from a path's last point to the next path's first is
    not a step)."""
    last = np.cumsum(lengths) - 1  # each path's last point
    step = np.ones(max(len(points) - 1, 0), bool)
    step[last[(last >= 0) & (last < len(step))]] = False
    return step


def _causal_chunk_cycles(
    kernel: Kernel, cost: KernelCost, tokens: int, chunk: int
) -> tuple[float, ...]:
    """A causal attention's chunks grow: chunk k's queries attend to every key up to their own,
    so its share of the score work is its (query, key) pairs over the sample's (the cost model
    charges the pairs of the whole sample: `attention_cost`). Each chunk takes the larger of its
    compute and its share of the link time (the lanes carry equal chunks). () for every other
    kernel: its chunks are equal."""
    if kernel.kind is not KernelKind.ATTENTION or not kernel.params["causal"]:
        return ()
    n = -(-tokens // chunk)
    ends = np.minimum(np.arange(1, n + 1) * chunk, tokens)
    pairs = ends * (ends + 1) / 2 - np.concatenate([[0], ends[:-1] * (ends[:-1] + 1) / 2])
    compute = cost.compute_cycles * pairs / pairs.sum()
    return tuple(np.maximum(compute, cost.link_cycles / n).tolist())


def build_pipeline(program: Program, *, host_io: bool = True) -> Pipeline:
    """The stages and edges of the compiled program (see the module doc).

    Raises SimulationError when the products disagree: a kernel without a rectangle or sizing,
    a kernel-to-kernel flow without routed lanes (or lanes of an unknown flow), a kernel whose
    cost at sizing's own shape differs from sizing's (another target or precision).
    """
    kg, sizing, placement, routing, target = (
        program.kg, program.sizing, program.placement, program.routing, program.target
    )  # fmt: skip
    precision = program.precision
    if sizing.target != target.name:
        raise SimulationError(f"sizing is for {sizing.target}, not {target.name}")
    chunk = sizing.chunk_tokens
    n = cdiv(kg.tokens_per_sample, chunk)
    L = target.link_bytes_per_cycle
    demand = memory_port_demand(target, precision)
    kernel_names = {k.name for k in kg.kernels}
    ports = {p.name: p for p in (*kg.inputs, *kg.outputs)}

    def port_bytes(name: str) -> int:
        p = ports[name]
        return p.elems_per_sample * elem_bytes(p.elem_type, precision)

    lanes: dict[str, list[tuple[tuple[int, int], ...]]] = defaultdict(list)
    for ln in sorted(routing.lanes, key=lambda ln: (ln.flow, ln.index)):
        lanes[ln.flow].append(ln.path)

    kernels: list[KernelStage] = []
    for k in kg.kernels:
        rect = placement.rects.get(k.name)
        if rect is None:
            raise SimulationError(f"kernel {k.name!r} has no rectangle in the placement")
        try:
            ks = sizing.kernel(k.name)
        except KeyError:
            raise SimulationError(f"kernel {k.name!r} is not in the sizing") from None
        cost = kernel_cost(
            k, rect.h, rect.w, precision, target, chunk_tokens=sizing.chunk_tokens,
            single_buffered=sizing.single_buffered,
        )  # fmt: skip
        own_shape = (rect.h, rect.w) == (ks.h, ks.w)
        if own_shape and (cost.compute_cycles, cost.link_cycles) != (
            ks.compute_cycles,
            ks.link_cycles,
        ):
            raise SimulationError(
                f"kernel {k.name!r}: cost model gives {cost.compute_cycles}/{cost.link_cycles} "
                f"compute/link cycles on {rect.h}x{rect.w}, sizing says "
                f"{ks.compute_cycles}/{ks.link_cycles}"
            )
        kernels.append(
            KernelStage(
                name=k.name,
                kind=k.kind.value,
                h=rect.h,
                w=rect.w,
                shape_from="sizing" if own_shape else "alternative",
                cost=cost,
                memory_cycles=math.ceil(cost.compute_cycles * demand),
                flops_per_sample=k.flops_per_sample,
            )
        )

    # Kernel-to-kernel flows per pair (one routed flow each); port flows per kernel.
    pair_bytes: dict[tuple[str, str], int] = {}
    pair_barrier: dict[tuple[str, str], bool] = defaultdict(bool)
    host_in_bytes: dict[str, int] = defaultdict(int)
    host_in_barrier: dict[str, bool] = defaultdict(bool)
    host_out_bytes: dict[str, int] = defaultdict(int)
    barrier_kernels = {
        k.name for k in kg.kernels if k.kind is KernelKind.ATTENTION and not k.params["causal"]
    }
    for f in kg.flows:
        b = f.bytes_per_sample(precision)
        # keys, values and the mask enter attention on its W edge (wsecc.kernels.ir)
        barrier = f.dst in barrier_kernels and f.dst_edge == "W"
        if f.src in kernel_names and f.dst in kernel_names:
            if f.src == f.dst:
                continue  # stays in the region: no route
            pair_bytes[(f.src, f.dst)] = pair_bytes.get((f.src, f.dst), 0) + b
            pair_barrier[(f.src, f.dst)] |= barrier
        elif f.dst in kernel_names:
            host_in_bytes[f.dst] += b
            host_in_barrier[f.dst] |= barrier
        elif f.src in kernel_names:
            host_out_bytes[f.src] += b
    routed = {flow_name(s, d) for s, d in pair_bytes}
    if unknown := sorted(set(lanes) - routed):
        raise SimulationError(f"routing has lanes of flows the kernel graph lacks: {unknown[:3]}")
    crossing = crossing_cycles(placement, lanes, pair_bytes, L)
    kernels = [replace(k, crossing_cycles=crossing.get(k.name, 0)) for k in kernels]

    # the copies of a replicated program split the host channels (`wsecc.core.replicas`)
    io_bytes_per_cycle = target.io.offwafer_bytes_per_s / target.clock.hz / program.replicas.k

    def host_cycles(total: int) -> int:
        return math.ceil(total / io_bytes_per_cycle) if host_io else 0

    in_total = sum(port_bytes(p.name) for p in kg.inputs)
    out_total = sum(port_bytes(p.name) for p in kg.outputs)
    stages = [Stage(HOST_IN, HOST, host_cycles(in_total), bytes_per_sample=in_total)]
    edges: list[Edge] = []
    index = {HOST_IN: 0}
    pending_in: dict[str, list[tuple[int, int, bool]]] = defaultdict(list)  # (src, bytes, barrier)
    for name, b in host_in_bytes.items():
        pending_in[name].append((0, b, host_in_barrier[name]))
    out_of: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for (s, d), b in pair_bytes.items():
        out_of[s].append((d, b))
    for kst in kernels:
        i = len(stages)
        index[kst.name] = i
        chunks = _causal_chunk_cycles(kg.kernel(kst.name), kst.cost, kg.tokens_per_sample, chunk)
        stages.append(Stage(kst.name, KERNEL, kst.cycles_per_sample, chunk_cycles=chunks))
        edges += [Edge(src, i, b, barrier) for src, b, barrier in pending_in.pop(kst.name, [])]
        for dst, b in out_of[kst.name]:
            name = flow_name(kst.name, dst)
            paths = lanes.get(name)
            if not paths:
                raise SimulationError(f"flow {name!r} has no routed lanes")
            hops = max(len(p) - 1 for p in paths)
            j = len(stages)
            stages.append(
                Stage(
                    name,
                    FLOW,
                    edge_cycles(b, len(paths), L),
                    latency_cycles=hops * target.link.hop_latency_cycles
                    + 2 * target.link.ramp_latency_cycles,
                    bytes_per_sample=b,
                    lanes=len(paths),
                    hops=hops,
                )
            )
            edges.append(Edge(i, j, b))
            pending_in[dst].append((j, b, pair_barrier[(kst.name, dst)]))
    sink = len(stages)
    stages.append(Stage(HOST_OUT, HOST, host_cycles(out_total), bytes_per_sample=out_total))
    edges += [Edge(index[k], sink, b) for k, b in host_out_bytes.items()]
    return Pipeline(
        graph=kg.name,
        target=target.name,
        precision=precision,
        clock_hz=target.clock.hz,
        tokens_per_sample=kg.tokens_per_sample,
        chunk_tokens=chunk,
        n_chunks=n,
        host_io=host_io,
        stages=tuple(stages),
        edges=tuple(edges),
        kernels=tuple(kernels),
        flow_lanes={name: tuple(paths) for name, paths in lanes.items()},
    )


def fill_schedule(pipe: Pipeline) -> tuple[np.ndarray, np.ndarray]:
    """(ready, finish), each stages x n_chunks: when chunk j of a stage has all its inputs and
    when it is done, for one sample through an empty pipeline with infinite buffers (the
    recurrence of the module doc, vectorised over chunks)."""
    n, t = pipe.n_chunks, pipe.chunk_cycles()
    j = np.arange(n)
    ready = np.zeros((len(pipe.stages), n))
    finish = np.zeros((len(pipe.stages), n))
    for v, ins in enumerate(pipe.inputs()):
        for e in (pipe.edges[i] for i in ins):
            arrive = finish[e.src] + pipe.stages[e.src].latency_cycles
            ready[v] = np.maximum(ready[v], arrive[-1] if e.barrier else arrive)
        finish[v] = t[v] * (j + 1) + np.maximum.accumulate(ready[v] - j * t[v])
    return ready, finish


def critical_path(pipe: Pipeline, ready: np.ndarray, finish: np.ndarray) -> tuple[str, ...]:
    """Stages that set the latency, source first: walk back from host-out's last chunk, at each
    step to whichever of (the stage's previous chunk, its latest input) started the chunk."""
    ins = pipe.inputs()
    v, j = len(pipe.stages) - 1, pipe.n_chunks - 1
    path = [v]
    while True:
        if j > 0 and finish[v, j - 1] >= ready[v, j]:
            j -= 1
            continue
        if not ins[v]:
            break

        last = pipe.n_chunks - 1
        e = max(
            (pipe.edges[i] for i in ins[v]),
            key=lambda e: (
                finish[e.src, last if e.barrier else j] + pipe.stages[e.src].latency_cycles
            ),
        )
        v, j = e.src, (last if e.barrier else j)
        path.append(v)
    return tuple(pipe.stages[i].name for i in reversed(path))


# --- the result ------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelPerf:
    """A kernel on its placed region: cycles, the bound it hits, its roofline point."""

    name: str
    kind: str
    h: int
    w: int
    shape_from: str
    compute_cycles: int
    link_cycles: int  # its busiest lane, crossing lanes included
    crossing_cycles: int  # of link_cycles: other flows' lanes through its region
    memory_cycles: int
    cycles_per_sample: int
    bound: str  # "compute", "fabric" or "memory"
    busy: float  # cycles_per_sample / stage_cycles: its steady-state busy fraction
    flops_per_sample: int
    fabric_bytes_per_sample: int  # in + out bytes of the cost model
    intensity: float  # flops per fabric byte
    achieved_flops_per_s: float
    region_peak_flops_per_s: float  # h x w x flops_per_cycle x clock

    @property
    def pes(self) -> int:
        return self.h * self.w


@dataclass(frozen=True)
class FlowPerf:
    """A routed flow or a host I/O direction."""

    name: str
    kind: str  # FLOW or HOST
    bytes_per_sample: int
    lanes: int
    hops: int
    cycles_per_sample: int
    latency_cycles: int
    busy: float  # cycles_per_sample / stage_cycles: its links' steady-state utilization


@dataclass(frozen=True)
class PerfResult:
    """L0 figures of one compiled program; `to_json()` for reports, `summary()` for people."""

    graph: str
    target: str
    precision: Precision
    batch: int
    clock_hz: float
    chunk_tokens: int
    n_chunks: int
    host_io: bool
    tokens_per_sample: int
    stage_cycles: int
    samples_per_s: float
    tokens_per_s: float
    latency_cycles: float
    latency_s: float
    batch_latency_s: float
    bottleneck: str
    bottleneck_kind: str  # KERNEL, FLOW or HOST
    wafer_bottleneck: str  # the slowest kernel or flow (host I/O left out)
    wafer_bottleneck_kind: str  # KERNEL or FLOW
    wafer_samples_per_s: float
    critical_path: tuple[str, ...]
    flops_per_sample: int
    achieved_flops_per_s: float
    peak_flops_per_s: float  # the whole program rectangle
    utilization: float  # achieved / peak of the program rectangle
    pes_used: int
    utilization_used: float  # achieved / peak of the placed regions' PEs
    kernels: tuple[KernelPerf, ...]
    flows: tuple[FlowPerf, ...]

    def kernel(self, name: str) -> KernelPerf:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)

    def flow(self, name: str) -> FlowPerf:
        for f in self.flows:
            if f.name == name:
                return f
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["critical_path"] = list(self.critical_path)
        d["kernels"] = [asdict(k) for k in self.kernels]
        d["flows"] = [asdict(f) for f in self.flows]
        return d

    def summary(self) -> str:
        return (
            f"{self.graph} on {self.target} ({self.precision}): {self.samples_per_s:,.2f} "
            f"samples/s = {self.tokens_per_s:,.0f} tokens/s, bottleneck {self.bottleneck} "
            f"({self.bottleneck_kind}, {self.stage_cycles:,} cycles/sample); latency "
            f"{self.latency_s * 1e6:,.1f} us (batch {self.batch}: "
            f"{self.batch_latency_s * 1e6:,.1f} us); utilization {self.utilization:.1%} of the "
            f"fabric, {self.utilization_used:.1%} of the {self.pes_used:,} PEs used"
        )


def simulate_l0(program: Program, batch: int = 1, *, host_io: bool = True) -> PerfResult:
    """The analytical model of the module doc, at the program's precision and chunking.

    Raises SimulationError if the products disagree (see `build_pipeline`); asserts that no
    kernel and neither utilization exceeds 100%.
    """
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    return l0_result(build_pipeline(program, host_io=host_io), program.target, batch)


def l0_result(pipe: Pipeline, target: Target, batch: int = 1) -> PerfResult:
    """L0's figures for a built pipeline (`simulate_l0` = `build_pipeline` + this)."""
    hz = pipe.clock_hz
    f = target.flops_per_cycle[pipe.precision]
    slowest = max(pipe.stages, key=lambda s: s.cycles_per_sample)
    wafer = max((s for s in pipe.stages if s.kind != HOST), key=lambda s: s.cycles_per_sample)
    T = slowest.cycles_per_sample
    samples_per_s = hz / T
    ready, finish = fill_schedule(pipe)
    latency = float(finish[-1, -1])
    kernels = []
    for k in pipe.kernels:
        fabric_bytes = k.cost.in_bytes_per_sample + k.cost.out_bytes_per_sample
        achieved = k.flops_per_sample * samples_per_s
        peak = k.h * k.w * f * hz
        assert achieved <= peak * (1 + 1e-9), (
            f"kernel {k.name!r} achieves {achieved:.4g} flop/s, above its region's peak {peak:.4g}"
        )
        kernels.append(
            KernelPerf(
                name=k.name,
                kind=k.kind,
                h=k.h,
                w=k.w,
                shape_from=k.shape_from,
                compute_cycles=k.cost.compute_cycles,
                link_cycles=k.link_cycles,
                crossing_cycles=k.crossing_cycles,
                memory_cycles=k.memory_cycles,
                cycles_per_sample=k.cycles_per_sample,
                bound=k.bound,
                busy=k.cycles_per_sample / T,
                flops_per_sample=k.flops_per_sample,
                fabric_bytes_per_sample=fabric_bytes,
                intensity=k.flops_per_sample / fabric_bytes if fabric_bytes else math.inf,
                achieved_flops_per_s=achieved,
                region_peak_flops_per_s=peak,
            )
        )
    flows = tuple(
        FlowPerf(
            s.name,
            s.kind,
            s.bytes_per_sample,
            s.lanes,
            s.hops,
            s.cycles_per_sample,
            s.latency_cycles,
            s.cycles_per_sample / T,
        )
        for s in pipe.stages
        if s.kind != KERNEL
    )
    flops = sum(k.flops_per_sample for k in pipe.kernels)
    achieved = flops * samples_per_s
    pes_used = sum(k.h * k.w for k in pipe.kernels)
    peak = target.peak_flops_per_s(pipe.precision)
    utilization, used = achieved / peak, achieved / (pes_used * f * hz)
    assert utilization <= 1 + 1e-9 and used <= 1 + 1e-9, (
        f"utilization above 100%: {utilization:.4f} of the fabric, {used:.4f} of the PEs used"
    )
    return PerfResult(
        graph=pipe.graph,
        target=pipe.target,
        precision=pipe.precision,
        batch=batch,
        clock_hz=hz,
        chunk_tokens=pipe.chunk_tokens,
        n_chunks=pipe.n_chunks,
        host_io=pipe.host_io,
        tokens_per_sample=pipe.tokens_per_sample,
        stage_cycles=T,
        samples_per_s=samples_per_s,
        tokens_per_s=samples_per_s * pipe.tokens_per_sample,
        latency_cycles=latency,
        latency_s=latency / hz,
        batch_latency_s=(latency + (batch - 1) * T) / hz,
        bottleneck=slowest.name,
        bottleneck_kind=slowest.kind,
        wafer_bottleneck=wafer.name,
        wafer_bottleneck_kind=wafer.kind,
        wafer_samples_per_s=hz / wafer.cycles_per_sample,
        critical_path=critical_path(pipe, ready, finish),
        flops_per_sample=flops,
        achieved_flops_per_s=achieved,
        peak_flops_per_s=peak,
        utilization=utilization,
        pes_used=pes_used,
        utilization_used=used,
        kernels=tuple(kernels),
        flows=flows,
    )
