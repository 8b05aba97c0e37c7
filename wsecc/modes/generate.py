"""Token generation on the wafer: a prompt's prefill, then one token per decode step.

    compiled program (graph bound at the context C, attention regions holding the K/V cache of
    B sequences) ─plan_generation─▶ GenerationPerf

One placement serves both phases: every kernel keeps its region, its weights resident; each
attention's region also keeps the K/V cache of the B sequences in flight, up to C positions each
(`cache_sequences` = B on the attention kernels, so sizing, the SRAM map and the placement all
count it: `generation_kernels`).

Prefill. The prompt's P tokens stream through the layer pipeline as an inference sample does:
every kernel re-costed at P tokens on its placed shape (`KindDef.tokens`), the same routing, and
L0's latency of B prompts through an empty pipeline (`wsecc.sim.perf`) is the time to first
token; its bottleneck is the prefill's bound.

Decode. Each step takes one token of each of the B sequences through every layer. A token's
vectors cross each region once, so a step is a *latency*, not a pipeline's period: each kernel's
decode model (`KindDef.decode`, `wsecc.kernels.decode`) gives its cycles by phase — local
multiply-adds that read every resident weight once (compute), scoring the cached keys (cache),
partials and statistics reduced across the region (reduction), inputs multicast and results
sent to the region's edge (broadcast) — and each routed flow its hops and its bytes over its
lanes, each host direction its bytes at the off-wafer rate. The per-token latency is the longest
path through these stages (kernels and flows in the pipeline's topological order):

    finish[s] = time[s] + max over edges u -> s of finish[u];   latency = finish[host-out]

so a layer's kernels add up along its critical path, and the layers add up: the per-token
latency is a pipeline of layer latencies. The B sequences advance together, one token each per
step (a weight read serves all B), so

    tokens/s per sequence = clock / latency,   aggregate = B x that.

Not modelled: overlapping one sequence's step with another's in different layers (a staggered
pipeline would raise the aggregate rate towards B / max kernel time, not the per-sequence rate),
speculative decoding, sampling on the wafer (the logits leave through host I/O).

The decode bound is the phase with the largest share of the critical path. Reading every weight
once per step is the compute phase of the matrix-vector kernels (each weight meets one
multiply-add per token, at the FMAC rate or the SRAM read rate: `matvec`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from wsecc.core.lanes import edge_cycles
from wsecc.core.program import Program
from wsecc.errors import WseccError
from wsecc.kernels import (
    DEFAULT_CHUNK_TOKENS,
    Kernel,
    KernelGraph,
    KernelKind,
    fits_a_region,
    sizing_at,
)
from wsecc.kernels.costs import CostContext, cost_at, least_true
from wsecc.kernels.decode import COMPONENTS, DecodeCost, sram_read_bytes_per_cycle
from wsecc.kernels.ir import precision as number_format
from wsecc.modes.train import streamed_units
from wsecc.sim.perf import FLOW, HOST, KERNEL, build_pipeline, simulate_l0
from wsecc.targets import Target
from wsecc.vocab import Precision

DECODE_PHASES = (*COMPONENTS, "flows", "host")
"""The phases a decode step's latency is split into: the kernels' (`wsecc.kernels.decode`),
the routed flows' (hops and bytes over lanes) and host I/O's."""

PHASE_WORDS = {
    "compute": "matrix-vector (every resident weight read once per step)",
    "cache": "attention over the K/V cache",
    "reduction": "reductions across regions (partial sums, statistics)",
    "broadcast": "multicasts across regions",
    "flows": "hops between regions",
    "host": "host I/O (token ids in, logits out)",
    "crossings": "system-to-system crossings (the system I/O's latency)",
}
"""What each phase means, for the bound's sentence."""

MAX_CONTEXT_SEARCH = 1 << 24
"""The largest context `max_context` tries (16M positions)."""


