"""Training: a step derived from the forward kernel graph, run pipelined or weight-streaming.

A training step over a global batch of B samples runs every kernel's forward, its backward (its
kind's `GradRule`: the gradient of its inputs and weights, and the activations its forward keeps
for it), the loss's gradient (in the LM head's rule) and an AdamW update. The tensor-level
gradient rules these count are the `vjp`s of `wsecc.ir.rules`, checked numerically by
`--validate`. Two executions (`wsecc.vocab.Execution`), both costed with the kinds' own cost
models on the target; the one constant fitted to a measurement is the step overhead (below):

Pipelined — every kernel's forward and backward on its own region, weights, gradients and
optimizer state resident (`TrainCosts`: compute grows by backward/forward flops, weights by the
state beside them, buffers by the activations of the samples in flight between a kernel's
forward and its backward). Sizing balances those costs; with stage time T (seconds per sample),
n kernels and c of the S tokens per chunk::

    in flight at kernel i = ceil(2 (n - i) c / S) + 2      samples between its forward and backward
    step = B_sys T  +  2 n (c / S) T  +  update  +  reduce  +  sync  +  overhead
           stream     fill and drain    AdamW on    N > 1: every gradient up SwarmX and the
                      once per step     the wafer   reduced ones back (`SwarmX`), then the tree's
                                                    latency both ways

Weight streaming — units (the embedding, each layer, the head) run one at a time on the whole
wafer, forward through every unit, then backward in reverse; each unit is sized alone on the
whole wafer, its weights streamed in from external memory for the forward and again for the
backward, its gradients streamed out (the optimizer runs off the wafer). What the backward
pass needs stays on the wafer — every activation, or only each unit's inputs with the unit's
forward recomputed in its backward (rho_u + 1 below), whichever runs faster — and bounds the
micro-batch m; the system batch is A micro-batches (gradient accumulation). With T_u a unit's stage time, rho_u its backward/forward
flops, W_u its weight bytes and IO the system I/O bandwidth (shared by both directions)::

    m_max = floor((usable PEs x SRAM budget - largest unit's working set) / kept bytes per sample)
    forward_u  = max((m + fill_u) T_u, W_u / IO)          fetching the next unit overlaps compute
    backward_u = max(rho_u (m + fill_u) T_u, 2 W_u / IO)  weights in again, gradients out
                                                          (rho_u + 1 when recomputing)
    step = A sum_u (forward_u + backward_u) + W_first / IO (+ sync: N > 1, `SwarmX`)

Both steps add the target's `system.step_overhead_s`, what a step costs outside the wafer's work
and the weight streaming: it has no public figure, and is the one constant fitted to a published
measurement (one row, named in the target file).

`--systems N` is data parallel: each system runs B / N samples; the batch given is global.
What N > 1 systems add is SwarmX's (`SwarmX`, `swarmx`): the tree between external memory and
the systems broadcasts weights down and reduces gradients up, each system's stream at SwarmX's
line rate (IO above becomes min(IO, SwarmX's)), and the step waits once for its last gradients
to go up the tree and its first weights (pipelined: the reduced gradients) to come down,
2 x depth x hop. The per-hop latency is an assumption (no public figure), named in the target.
"""

from __future__ import annotations

import hashlib
import json
import textwrap
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from wsecc.core.layers import find_layers
from wsecc.errors import WseccError
from wsecc.kernels import KernelGraph, Sizing, size_regions
from wsecc.kernels.conv import cdiv
from wsecc.kernels.costs import TrainCosts
from wsecc.kernels.ir import Flow, Kernel, Port, elem_bytes, precision
from wsecc.kernels.kind import TRANSCENDENTAL_OPS, GradRule
from wsecc.kernels.sizing import SizingError
from wsecc.targets import Target
from wsecc.vocab import Execution, Precision