def default_prompt(context: int) -> int:
    """The prompt length when none is given: 128 tokens, at most half the context."""
    return max(1, min(128, context // 2))


def generation_kernels(
    kg: KernelGraph,
    sequences: int,
    target: Target,
    precision: Precision,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    *,
    one_wafer: bool = True,
) -> KernelGraph:
    """`kg` with every attention keeping the K/V cache of `sequences` sequences
    (`cache_sequences`), after checking it can generate on `target`: a causal decoder whose
    every kernel has a decode model, whose weights fit the wafer's data SRAM (generation keeps
    them all resident; only with `one_wafer`, for a program split over several systems,
    `wsecc.core.partition`, checks its own groups), whose attention has no full [S_q, S_kv] mask
    (the cache keeps one mask element per key) nor bias operand, and whose attention caches fit
    some region (else the error names the largest context that would). Raises WseccError
    naming what does not."""
    attention = [k for k in kg.kernels if k.kind is KernelKind.ATTENTION]
    if not attention:
        raise WseccError(
            f"{kg.name}: generate mode needs a decoder with attention; this graph has none"
        )
    if full := [k.name for k in attention if k.params.get("full_mask")]:
        raise WseccError(
            f"{kg.name}: generate mode does not support a full [S_q, S_kv] attention mask "
            f"(Megatron's per-query mask); {full[0]!r} has one: compile it with --mode infer"
        )
    if biased := [k.name for k in attention if k.params.get("bias")]:
        raise WseccError(
            f"{kg.name}: generate mode does not support an attention bias operand (a constant "
            f"[heads, S_q, S_kv]: MPNet's relative position bias, MPT's ALiBi); {biased[0]!r} "
            "has one: compile it with --mode infer"
        )
    if bidirectional := [k.name for k in attention if not k.params["causal"]]:
        raise WseccError(
            f"{kg.name}: generate mode needs a causal decoder; {bidirectional[0]!r} attends "
            "both ways (an encoder): compile it with --mode infer"
        )
    if missing := [k for k in kg.kernels if k.spec.decode is None or not k.spec.tokens]:
        k = missing[0]
        raise WseccError(
            f"{k.describe()} has no decode model ({len(missing)} such kernels): generate mode "
            "needs every op fused into a known kind (wsecc compile --explain says why not)"
        )
    weights = sum(k.weight_bytes(precision) for k in kg.kernels)
    wafer = target.usable_pes * target.sram_budget_bytes
    if one_wafer and weights > wafer:
        raise WseccError(
            f"{kg.name}: the weights are {weights / 1e9:,.1f} GB in {precision}, "
            f"{weights / wafer:.1f} x the data SRAM of one {target.name} "
            f"({wafer / 1e9:,.1f} GB after the per-PE reserve): generation keeps every weight "
            f"resident, so it needs at least {math.ceil(weights / wafer)} systems: compile it "
            "with --systems auto"
        )
    kernels = tuple(
        replace(k, params={**k.params, "cache_sequences": sequences})
        if k.kind is KernelKind.ATTENTION
        else k
        for k in kg.kernels
    )
    distinct = {
        tuple(sorted(k.params.items())): k for k in kernels if k.kind is KernelKind.ATTENTION
    }
    for k in distinct.values():
        context = k.params["seq"]

        def fits(seq: int, k: Kernel = k) -> bool:
            at = Kernel(k.name, k.kind, {**k.params, "seq": seq})
            if one_wafer:
                return fits_a_region(at, target, precision, chunk_tokens=chunk_tokens)
            # over several systems a split may size at one token a chunk, single-buffered
            # (`wsecc.core.partition.ONE_TOKEN`)
            return fits_a_region(at, target, precision, chunk_tokens=1, single_buffered=True)

        if fits(context):
            continue
        what = f"{k.describe()}: the K/V cache of {sequences} sequence(s) x {context} positions"
        if not fits(1):
            raise WseccError(
                f"{what} fits no region of {target.name}: not even one position per sequence "
                f"does at batch {sequences}; lower --batch"
            )
        largest = least_true(lambda seq: not fits(seq), 1, context) - 1
        raise WseccError(
            f"{what} fits no region of {target.name}; the largest context that fits at batch "
            f"{sequences} is {largest:,}: lower --context or --batch"
        )
    return replace(kg, kernels=kernels)


def at_tokens(kg: KernelGraph, tokens: int) -> KernelGraph:
    """`kg` with `tokens` tokens per sample: every kernel at `tokens` (its `KindDef.tokens`
    param), every flow and port scaled with them (a decoder's activations are per token)."""
    n = kg.tokens_per_sample

    def scaled(elems: int) -> int:
        return max(1, elems * tokens // n)

    return replace(
        kg,
        tokens_per_sample=tokens,
        kernels=tuple(
            Kernel(k.name, k.kind, k.spec.with_tokens(k.params, tokens), k.provenance)
            for k in kg.kernels
        ),
        flows=tuple(replace(f, elems_per_sample=scaled(f.elems_per_sample)) for f in kg.flows),
        inputs=tuple(replace(p, elems_per_sample=scaled(p.elems_per_sample)) for p in kg.inputs),
        outputs=tuple(replace(p, elems_per_sample=scaled(p.elems_per_sample)) for p in kg.outputs),
    )


def _shapes(program: Program) -> dict[str, tuple[int, int]]:
    return {name: (r.h, r.w) for name, r in program.placement.rects.items()}


def kv_cache_bytes(kg: KernelGraph, precision: Precision) -> int:
    """Bytes of K/V cache the program keeps: per attention, its sequences x positions x K/V
    heads x head_dim x 2 (K and V), in storage precision (and the mask's element per position,
    when it has one)."""
    sb = number_format(precision).storage_bytes
    total = 0
    for k in kg.kernels:
        if k.kind is KernelKind.ATTENTION:
            p = k.params
            per_position = 2 * p["kv_heads"] * p["head_dim"] + int(p["padding_mask"])
            total += p["cache_sequences"] * p["seq"] * per_position * sb
    return total


def max_context(program: Program) -> int:
    """The largest context (positions per sequence) whose K/V cache, for the program's
    sequences, fits every attention region's SRAM at its placed shape (the weights and buffers
    of every region do not grow with the context)."""
    ctx = program.sizing.context(program.target)
    budget = program.target.sram.bytes_per_pe
    shapes = _shapes(program)
    best = MAX_CONTEXT_SEARCH
    for k in program.kg.kernels:
        if k.kind is not KernelKind.ATTENTION:
            continue
        h, w = shapes[k.name]

        def fits(seq: int, k: Kernel = k, h: int = h, w: int = w) -> bool:
            at = Kernel(k.name, k.kind, {**k.params, "seq": seq})
            return cost_at(at, h, w, ctx).sram.total <= budget

        if not fits(1):
            return 0
        if not fits(best):
            best = least_true(lambda seq: not fits(seq), 1, best) - 1
    return best


@dataclass(frozen=True)
class StageDecode:
    """One pipeline stage's share of a decode step: cycles by phase, on the critical path or
    not."""

    name: str
    kind: str  # KERNEL, FLOW, HOST or CROSSINGS (between systems, `over_systems`)
    layer: str  # "L3" (by structure: `wsecc.modes.train.streamed_units`), "input", "output", "host"
    cycles: dict[str, int]  # phase -> cycles
    critical: bool
    kernel_kind: str = ""  # kernels: their kind
    flops: int = 0  # kernels: work per step
    bytes_read: int = 0  # kernels: weights and cache its busiest PE reads per step
    pes: int = 0  # kernels: region PEs

    @property
    def total(self) -> int:
        return sum(self.cycles.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "kind": self.kind, "layer": self.layer, "cycles": self.total,
            "phases": self.cycles, "critical": self.critical, "kernel_kind": self.kernel_kind,
            "flops": self.flops, "bytes_read": self.bytes_read, "pes": self.pes,
        }  # fmt: skip


@dataclass(frozen=True)
class GenerationPerf:
    """Prefill and decode figures of a generation program (module doc)."""

    prompt: int
    context: int
    batch: int
    clock_hz: float
    ttft_s: float  # B prompts through the prefill pipeline
    prefill_tokens_per_s: float  # prompt tokens per second in steady state
    prefill_bound: str  # L0's bottleneck at the prompt's length
    prefill_bound_kind: str
    decode_cycles: int  # one step: one token of every sequence through every layer
    stages: tuple[StageDecode, ...]
    kv_cache_bytes: int
    kv_bytes_per_pe_max: int
    max_context: int
    sram_read_bytes_per_pe_cycle: int
    peak_flops_per_pe_cycle: int

    @property
    def decode_latency_s(self) -> float:
        return self.decode_cycles / self.clock_hz

    @property
    def tokens_per_s_per_sequence(self) -> float:
        return self.clock_hz / self.decode_cycles

    @property
    def tokens_per_s(self) -> float:
        """Aggregate decode rate: every sequence gets one token per step."""
        return self.batch * self.tokens_per_s_per_sequence

    def phases(self) -> dict[str, int]:
        """Cycles of the critical path by phase."""
        out = dict.fromkeys(DECODE_PHASES, 0)
        for s in self.stages:
            if s.critical:
                for phase, c in s.cycles.items():
                    out[phase] = out.get(phase, 0) + c
        return out

    @property
    def slowest_kernel(self) -> str:
        """The kernel on the critical path with the longest step."""
        on_path = [s for s in self.stages if s.critical and s.kind == KERNEL]
        return max(on_path, key=lambda s: s.total).name if on_path else ""

    @property
    def decode_bound(self) -> str:
        phases = self.phases()
        return max(phases, key=lambda p: phases[p])

    def layers(self) -> list[tuple[str, dict[str, int]]]:
        """The critical path's cycles by layer (in path order) and phase."""
        out: dict[str, dict[str, int]] = {}
        for s in self.stages:
            if s.critical:
                row = out.setdefault(s.layer, dict.fromkeys(DECODE_PHASES, 0))
                for phase, c in s.cycles.items():
                    row[phase] = row.get(phase, 0) + c
        return list(out.items())

    def roofline(self) -> dict[str, Any]:
        """The decode roofline, per PE: each kernel's work per step over the SRAM bytes its
        busiest PE reads (intensity, flops per byte) against the flop/s per PE it achieves in
        its step time; the roofs are the FMAC rate and the SRAM read ports. A matrix-vector
        product sits at 2 / sb flops per byte, right of the ridge on WSE-2/3 (the read ports
        feed the FMACs faster than they consume): its step is bound by the multiply-adds that
        read each weight once, and what keeps it below that roof is the reduction and
        multicast latency that pads its step."""
        hz = self.clock_hz
        points = []
        for s in self.stages:
            if s.kind != KERNEL or not s.bytes_read or not s.total:
                continue
            per_pe_flops = s.flops / max(1, s.pes)
            points.append(
                {
                    "name": s.name,
                    "kind": s.kernel_kind,
                    "intensity": per_pe_flops / s.bytes_read,
                    "flops_per_pe_s": per_pe_flops * hz / s.total,
                    "bound": max(COMPONENTS, key=lambda c: s.cycles.get(c, 0)),
                }
            )
        return {
            "flops_per_pe_s": self.peak_flops_per_pe_cycle * hz,
            "sram_read_bytes_per_pe_s": self.sram_read_bytes_per_pe_cycle * hz,
            "points": points,
        }

    def to_json(self) -> dict[str, Any]:
        hz = self.clock_hz
        return {
            "prompt": self.prompt,
            "context": self.context,
            "batch": self.batch,
            "ttft_s": self.ttft_s,
            "prefill": {
                "tokens_per_s": self.prefill_tokens_per_s,
                "bound": self.prefill_bound,
                "bound_kind": self.prefill_bound_kind,
            },
            "decode": {
                "latency_s": self.decode_latency_s,
                "tokens_per_s_per_sequence": self.tokens_per_s_per_sequence,
                "tokens_per_s": self.tokens_per_s,
                "bound": self.decode_bound,
                "bound_words": PHASE_WORDS[self.decode_bound],
                "phases_s": {p: c / hz for p, c in self.phases().items()},
                "layers": [
                    {
                        "layer": name,
                        "latency_s": sum(row.values()) / hz,
                        "phases_s": {p: c / hz for p, c in row.items()},
                    }
                    for name, row in self.layers()
                ],  # fmt: skip
                "stages": [s.to_json() for s in self.stages],
                "roofline": self.roofline(),
            },
            "kv_cache_bytes": self.kv_cache_bytes,
            "kv_bytes_per_pe_max": self.kv_bytes_per_pe_max,
            "max_context": self.max_context,
        }


def decode_sequences(kg: KernelGraph) -> int:
    """B, the sequences a decode step of `kg` advances: its attention's `cache_sequences`
    (1 without attention)."""
    attention = [k for k in kg.kernels if k.kind is KernelKind.ATTENTION]
    return int(attention[0].params["cache_sequences"]) if attention else 1


def plan_generation(
    program: Program, prompt: int, choices: Mapping[str, int] | None = None
) -> GenerationPerf:
    """Prefill of a `prompt`-token prompt and the decode step of `program`, a generation
    program (`generation_kernels`: its attention kernels keep `cache_sequences` sequences, its
    graph is bound at the context). See the module doc. `choices`: the moe shard kernels'
    charged choices a token, the worst split over each block's shards
    (`wsecc.core.experts.decode_charges`); a kernel not in it is charged as its params say."""
    kg, target, precision = program.kg, program.target, program.precision
    context = kg.tokens_per_sample
    batch = decode_sequences(kg)
    choices = choices or {}
    if not 1 <= prompt < context:
        raise WseccError(
            f"the prompt ({prompt} tokens) must be shorter than the context ({context})"
        )

    # prefill: the same placement and routing, every kernel at the prompt's length
    kg_p = at_tokens(kg, prompt)
    sizing_p = sizing_at(program.sizing, kg_p, target, precision, _shapes(program))
    prefill = simulate_l0(replace(program, kg=kg_p, sizing=sizing_p), batch)

    # decode: the longest path through the stages' step times
    pipe = build_pipeline(program)
    ctx = CostContext(target, precision, program.chunk_tokens)
    io_per_cycle = target.io.offwafer_bytes_per_s / target.clock.hz
    kernel_stage = {ks.name: ks for ks in pipe.kernels}
    layer_of = {k.name: unit for unit, ks in streamed_units(kg) for k in ks}
    stages: list[StageDecode] = []
    for s in pipe.stages:
        per_token = math.ceil(batch * s.bytes_per_sample / context)
        if s.kind == KERNEL:
            ks, k = kernel_stage[s.name], kg.kernel(s.name)
            assert k.spec.decode is not None  # generation_kernels checked
            params = {**k.params, "choices": choices[k.name]} if k.name in choices else k.params
            d: DecodeCost = k.spec.decode(params, ks.h, ks.w, ctx, batch)
            stages.append(
                StageDecode(
                    s.name,
                    KERNEL,
                    layer_of[s.name],
                    {c: getattr(d, c) for c in COMPONENTS},
                    False,
                    k.kind.value,
                    d.flops,
                    d.bytes_read,
                    ks.h * ks.w,
                )
            )
        elif s.kind == FLOW:
            # its hops, then the step's bytes over its lanes (the one lane formula)
            cycles = s.latency_cycles + edge_cycles(
                per_token, max(1, s.lanes), target.link_bytes_per_cycle
            )
            dst = s.name.split("->", 1)[1]
            stages.append(StageDecode(s.name, FLOW, layer_of[dst], {"flows": cycles}, False))
        else:
            assert s.kind == HOST
            cycles = math.ceil(per_token / io_per_cycle) if s.bytes_per_sample else 0
            stages.append(StageDecode(s.name, HOST, "host", {"host": cycles}, False))
    finish = [0] * len(stages)
    came_from: list[int | None] = [None] * len(stages)
    inputs = pipe.inputs()
    for i, st in enumerate(stages):
        best, src = 0, None
        for e in inputs[i]:
            u = pipe.edges[e].src
            if finish[u] > best or src is None:
                best, src = finish[u], u
        finish[i], came_from[i] = best + st.total, src
    on_path = set()
    j: int | None = len(stages) - 1
    while j is not None:
        on_path.add(j)
        j = came_from[j]
    stages = [replace(st, critical=i in on_path) for i, st in enumerate(stages)]
    kv = [ks.sram.kv for ks in program.sizing.kernels]
    return GenerationPerf(
        prompt=prompt,
        context=context,
        batch=batch,
        clock_hz=target.clock.hz,
        ttft_s=prefill.batch_latency_s,
        prefill_tokens_per_s=prefill.tokens_per_s,
        prefill_bound=prefill.bottleneck,
        prefill_bound_kind=prefill.bottleneck_kind,
        decode_cycles=finish[-1],
        stages=tuple(stages),
        kv_cache_bytes=kv_cache_bytes(kg, precision),
        kv_bytes_per_pe_max=max(kv, default=0),
        max_context=max_context(program),
        sram_read_bytes_per_pe_cycle=sram_read_bytes_per_cycle(ctx),
        peak_flops_per_pe_cycle=target.flops_per_cycle[precision],
    )


CROSSINGS = "crossings"
"""The phase (and stage kind) of a crossing between two systems' programs."""


def over_systems(
    perfs: Sequence[GenerationPerf], first_layers: Sequence[int], crossing_s: float
) -> GenerationPerf:
    """The generation figures of a pipeline over systems (`wsecc.core.partition`), system i's being
    `perfs[i]` (its layers numbered from `first_layers[i]`), each crossing between consecutive
    systems adding `crossing_s` of latency. The bytes a crossing carries already pass each
    system's I/O in its own figures (its host stages: out of one system, into the next), so:

        decode step = sum of the systems' steps + (N - 1) crossings,
        time to first token = sum of the systems' prompt latencies + (N - 1) crossings;

    the prefill's steady rate is the slowest system's; the K/V cache is every system's, the
    largest context the one that fits every system. Stage names get their system ("s1/...")."""
    hz = perfs[0].clock_hz
    crossing = math.ceil(crossing_s * hz)
    stages: list[StageDecode] = []
    for i, (g, first) in enumerate(zip(perfs, first_layers, strict=True)):
        if i:
            stages.append(
                StageDecode(f"s{i - 1}->s{i}", CROSSINGS, CROSSINGS, {CROSSINGS: crossing}, True)
            )
        stages += [
            replace(st, name=f"s{i}/{st.name}", layer=_layer_after(st.layer, first))
            for st in g.stages
        ]
    slowest = min(range(len(perfs)), key=lambda i: perfs[i].prefill_tokens_per_s)
    crossings = len(perfs) - 1
    return replace(
        perfs[0],
        ttft_s=sum(g.ttft_s for g in perfs) + crossings * crossing_s,
        prefill_tokens_per_s=perfs[slowest].prefill_tokens_per_s,
        prefill_bound=f"s{slowest}/{perfs[slowest].prefill_bound}",
        prefill_bound_kind=perfs[slowest].prefill_bound_kind,
        decode_cycles=sum(g.decode_cycles for g in perfs) + crossings * crossing,
        stages=tuple(stages),
        kv_cache_bytes=sum(g.kv_cache_bytes for g in perfs),
        kv_bytes_per_pe_max=max(g.kv_bytes_per_pe_max for g in perfs),
        max_context=min(g.max_context for g in perfs),
    )


def _layer_after(layer: str, first: int) -> str:
    """A system's layer name ("L3": its fourth) as the model's ("L23" when it starts at 20)."""
    if layer.startswith("L") and layer[1:].isdigit():
        return f"L{first + int(layer[1:])}"
    return layer


__all__ = [
    "CROSSINGS",
    "DECODE_PHASES",
    "GenerationPerf",
    "at_tokens",
    "decode_sequences",
    "default_prompt",
    "generation_kernels",
    "kv_cache_bytes",
    "max_context",
    "over_systems",
    "plan_generation",
]