ADAMW_OPS = 3 + 4 + TRANSCENDENTAL_OPS + 1 + TRANSCENDENTAL_OPS + 3 + 1
"""AdamW per parameter: m = b1 m + (1 - b1) g (3), v = b2 v + (1 - b2) g^2 (4), sqrt(v) (8),
+ eps (1), m / (...) (8), w -= lr (u + wd w) (3), the master copy rounded to storage (1) = 28
vector ops (the bias corrections fold into lr once per step)."""

MOMENT_BYTES = 4
"""AdamW's two moments are kept in fp32 in every precision."""

BATCH_SEARCH = 64
"""A chosen batch is the smallest whose throughput is within 1% of the best over at most this
many candidates (multiples of the largest micro-batch, or powers of two)."""

MAX_CHOSEN_BATCH = 16_384
"""The largest batch per system a chosen batch may be: the largest the published CS-2 runs
used (Zhang et al. 2023, Table IV: BERT-base and BERT-large fine-tuned on SST-2 at batch 128 to
16,384; reference/measurements.md §2). The smallest published is 27 per CS-2 (GenSLM, §1).
A tiny model's micro-batch can be far larger (millions of samples of a 2-layer model fit the
wafer's SRAM): a batch nobody would run, so the search stops here. A batch given with --batch
is taken as given."""

PIPELINED_BATCHES = MAX_CHOSEN_BATCH.bit_length()
"""Pipelined candidates for a chosen batch: N x 2^j samples, 2^j <= MAX_CHOSEN_BATCH."""

FILL = 0.85
"""Share of the fabric a training program's regions may take (as inference sizing's first fill)."""


class TrainError(WseccError):
    """A model that cannot be trained on this target as asked (one line)."""


def state_bytes(precision_name: Precision) -> int:
    """Bytes beside each weight in training: its gradient accumulator (accumulate type), two
    fp32 moments, and an fp32 master copy when weights are stored in 16 bits."""
    fmt = precision(precision_name)
    master = 4 if fmt.storage_bytes < 4 else 0
    return fmt.accum_bytes + 2 * MOMENT_BYTES + master


@dataclass(frozen=True)
class UnitTime:
    """One streamed unit's part of a micro-batch (weight streaming), seconds."""

    name: str
    kernels: int
    weight_bytes: int
    pes_used: int
    forward_s: float  # compute of the forward, fill included
    backward_s: float
    weights_in_s: float  # the forward's fetch
    backward_io_s: float  # weights in again and gradients out

    @property
    def forward_bound(self) -> str:
        return "compute" if self.forward_s >= self.weights_in_s else "system I/O"

    @property
    def backward_bound(self) -> str:
        return "compute" if self.backward_s >= self.backward_io_s else "system I/O"

    @property
    def seconds(self) -> float:
        return max(self.forward_s, self.weights_in_s) + max(self.backward_s, self.backward_io_s)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kernels": self.kernels,
            "weight_bytes": self.weight_bytes,
            "pes_used": self.pes_used,
            "forward_s": self.forward_s,
            "backward_s": self.backward_s,
            "weights_in_s": self.weights_in_s,
            "backward_io_s": self.backward_io_s,
            "forward_bound": self.forward_bound,
            "backward_bound": self.backward_bound,
        }


@dataclass(frozen=True)
class TrainResult:
    """What one training step costs, and why."""

    execution: Execution
    why: str  # why this execution
    batch: int  # global, per optimizer step
    batch_note: str  # how the batch was chosen ("" when given)
    systems: int
    micro_batch: int  # samples per pass, per system
    grad_accum: int  # passes per step
    step_s: float
    tokens_per_sample: int
    flops_per_sample: int  # forward and backward
    peak_flops_per_s: float  # one system
    terms: dict[str, float]  # seconds per step by term: compute, system I/O, fill, ...
    sram_max_bytes_per_pe: int
    activation_bytes_per_sample: int
    external_bytes: dict[str, int]  # weights and optimizer state off the wafer (streaming)
    sizing: Sizing  # of `layout`
    layout: KernelGraph  # on the wafer: the program (pipelined), the slowest unit (streaming)
    costs: TrainCosts | None = None  # pipelined: what training adds to each kernel's cost
    units: tuple[UnitTime, ...] = ()
    single_system_samples_per_s: float = 0.0
    notes: tuple[str, ...] = field(default=())

    @property
    def samples_per_s(self) -> float:
        return self.batch / self.step_s

    @property
    def tokens_per_s(self) -> float:
        return self.samples_per_s * self.tokens_per_sample

    @property
    def utilization(self) -> float:
        return self.samples_per_s * self.flops_per_sample / (self.systems * self.peak_flops_per_s)

    @property
    def bound(self) -> str:
        return max(self.terms, key=lambda k: self.terms[k])

    @property
    def scaling_efficiency(self) -> float:
        """Throughput over N systems / (N x one system's at the same per-system batch)."""
        if self.systems == 1 or not self.single_system_samples_per_s:
            return 1.0
        return self.samples_per_s / (self.systems * self.single_system_samples_per_s)

    def to_json(self) -> dict[str, Any]:
        return {
            "execution": self.execution.value,
            "execution_reason": self.why,
            "batch": self.batch,
            "batch_chosen": self.batch_note,
            "systems": self.systems,
            "scaling_efficiency": self.scaling_efficiency,
            "micro_batch": self.micro_batch,
            "grad_accum": self.grad_accum,
            "step_s": self.step_s,
            "step_terms_s": dict(self.terms),
            "train_flops_per_sample": self.flops_per_sample,
            "activation_bytes_per_sample": self.activation_bytes_per_sample,
            "external_bytes": dict(self.external_bytes),
            "layers": [u.to_json() for u in self.units],
            "notes": list(self.notes),
        }


# --- several systems ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SwarmX:
    """What data parallel training over `systems` systems goes through: SwarmX's tree of
    broadcast-reduce nodes between external memory and the systems (one system: no tree).

    Weights are broadcast down the tree and gradients reduced up it at line rate, so a system's
    stream runs at `bytes_per_s` whatever N; what grows with N is the tree's depth, and with it
    the latency the step waits for at its one synchronisation: its last gradients up the tree
    before the update, the first weights after it down (`sync_s`)."""

    systems: int
    depth: int  # tree levels between external memory and a system: ceil(log_fanout N)
    bytes_per_s: float  # one system's stream through the tree, each direction sharing it
    hop_s: float  # latency one level of the tree adds

    @property
    def sync_s(self) -> float:
        """The step's synchronisation: the tree's depth up (gradients) and down (weights)."""
        return 2 * self.depth * self.hop_s

    def reduce_s(self, grad_bytes: int) -> float:
        """Every gradient up the tree and the reduced ones back, through one system's I/O
        (pipelined: each wafer then runs the optimizer), latency aside (`sync_s`)."""
        return 2 * grad_bytes / self.bytes_per_s


def tree_depth(systems: int, fanout: int) -> int:
    """Levels of a tree with `fanout` children per node that reaches `systems` leaves:
    ceil(log_fanout N), counted in integers (0 for one system)."""
    depth, reach = 0, 1
    while reach < systems:
        reach *= fanout
        depth += 1
    return depth


def swarmx(target: Target, systems: int) -> SwarmX:
    """The SwarmX path of `systems` systems on `target` (module doc). One system streams
    through its own I/O with no tree; a target without a [system] section has no SwarmX."""
    io = target.io.offwafer_bytes_per_s
    if systems == 1:
        return SwarmX(1, 0, io, 0.0)
    s = target.system
    if s is None:
        raise TrainError(
            f"--systems {systems}: target {target.name} has no [system] section (SwarmX: "
            "fan-out, bandwidth, latency); use a target that has one (wse2, wse3) or --systems 1"
        )
    if systems > s.max_systems:
        raise TrainError(
            f"--systems {systems}: {target.name} connects at most {s.max_systems}; "
            f"use --systems {s.max_systems} or fewer"
        )
    return SwarmX(
        systems, tree_depth(systems, s.swarmx_fanout), min(io, s.swarmx_bytes_per_s), s.swarmx_hop_s
    )


# --- pipelined ----------------------------------------------------------------------------------


def _in_flight(kg: KernelGraph, chunk_tokens: int) -> dict[str, int]:
    n, S = len(kg.kernels), kg.tokens_per_sample
    c = min(chunk_tokens, S)
    return {k.name: cdiv(2 * (n - i) * c, S) + 2 for i, k in enumerate(kg.kernels)}


def train_costs(kg: KernelGraph, precision_name: Precision, chunk_tokens: int) -> TrainCosts:
    """What pipelined training adds to each of `kg`'s kernels (`TrainCosts`)."""
    return TrainCosts(state_bytes(precision_name), _in_flight(kg, chunk_tokens))


def pipelined_sizing(
    kg: KernelGraph, target: Target, precision_name: Precision, chunk_tokens: int
) -> Sizing:
    """The training program sized with every kernel's forward, backward and state resident.
    Raises SizingError (one line) when it does not fit."""
    costs = train_costs(kg, precision_name, chunk_tokens)
    return _sized(kg, target, precision_name, chunk_tokens, costs)


_SIZED: OrderedDict[tuple[Any, ...], Sizing | SizingError] = OrderedDict()
_SIZED_KEEP = 64


def _sized(
    kg: KernelGraph, target: Target, prec: Precision, chunk_tokens: int, costs: TrainCosts | None
) -> Sizing:
    """`size_regions` at training's fill, remembered by content (the kernel graph, the target,
    precision, chunking) for the process: a sweep's or a batch search's points differ in batch
    and systems only, which sizing does not depend on (the graph is per sample)."""
    key = (
        hashlib.sha256(json.dumps(kg.to_json(), sort_keys=True).encode()).hexdigest(),
        repr(target), prec, chunk_tokens, costs is not None,
    )  # fmt: skip
    if key not in _SIZED:
        try:
            _SIZED[key] = size_regions(
                kg, target, prec, fill=FILL, chunk_tokens=chunk_tokens, train=costs
            )
        except SizingError as e:
            _SIZED[key] = e
        while len(_SIZED) > _SIZED_KEEP:
            _SIZED.popitem(last=False)
    _SIZED.move_to_end(key)
    found = _SIZED[key]
    if isinstance(found, SizingError):
        raise SizingError(str(found))
    return found


def _pipelined_step(
    kg: KernelGraph, sizing: Sizing, target: Target, prec: Precision, batch: int, systems: int
) -> tuple[float, dict[str, float]]:
    hz = target.clock.hz
    T = sizing.stage_cycles / hz
    c = min(sizing.chunk_tokens, kg.tokens_per_sample)
    fill = 2 * len(kg.kernels) * c / kg.tokens_per_sample * T
    v = target.vector_ops_per_cycle[prec]
    update = max(cdiv(k.weight_elems, sizing.kernel(k.name).pes) for k in kg.kernels)
    terms = {
        "compute": cdiv(batch, systems) * T,
        "pipeline fill": fill,
        "optimizer": update * ADAMW_OPS / v / hz,
        "step overhead": target.system.step_overhead_s if target.system else 0.0,
    }
    if systems > 1:
        tree = swarmx(target, systems)
        grads = kg.unique_weight_elems() * precision(prec).storage_bytes
        terms["gradient reduction"] = tree.reduce_s(grads)
        terms["synchronisation"] = tree.sync_s
    return sum(terms.values()), terms


# --- weight streaming ---------------------------------------------------------------------------


def streamed_units(kg: KernelGraph) -> list[tuple[str, list[Kernel]]]:
    """The kernels (in topological order) grouped into the units that stream one at a time:
    what leads the layers ("input": embeddings, position ids), one unit per transformer layer
    ("L0", "L1", ...; found by structure, `wsecc.core.layers.find_layers`, as placement and
    generation find them), and what follows the last layer ("output": final norm, head). A
    graph without attention is one unit ("model")."""
    ks = list(kg.kernels)
    layers = find_layers([k.kind for k in ks])
    if layers is None:
        return [("model", ks)]
    units = [("input", ks[: layers.start])] if layers.start else []
    units += [(f"L{i}", ks[a:b]) for i, (a, b) in enumerate(layers.spans)]
    if layers.end < len(ks):
        units.append(("output", ks[layers.end :]))
    return [(name, unit) for name, unit in units if unit]


def unit_graph(kg: KernelGraph, name: str, kernels: Sequence[Kernel]) -> KernelGraph:
    """`kernels` as a graph of their own: flows from or to other kernels become ports."""
    inside = {k.name for k in kernels}
    flows: list[Flow] = []
    inputs: dict[str, Port] = {}
    outputs: dict[str, Port] = {}
    for f in kg.flows:
        if f.src in inside and f.dst in inside:
            flows.append(f)
        elif f.dst in inside:
            port = f"in:{f.src}"
            inputs[port] = Port(port, f.elems_per_sample, f.elem_type)
            flows.append(
                Flow(port, f.dst, f.elems_per_sample, f.elem_type, "W", f.dst_edge, f.name)
            )
        elif f.src in inside:
            port = f"out:{f.dst}"
            outputs.setdefault(port, Port(port, f.elems_per_sample, f.elem_type))
            flows.append(
                Flow(f.src, port, f.elems_per_sample, f.elem_type, f.src_edge, "E", f.name)
            )
    return KernelGraph(
        f"{kg.name}:{name}", kg.tokens_per_sample, tuple(kernels), tuple(flows),
        tuple(inputs.values()), tuple(outputs.values()),
    )  # fmt: skip


@dataclass(frozen=True)
class _Unit:
    name: str
    kernels: int
    graph: KernelGraph
    sizing: Sizing
    weight_bytes: int
    rho: float  # backward / forward flops
    fill: float  # samples' worth of stage time to fill the unit's pipeline once

    def times(self, m: int, hz: float, io: float, recompute: bool = False) -> UnitTime:
        """Per micro-batch of m samples; `recompute`: the backward runs the forward again."""
        forward = (m + self.fill) * self.sizing.stage_cycles / hz
        return UnitTime(
            self.name, self.kernels, self.weight_bytes, self.sizing.pes_used,
            forward_s=forward, backward_s=(self.rho + recompute) * forward,
            weights_in_s=self.weight_bytes / io, backward_io_s=2 * self.weight_bytes / io,
        )  # fmt: skip


def _size_units(kg: KernelGraph, target: Target, prec: Precision, chunk_tokens: int) -> list[_Unit]:
    sb = precision(prec).storage_bytes
    c = min(chunk_tokens, kg.tokens_per_sample)
    memo: dict[tuple[Any, ...], tuple[KernelGraph, Sizing]] = {}
    units = []
    for name, kernels in streamed_units(kg):
        key = tuple((k.kind, tuple(sorted(k.params.items()))) for k in kernels)
        if key not in memo:  # identical layers are sized once
            sub = unit_graph(kg, name, kernels)
            try:
                memo[key] = (sub, _sized(sub, target, prec, chunk_tokens, None))
            except SizingError as e:
                raise TrainError(
                    f"weight streaming: unit {name!r} does not fit the wafer: {e}"
                ) from None
        fwd = sum(k.flops_per_sample for k in kernels)
        bwd = sum(int(_grad(k).flops(k.params)) for k in kernels)
        units.append(
            _Unit(
                name, len(kernels), *memo[key], sum(k.weight_elems for k in kernels) * sb,
                rho=bwd / max(1, fwd), fill=len(kernels) * c / kg.tokens_per_sample,
            )
        )  # fmt: skip
    return units


def _grad(k: Kernel) -> GradRule:
    """`k`'s gradient rule (`KernelGraph.train_flops_per_sample` refuses kinds without one)."""
    if k.spec.grad is None:
        raise TrainError(f"{k.kind.value} kernels have no gradient rule")
    return k.spec.grad


def _activation_bytes(kg: KernelGraph, prec: Precision) -> int:
    sb = precision(prec).storage_bytes
    return sum(int(_grad(k).saved_elems(k.params)) for k in kg.kernels) * sb


def _max_micro_batch(units: Sequence[_Unit], target: Target, per_sample: int) -> tuple[int, int]:
    """The most samples whose kept activations fit the wafer's SRAM beside the largest unit's
    working set, and the bytes left for them."""
    reserve = target.sram.reserved_bytes
    working = max(sum(k.pes * (k.sram.total - reserve) for k in u.sizing.kernels) for u in units)
    room = target.usable_pes * target.sram_budget_bytes - working
    return max(0, room // max(1, per_sample)), room


def _streaming_step(
    units: Sequence[_Unit], target: Target, m: int, accum: int, systems: int, recompute: bool
) -> tuple[float, dict[str, float], list[UnitTime]]:
    tree = swarmx(target, systems)
    hz, io = target.clock.hz, tree.bytes_per_s  # N > 1: weights and gradients through SwarmX
    times = [u.times(m, hz, io, recompute) for u in units]
    compute = io_bound = 0.0
    for t in times:
        for work, move in ((t.forward_s, t.weights_in_s), (t.backward_s, t.backward_io_s)):
            if work >= move:
                compute += work
            else:
                io_bound += move
    first = times[0]
    terms = {
        "compute": accum * compute,
        "system I/O": accum * io_bound,
        "step boundary": first.weights_in_s,  # the first fetch of a step waits for the update
        "step overhead": target.system.step_overhead_s if target.system else 0.0,
    }
    if systems > 1:  # the last gradients up the tree before the update, the first weights down
        terms["synchronisation"] = tree.sync_s
    return sum(terms.values()), terms, times


# --- the plan -----------------------------------------------------------------------------------


def _choose(
    candidates: Sequence[int], throughput: Callable[[int], float], why: str = ""
) -> tuple[int, str]:
    rates = [(b, throughput(b)) for b in candidates]
    best = max(r for _, r in rates)
    batch = next(b for b, r in rates if r >= 0.99 * best)
    return batch, (
        f"the smallest global batch within 1% of the best throughput over "
        f"{candidates[0]}..{candidates[-1]}{why}"
    )


def _streaming_batches(micro: int, systems: int) -> tuple[list[int], str]:
    """Candidate global batches for weight streaming: multiples of the largest micro-batch
    `micro` (BATCH_SEARCH of them) up to MAX_CHOSEN_BATCH per system; when one micro-batch is
    already larger, powers of two up to it (one pass each); and why the list stops where it
    does ("" when the bound did not cut it)."""
    per_system = [micro * k for k in range(1, BATCH_SEARCH + 1)]
    if per_system[-1] <= MAX_CHOSEN_BATCH:
        return [systems * b for b in per_system], ""
    kept = [b for b in per_system if b <= MAX_CHOSEN_BATCH]
    if not kept:
        kept = [2**j for j in range(PIPELINED_BATCHES)]
    why = (
        f", at most {MAX_CHOSEN_BATCH:,} per system, the largest batch of the published CS-2 "
        f"runs ({micro:,} samples fit one pass)"
    )
    return [systems * b for b in kept], why


def _pipelined(
    kg: KernelGraph,
    target: Target,
    prec: Precision,
    chunk_tokens: int,
    batch: int | None,
    systems: int,
) -> TrainResult:
    resident = kg.unique_weight_elems() * (precision(prec).storage_bytes + state_bytes(prec))
    sram = target.usable_pes * target.sram_budget_bytes
    if resident > sram:  # a bound sizing would reach only after costing every shape
        raise TrainError(
            f"pipelined: weights and optimizer state take {resident / 1e9:,.1f} GB, more than "
            f"{target.name}'s {sram / 1e9:,.1f} GB of data SRAM; weight streaming keeps them off "
            "the wafer (--execution weight-streaming)"
        )
    costs = train_costs(kg, prec, chunk_tokens)
    sizing = _sized(kg, target, prec, chunk_tokens, costs)

    def rate(b: int) -> float:
        return b / _pipelined_step(kg, sizing, target, prec, b, systems)[0]

    note = ""
    if batch is None:
        batch, note = _choose(
            [systems * 2**j for j in range(PIPELINED_BATCHES)], rate,
            f", at most {MAX_CHOSEN_BATCH:,} per system, the largest batch of the published "
            "CS-2 runs",
        )  # fmt: skip
    step, terms = _pipelined_step(kg, sizing, target, prec, batch, systems)
    per_system = cdiv(batch, systems)
    single = per_system / _pipelined_step(kg, sizing, target, prec, per_system, 1)[0]
    return TrainResult(
        Execution.PIPELINED, "", batch, note, systems, per_system, 1, step,
        kg.tokens_per_sample, kg.train_flops_per_sample, target.peak_flops_per_s(prec), terms,
        sizing.max_sram_per_pe, _activation_bytes(kg, prec), {}, sizing, kg, costs,
        single_system_samples_per_s=single,
    )  # fmt: skip


def _streaming(
    kg: KernelGraph,
    target: Target,
    prec: Precision,
    chunk_tokens: int,
    batch: int | None,
    systems: int,
) -> TrainResult:
    system = target.system
    if system is None:
        raise TrainError(
            f"target {target.name} has no [system] section (external memory, systems): it "
            "cannot weight-stream; use a target that has one (wse2, wse3) or --execution pipelined"
        )
    swarmx(target, systems)  # raises for more systems than SwarmX connects
    sb = precision(prec).storage_bytes
    params = kg.unique_weight_elems()
    external = {"weights": params * sb, "optimizer_state": params * state_bytes(prec)}
    if sum(external.values()) > system.external_memory_bytes:
        raise TrainError(
            f"weights and optimizer state take {sum(external.values()) / 1e12:.2f} TB, more than "
            f"{target.name}'s external memory ({system.external_memory_bytes / 1e12:.2f} TB)"
        )
    units = _size_units(kg, target, prec, chunk_tokens)
    # Two ways to keep what the backward pass needs: every activation, or only each unit's
    # inputs (checkpoints) with the unit's forward recomputed in its backward. Whichever runs
    # faster at the batch; the one that fits more samples per pass hides the weight I/O better.
    keeps = {False: _activation_bytes(kg, prec), True: _checkpoint_bytes(units, prec)}
    fits = {r: _max_micro_batch(units, target, b) for r, b in keeps.items()}
    plans = [r for r, (m_max, _) in fits.items() if m_max >= 1]
    if not plans:
        room = fits[True][1]
        raise TrainError(
            f"one sample's layer inputs kept for the backward pass ({keeps[True] / 1e9:.2f} GB) "
            f"exceed the wafer's SRAM left beside a layer ({room / 1e9:.2f} GB); use a shorter --seq"
        )

    def step_at(
        b: int, n: int, recompute: bool
    ) -> tuple[float, dict[str, float], list[UnitTime], int, int]:
        per_system = cdiv(b, n)
        accum = cdiv(per_system, fits[recompute][0])
        m = cdiv(per_system, accum)
        step, terms, times = _streaming_step(units, target, m, accum, n, recompute)
        return step, terms, times, m, accum

    def best_at(b: int) -> bool:
        return min(plans, key=lambda r: step_at(b, systems, r)[0])

    note = ""
    if batch is None:
        widest = max(fits[r][0] for r in plans)
        candidates, why = _streaming_batches(widest, systems)
        batch, note = _choose(candidates, lambda b: b / step_at(b, systems, best_at(b))[0], why)
    recompute = best_at(batch)
    step, terms, times, m, accum = step_at(batch, systems, recompute)
    per_system = cdiv(batch, systems)
    single = per_system / step_at(per_system, 1, recompute)[0]
    slowest = max(units, key=lambda u: u.sizing.stage_cycles)
    kept = keeps[recompute]
    notes = (
        (
            f"activations: each layer's inputs kept ({kept / 1e6:,.1f} MB per sample), its "
            f"forward recomputed in its backward (all kept would be {keeps[False] / 1e6:,.1f} MB)"
            if recompute
            else f"activations: all kept for the backward pass ({kept / 1e6:,.1f} MB per sample)"
        )
        + f"; at most {fits[recompute][0]} samples per pass fit the wafer's SRAM",
    )
    return TrainResult(
        Execution.WEIGHT_STREAMING, "", batch, note, systems, m, accum, step,
        kg.tokens_per_sample, kg.train_flops_per_sample, target.peak_flops_per_s(prec), terms,
        max(u.sizing.max_sram_per_pe for u in units), kept, external, slowest.sizing,
        slowest.graph, units=tuple(times), single_system_samples_per_s=single, notes=notes,
    )  # fmt: skip


def _checkpoint_bytes(units: Sequence[_Unit], prec: Precision) -> int:
    """Bytes per sample of every unit's inputs (what a layer needs to recompute its forward)."""
    return sum(
        p.elems_per_sample * elem_bytes(p.elem_type, prec) for u in units for p in u.graph.inputs
    )


def plan_training(
    kg: KernelGraph,
    target: Target,
    precision_name: Precision,
    *,
    execution: Execution = Execution.AUTO,
    batch: int | None = None,
    systems: int = 1,
    chunk_tokens: int,
) -> TrainResult:
    """The training step of `kg` on `target` (module doc). `batch` is global (None: chosen);
    `execution` auto runs the faster of the two that fit and says why.
    Raises TrainError / SizingError (one line) when the step cannot run as asked."""
    try:
        kg.train_flops_per_sample  # noqa: B018 - raises naming the kinds without a rule
    except ValueError as e:
        raise TrainError(f"{kg.name}: cannot train: {e}") from None
    run: dict[Execution, Callable[[], TrainResult]] = {
        Execution.PIPELINED: lambda: _pipelined(
            kg, target, precision_name, chunk_tokens, batch, systems
        ),
        Execution.WEIGHT_STREAMING: lambda: _streaming(
            kg, target, precision_name, chunk_tokens, batch, systems
        ),
    }
    execution = Execution(execution)
    if execution is not Execution.AUTO:
        r = run[execution]()
        return _with_why(r, "asked for (--execution)")
    tried: dict[Execution, TrainResult] = {}
    failed: dict[Execution, str] = {}
    for ex, fn in run.items():
        try:
            tried[ex] = fn()
        except (TrainError, SizingError) as e:
            failed[ex] = str(e)
    if not tried:
        raise TrainError(
            "neither execution fits: pipelined: "
            + failed[Execution.PIPELINED]
            + "; weight streaming: "
            + failed[Execution.WEIGHT_STREAMING]
        )
    best = max(tried.values(), key=lambda r: r.samples_per_s)
    other = [r for r in tried.values() if r is not best]
    if other:
        why = (
            f"faster: {best.samples_per_s:,.1f} samples/s against {other[0].samples_per_s:,.1f} "
            f"{other[0].execution.value}"
        )
    else:
        ex, reason = next(iter(failed.items()))
        reason = textwrap.shorten(reason.removeprefix(f"{ex.value}: "), 200, placeholder=" ...")
        why = f"{ex.value} does not fit ({reason})"
    return _with_why(best, why)


def _with_why(r: TrainResult, why: str) -> TrainResult:
    return replace(r, why=why)
