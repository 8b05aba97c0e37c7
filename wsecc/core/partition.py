"""A model split over several systems: a pipeline over contiguous groups of layers.

    KernelGraph ─split_layers─▶ Partition (per system: its kernels as a graph of their own,
                                           the flows crossing to later systems)

When a model's weights and K/V cache do not fit one wafer, the layers (found by structure,
`wsecc.core.layers.find_layers`, the one finder placement, training and generation use) are cut into
N contiguous groups, one per system; the kernels that lead the first layer (embeddings, position
ids) go with system 0, those after the last (final norm, head) with system N - 1. Each group is a
kernel graph of its own (`system_graph`): a flow from a kernel of an earlier system becomes an
input port of the later one and an output port of the earlier one (one port per tensor and
destination system), so each system's pipeline charges those bytes to its own system I/O, the
off-wafer rate every host stage already pays. The crossings are kept as
`wsecc.core.program.Crossing` records.

Balance. Every layer of a decoder keeps its weights and its K/V cache resident, and in a decode
step reads each of them once, so a group's bytes are both its SRAM and its share of a token's
time; the split minimises the largest group's bytes (`balanced_bounds`, exact over contiguous
splits). When the groups so balanced do not size, they are balanced by the PEs each needs at
its kernels' smallest shapes (`least_pes`) instead. Only this pipeline split is modelled:
splitting each layer over systems (tensor parallelism across wafers) is not, so the report says
that it was not compared. The one cut inside a layer is at the shard boundaries of a
mixture-of-experts block split over its experts (`wsecc.passes.split_moe`, `segments`): the
balance runs over segments, a layer cut before each shard that adds to an earlier one's sum,
and the cut carries the block's input and the running sum.

Over several systems the host holds the embeddings that lead the first layer (`host_lookups`:
a lookup of one row per token, sent by the host in place of the ids), and generate mode sizes
at one token per chunk when the groups do not fit at the options' chunk (`size_over_systems`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from wsecc.core.flow import FILL_STEPS, ForDecode, Placed, SizingRule, place_and_route
from wsecc.core.layers import Layers, find_layers
from wsecc.core.program import Crossing, Program, Systems
from wsecc.core.sizing_bytes import SramBytes, bytes_text, sram_bytes
from wsecc.errors import WseccError
from wsecc.kernels import (
    Flow,
    KernelGraph,
    KernelKind,
    Port,
    Sizing,
    SizingError,
    fit_bounds,
)
from wsecc.kernels.sizing import smallest_costs
from wsecc.modes.generate import kv_cache_bytes
from wsecc.targets import Target
from wsecc.vocab import Precision

PIPELINE = "pipeline"
"""The one split modelled: contiguous layer groups, one per system (module doc)."""

SPLIT_WHY = (
    "pipeline over contiguous layer groups, balanced by the bytes each system keeps resident "
    "(weights and K/V cache, also what a decode step reads); splitting a layer's matrices over "
    "systems (tensor parallel) is not modelled, so it was not compared"
)


class PartitionError(WseccError):
    """A model that cannot be split as asked (one line: what, and what to do)."""


@dataclass(frozen=True)
class SystemPart:
    """System `index`'s share: layers `first` to `last` (inclusive; "L3" names), its kernel
    graph, and the bytes it keeps resident."""

    index: int
    first: int
    last: int
    graph: KernelGraph
    resident_bytes: int

    @property
    def layers(self) -> int:
        return self.last - self.first + 1


@dataclass(frozen=True)
class Partition:
    """A kernel graph split over `len(parts)` systems, and the flows crossing between them."""

    parts: tuple[SystemPart, ...]
    crossings: tuple[Crossing, ...]
    split: str = PIPELINE
    why: str = SPLIT_WHY
    host_held: tuple[str, ...] = ()  # kernels the host computes (`host_lookups`)

    @property
    def crossing_bytes(self) -> float:
        """Bytes per sample crossing between systems, every crossing counted once."""
        return sum(c.bytes_per_sample for c in self.crossings)


def resident_bytes(kg: KernelGraph, precision: Precision) -> list[int]:
    """Each kernel's resident bytes, in `kg`'s order: its weights and, for an attention kernel
    bound with `cache_sequences`, its K/V cache (`wsecc.modes.generate.kv_cache_bytes`'s formula)."""
    out = []
    for k in kg.kernels:
        one = KernelGraph(kg.name, kg.tokens_per_sample, (k,), ())
        kv = kv_cache_bytes(one, precision) if "cache_sequences" in k.params else 0
        out.append(k.weight_bytes(precision) + kv)
    return out


def balanced_bounds(costs: Sequence[int], lead: int, tail: int, n: int) -> tuple[int, ...]:
    """Cut `len(costs)` layers into `n` contiguous groups, bounds b_0 = 0 < b_1 < ... < b_n =
    len(costs), minimising the largest group's cost, where group 0 also carries `lead` and
    group n - 1 `tail`. Exact, by dynamic programming over (groups, layers); among equal
    maxima the one whose groups end earliest."""
    L = len(costs)
    if not 1 <= n <= L:
        raise ValueError(f"{n} groups of {L} layers")
    prefix = [0]
    for c in costs:
        prefix.append(prefix[-1] + c)

    def group(g: int, a: int, b: int) -> int:
        return prefix[b] - prefix[a] + (lead if g == 0 else 0) + (tail if g == n - 1 else 0)

    inf = prefix[-1] + lead + tail + 1
    # best[g][b]: the least largest cost of groups 0..g covering layers [0, b)
    best = [[inf] * (L + 1) for _ in range(n)]
    came = [[0] * (L + 1) for _ in range(n)]
    for b in range(1, L + 1):
        best[0][b] = group(0, 0, b)
    for g in range(1, n):
        for b in range(g + 1, L + 1):
            for a in range(g, b):
                cost = max(best[g - 1][a], group(g, a, b))
                if cost < best[g][b]:
                    best[g][b], came[g][b] = cost, a
    bounds = [L]
    for g in range(n - 1, 0, -1):
        bounds.append(came[g][bounds[-1]])
    return (0, *reversed(bounds[1:]), L)


HOST_PORT = "host:"
"""The prefix of the input port a host-held embedding's rows enter by (`host_lookups`)."""


@dataclass(frozen=True)
class HostLookups:
    """`kg` with the embeddings that lead its first layer held by the host (`host_lookups`):
    the kernels taken off the wafer, the bytes they would have kept resident, and the bytes per
    sample the host now sends in their place (their rows) against the ids it no longer sends."""

    graph: KernelGraph
    kernels: tuple[str, ...]
    resident_bytes: int
    rows_bytes_per_sample: int
    ids_bytes_per_sample: int


def host_lookups(kg: KernelGraph, precision: Precision) -> HostLookups:
    """`kg` with every embedding kernel that leads its first layer computed by the host.

    Why: an embedding is a lookup of one table row per token (per table), so in a decode step
    it reads dim values of a table of vocab x dim; kept on a wafer it costs the whole table in
    SRAM (Llama 3.1 70B: 128,256 x 8,192 x 2 B = 2.1 GB, a fifteenth of a system) for 16 KB read
    per token. The host holds the table instead and sends the summed rows: each flow out of the
    kernel becomes a flow from an input port `host:<kernel>` of the same size, and the ids (and
    any port only the kernel read) are no longer sent. The host's I/O then carries
    dim x storage bytes per token in place of the ids, charged by each system's pipeline as
    every input port is (at `io.offwafer_bytes_per_s`). A graph without layers, or without an
    embedding before them, is returned unchanged."""
    layers = find_layers([k.kind for k in kg.kernels])
    lead = kg.kernels[: layers.start] if layers is not None else ()
    held = {k.name for k in lead if k.kind == KernelKind.EMBEDDING}
    if not held:
        return HostLookups(kg, (), 0, 0, 0)
    per_kernel = dict(zip((k.name for k in kg.kernels), resident_bytes(kg, precision), strict=True))
    flows: list[Flow] = []
    ports: dict[str, Port] = {}
    rows = ids = 0
    for f in kg.flows:
        if f.dst in held:
            ids += f.bytes_per_sample(precision)
        elif f.src in held:
            port = HOST_PORT + f.src
            if port not in ports:
                ports[port] = Port(port, f.elems_per_sample, f.elem_type)
                rows += f.bytes_per_sample(precision)
            flows.append(replace(f, src=port, src_edge="W"))
        else:
            flows.append(f)
    read = {f.src for f in flows}
    inputs = (*(p for p in kg.inputs if p.name in read), *ports.values())
    graph = KernelGraph(
        kg.name, kg.tokens_per_sample, tuple(k for k in kg.kernels if k.name not in held),
        tuple(flows), inputs, kg.outputs,
    )  # fmt: skip
    names = tuple(k.name for k in kg.kernels if k.name in held)
    return HostLookups(graph, names, sum(per_kernel[n] for n in names), rows, ids)


def least_pes(
    kg: KernelGraph,
    target: Target,
    precision: Precision,
    chunk_tokens: int,
    single_buffered: bool = False,
) -> list[int]:
    """Each kernel's PEs at its smallest shape that fits a PE's SRAM (`smallest_costs`, the
    shapes `fit_bounds` sums), in `kg`'s order. What a group needs of a system's area, where
    resident bytes miss what a kernel keeps besides (buffers, rotary tables, the shapes'
    rounding)."""
    costs = smallest_costs(
        kg, target, precision, chunk_tokens=chunk_tokens, single_buffered=single_buffered
    )
    return [c.area for c in costs]


@dataclass(frozen=True)
class Segment:
    """Kernels `start` to `stop` - 1 of a graph, all of layer `layer`: a whole layer, or the
    part of one between two cuts at a split mixture-of-experts block's shard boundaries."""

    start: int
    stop: int
    layer: int


def segments(kg: KernelGraph, layers: Layers) -> list[Segment]:
    """`layers`' spans of `kg`, each cut before every moe shard that adds to an earlier one's
    running sum (`accumulate`: `wsecc.passes.split_moe`), so that one block's shards may sit on
    different systems. A model without split blocks has one segment a layer. The last layer's
    span runs to the end of `kg` here: the layer finder takes the last layer as long as the
    one before, so a larger last layer (a MoE layer after a dense one) leaves its shards in
    what follows, which always goes with the last segment's system anyway."""
    out = []
    spans = layers.spans
    spans[-1] = (spans[-1][0], len(kg.kernels))
    for i, (a, b) in enumerate(spans):
        cuts = [
            j for j in range(a + 1, b)
            if kg.kernels[j].kind == KernelKind.MOE and kg.kernels[j].params["accumulate"]
        ]  # fmt: skip
        bounds = [a, *cuts, b]
        out += [Segment(lo, hi, i) for lo, hi in zip(bounds, bounds[1:], strict=False)]
    return out


def split_layers(
    kg: KernelGraph, precision: Precision, n: int, weigh: Sequence[int] | None = None
) -> Partition:
    """`kg` (kernels in topological order) split into `n` systems (module doc), the groups
    balanced by each kernel's resident bytes, or by `weigh` (one cost per kernel, in order:
    `least_pes` balances the PEs the groups need). Raises PartitionError when it has no layers
    to split or fewer layers than `n`."""
    layers = find_layers([k.kind for k in kg.kernels])
    if layers is None:
        raise PartitionError(
            f"{kg.name}: no transformer layers found to split over {n} systems: "
            "compile it with --systems 1"
        )
    spans = segments(kg, layers)
    if n > len(spans):
        what = "layer" if len(spans) == len(layers) else "layer or shard of a split moe block"
        raise PartitionError(
            f"{kg.name}: {n} systems for {len(spans)} {what}s: a system holds at least one "
            f"{what}, so use --systems {len(spans)} or fewer"
        )
    per_kernel = resident_bytes(kg, precision)
    w = list(per_kernel if weigh is None else weigh)
    costs = [sum(w[g.start : g.stop]) for g in spans]  # the last with what follows the layers
    cuts = balanced_bounds(costs, sum(w[: layers.start]), 0, n)
    starts = [0, *(spans[c].start for c in cuts[1:-1]), len(kg.kernels)]
    system_of = {
        k.name: s for s, (a, b) in enumerate(zip(starts, starts[1:], strict=False))
        for k in kg.kernels[a:b]
    }  # fmt: skip
    parts = []
    for s, (a, b) in enumerate(zip(starts, starts[1:], strict=False)):
        graph = system_graph(kg, s, system_of)
        first, last = spans[cuts[s]].layer, spans[cuts[s + 1] - 1].layer
        parts.append(SystemPart(s, first, last, graph, sum(per_kernel[a:b])))
    return Partition(tuple(parts), crossings(kg, system_of, precision))


def regroup(
    kg: KernelGraph,
    precision: Precision,
    groups: Sequence[Sequence[str]],
    layers: Sequence[tuple[int, int]],
    why: str = SPLIT_WHY,
) -> Partition:
    """The partition that put the kernels named `groups[s]` (layers `layers[s]`, first and
    last) on system s: a saved split read back as the compile made it, however it was balanced
    (`split_layers` by bytes or by PEs). The embeddings the host held (`host_lookups`) are the
    model's kernels no group names. Raises PartitionError when the groups do not cover `kg`'s
    other kernels once each, in contiguous order."""
    named = [n for g in groups for n in g]
    host = host_lookups(kg, precision)
    held = host.kernels if host.kernels and not set(host.kernels) & set(named) else ()
    base = host.graph if held else kg
    system_of = {n: s for s, g in enumerate(groups) for n in g}
    order = [system_of.get(k.name, -1) for k in base.kernels]
    if (
        len(named) != len(system_of)
        or sorted(order) != order
        or order[0] != 0
        or (len(set(order)) != len(groups) or -1 in order)
    ):
        raise PartitionError(
            f"{kg.name}: the saved groups are not a split of its kernels in order "
            f"({len(named)} kernels named, {len(base.kernels)} in the model)"
        )
    per_kernel = dict(
        zip((k.name for k in base.kernels), resident_bytes(base, precision), strict=True)
    )
    parts = tuple(
        SystemPart(s, a, b, system_graph(base, s, system_of), sum(per_kernel[n] for n in g))
        for s, (g, (a, b)) in enumerate(zip(groups, layers, strict=True))
    )
    return Partition(parts, crossings(base, system_of, precision), why=why, host_held=held)


def crossings(
    kg: KernelGraph, system_of: dict[str, int], precision: Precision
) -> tuple[Crossing, ...]:
    """One `Crossing` per tensor and destination system: a kernel's output that later systems
    read crosses once to each (its first reader there named)."""
    seen: dict[tuple[str, str, int], Crossing] = {}
    for f in kg.flows:
        src, dst = system_of.get(f.src), system_of.get(f.dst)
        if src is None or dst is None or src == dst:
            continue
        key = (f.src, f.name, dst)
        if key not in seen:
            seen[key] = Crossing(src, f.src, dst, f.dst, float(f.bytes_per_sample(precision)))
    return tuple(seen.values())


def crossing_port(src: str, tensor: str, system: int) -> str:
    """The port name of tensor `tensor` of kernel `src` crossing to or from `system`."""
    return f"s{system}:{src}:{tensor}" if tensor else f"s{system}:{src}"


def system_graph(kg: KernelGraph, system: int, system_of: dict[str, int]) -> KernelGraph:
    """System `system`'s kernels as a graph of their own (`system_of`: kernel -> system): the
    model's ports its kernels read or write, and a port per tensor crossing in from an earlier
    system or out to each later one."""
    mine = [k for k in kg.kernels if system_of[k.name] == system]
    model_in = {p.name: p for p in kg.inputs}
    model_out = {p.name: p for p in kg.outputs}
    flows: list[Flow] = []
    inputs: dict[str, Port] = {}
    outputs: dict[str, Port] = {}
    for f in kg.flows:
        src = system_of.get(f.src)
        dst = system_of.get(f.dst)
        if dst == system and (src == system or f.src in model_in):
            flows.append(f)
            if f.src in model_in:
                inputs.setdefault(f.src, model_in[f.src])
        elif src == system and f.dst in model_out:
            flows.append(f)
            outputs.setdefault(f.dst, model_out[f.dst])
        elif dst == system and src is not None:  # crossing in from an earlier system
            port = crossing_port(f.src, f.name, src)
            inputs.setdefault(port, Port(port, f.elems_per_sample, f.elem_type))
            flows.append(
                Flow(port, f.dst, f.elems_per_sample, f.elem_type, "W", f.dst_edge, f.name)
            )
        elif src == system and dst is not None and dst != system:  # out to a later system
            port = crossing_port(f.src, f.name, dst)
            if port not in outputs:
                outputs[port] = Port(port, f.elems_per_sample, f.elem_type)
                flows.append(
                    Flow(f.src, port, f.elems_per_sample, f.elem_type, f.src_edge, "E", f.name)
                )
    return KernelGraph(
        f"{kg.name}:s{system}", kg.tokens_per_sample, tuple(mine), tuple(flows),
        tuple(inputs.values()), tuple(outputs.values()),
    )  # fmt: skip


def shape_key(kg: KernelGraph) -> tuple[object, ...]:
    """What a system's placement depends on, names aside: each kernel's kind and parameters in
    order, the flows and ports by position and size. Two groups with the same key (the middle
    systems of a model with as many layers in each) place and route alike, so they share one
    placement."""
    index = {k.name: ("k", i) for i, k in enumerate(kg.kernels)}
    index |= {p.name: ("in", i) for i, p in enumerate(kg.inputs)}
    index |= {p.name: ("out", i) for i, p in enumerate(kg.outputs)}
    return (
        kg.tokens_per_sample,
        tuple((k.kind, repr(sorted(k.params.items()))) for k in kg.kernels),
        tuple(
            (index[f.src], index[f.dst], f.elems_per_sample, f.elem_type, f.src_edge, f.dst_edge)
            for f in kg.flows
        ),
        tuple((p.elems_per_sample, p.elem_type) for p in kg.inputs),
        tuple((p.elems_per_sample, p.elem_type) for p in kg.outputs),
    )


def systems_needed(resident: int, per_system: float) -> int:
    """The fewest systems whose `per_system` bytes hold `resident` bytes (a lower bound: sizing
    then says whether the groups' regions, with their buffers, fit)."""
    return max(1, math.ceil(resident / per_system))


@dataclass(frozen=True)
class SizedSystems:
    """A kernel graph split over systems and each system's sizing, and why that many."""

    partition: Partition
    sizings: tuple[Sizing, ...]
    why: str

    @property
    def count(self) -> int:
        return len(self.partition.parts)


def system_sram_bytes(target: Target) -> float:
    """What one system keeps resident at most: the data SRAM (after the per-PE reserve) of the
    share of its PEs sizing fills at first (`wsecc.core.flow.FILL_STEPS[0]`)."""
    return float(FILL_STEPS[0] * target.usable_pes * target.sram_budget_bytes)


def crossing_latency_s(target: Target) -> float:
    """The latency a flow crossing from one system to the next adds: the target's
    `system.crossing_s` (on wse3, 2 us: one RDMA-class transfer over 100 GbE through one switch,
    an assumption from public Ethernet figures, its source in the target's [sources]; no
    system-to-system latency of a CS system is published). The bytes themselves pass each
    system's I/O at `io.offwafer_bytes_per_s` (1.2 Tb/s, 12 x 100 GbE: wafer-facts.md, host I/O)
    in each system's own figures."""
    if target.system is None:
        raise PartitionError(
            f"target {target.name} has no [system] section: it spans one system (--systems 1)"
        )
    return float(target.system.crossing_s)


def max_systems(target: Target) -> int:
    """The systems `target` may span: its `[system]` section's cluster size, else one."""
    return target.system.max_systems if target.system is not None else 1


DENSE_FILL = 0.9
"""The fill a split over systems is sized at when its groups, balanced by PEs, do not fit at
`FILL_STEPS[0]`, before another system is added: a group is a run of layers of identical
shapes, which packs more densely than a model's mixed regions (placement falls back to the
lower fills when it does not pack, `wsecc.core.flow.fills_from`). A compiler choice, not a
hardware fact."""

ONE_TOKEN = 1
"""Generate mode over several systems: the chunk sizing may fall back to when the groups do not
fit at the options' chunk. A decode step holds one token per sequence in its buffers; the
prompt then streams through the same regions one token per chunk (a longer time to first
token, the decode step's buffers all the same). Then, single-buffered: a decode step has one
token in flight, the next only after the step, so one chunk buffer a stream serves it; the
prompt's chunks then do not overlap their arrival with their compute (`CostContext`), a
longer time to first token again."""


def size_over_systems(
    kg: KernelGraph,
    target: Target,
    precision: Precision,
    rule: SizingRule,
    chunk_tokens: int,
    requested: int | None,
) -> SizedSystems:
    """`kg` split over `requested` systems (None: auto, the fewest that hold it) and each group
    sized by `rule` at the first fill.

    One system is `kg` as it is. Over several, the host holds the embeddings that lead the
    first layer (`host_lookups`), and in generate mode (`ForDecode`) a split whose groups do not
    size at `chunk_tokens` is sized again at one token per chunk (`ONE_TOKEN`) before another
    system is added. Auto starts at the fewest whose SRAM holds the resident bytes
    (`systems_needed`) and adds a system while some group's regions and buffers do not fit.
    Raises PartitionError (one line) when the target allows too few systems, or the requested
    count is too few."""
    per_system = system_sram_bytes(target)
    whole = sum(resident_bytes(kg, precision))
    host = host_lookups(kg, precision)
    resident = whole - host.resident_bytes
    least = 1 if systems_needed(whole, per_system) == 1 else systems_needed(resident, per_system)
    layers = find_layers([k.kind for k in kg.kernels])
    most = min(max_systems(target), len(segments(kg, layers)) if layers is not None else 1)
    held = (
        f"{bytes_text(resident)} of weights and K/V cache in {precision}"
        + (
            f" besides the host's {bytes_text(host.resident_bytes)} of embeddings"
            if host.kernels
            else ""
        )
        + f", {bytes_text(per_system)} per {target.name} system"
    )
    if least > 1:
        held += f" at {FILL_STEPS[0]:.0%} fill"
    if requested is not None and requested < least:
        raise PartitionError(
            f"{kg.name}: {held} need at least {least} systems, --systems {requested} is too "
            "few: raise it or use --systems auto"
        )
    if least > most:
        why = (
            f"the target allows {max_systems(target)}"
            if most == max_systems(target)
            else f"the model has {most} layers or moe shards, at least one a system"
        )
        raise PartitionError(
            f"{kg.name}: {held} need at least {least} systems and {why}: use a larger "
            "target or a lower precision"
        )
    chunks = [(chunk_tokens, False)]  # (tokens per chunk, single-buffered), tried in turn
    if isinstance(rule, ForDecode):
        chunks += [(ONE_TOKEN, False)] if chunk_tokens > ONE_TOKEN else []
        chunks.append((ONE_TOKEN, True))
    pes: list[int] | None | bool = False  # `least_pes`, computed when first needed
    start = least
    if requested is None and least > 1 and layers is not None:
        pes = _least_pes(host.graph, target, precision, *chunks[-1])
        alone = lone_segments(host.graph, pes, target) if pes is not None else 0
        if alone > most:
            raise PartitionError(
                f"{kg.name}: {alone} layers or moe shards each need more than half a system's "
                f"PEs and the target allows {max_systems(target)} systems: use a larger target "
                "or a lower precision"
            )
        start = max(least, alone)
    counts = [requested] if requested is not None else list(range(start, most + 1))
    unfit: str | Partition = ""  # the last count that did not fit: its error, or its split

    def failed() -> str:
        """Why the last count tried did not fit: the split's `shortfall`, written only when a
        message reads it (once, for the last failing count)."""
        return unfit if isinstance(unfit, str) else shortfall(unfit, target, precision, *chunks[-1])

    memo: SizingMemo = {}  # groups recur from one count to the next: each sized once
    for n in counts:
        if n == 1:
            part = SystemPart(0, 0, max(0, len(layers or ()) - 1), kg, whole)
            partition = Partition((part,), ())
        else:
            partition = replace(split_layers(host.graph, precision, n), host_held=host.kernels)
            partition = replace(partition, why=split_why(host))
        tried = chunks[: 1 if n == 1 else None]
        sized = _sized_at(partition, rule, target, precision, tried, memo=memo)
        if isinstance(sized, str) and n > 1:  # balanced by the PEs the groups need instead
            if pes is False:
                pes = _least_pes(host.graph, target, precision, *chunks[-1])
            if isinstance(pes, list):
                by_pes = split_layers(host.graph, precision, n, pes)
                by_pes = replace(by_pes, host_held=host.kernels, why=split_why(host, True))
                for fill in (FILL_STEPS[0], DENSE_FILL):
                    again = _sized_at(by_pes, rule, target, precision, chunks[-1:], fill, memo)
                    if not isinstance(again, str):
                        partition, sized = by_pes, again
                        break
        if isinstance(sized, str):
            unfit = sized if n == 1 else partition
            continue
        sizings, chunk = sized
        slower = f"; sized at {chunk} token per chunk (at {chunk_tokens} they did not fit)"
        at = slower if chunk != chunk_tokens else ""
        if sizings[0].single_buffered:
            at += "; single-buffered (a decode step's one chunk a stream: double they did not fit)"
        if sizings[0].fill != FILL_STEPS[0]:
            at += f"; sized at {sizings[0].fill:.0%} fill (at {FILL_STEPS[0]:.0%} they did not fit)"
        if requested is not None:
            fits = "; it fits one wafer" if least == 1 and n > 1 else ""
            why = f"{n} requested ({held}: at least {least}{fits}){at}"
        elif n == 1:
            why = f"fits one wafer ({bytes_text(whole)} of weights and K/V cache in {precision})"
        elif n == least:
            fewer = _fewer(host.graph, n, target, precision, chunk, sizings[0].single_buffered)
            why = f"the fewest that hold it: {held}{at}{fewer}"
        elif n == start:
            why = (
                f"{held}: {least} would hold the bytes, but {n} layers or moe shards each "
                f"need more than half a system's PEs at their kernels' smallest shapes (over "
                f"half of {DENSE_FILL:.0%} of {target.usable_pes:,}), so no two share one{at}"
            )
        else:
            why = (
                f"{held}: {least} would hold the bytes, but with each group's buffers "
                f"{n - 1} did not fit ({failed()}){at}"
            )
        return SizedSystems(partition, sizings, why)
    if requested is not None:
        raise PartitionError(
            f"{kg.name}: a group of layers does not fit one of {requested} systems "
            f"({failed()}): raise --systems or use --systems auto"
        )
    raise PartitionError(
        f"{kg.name}: no split over {least} to {most} systems fits ({failed()}): use a "
        "larger target or a lower precision"
    )


def _least_pes(
    kg: KernelGraph,
    target: Target,
    precision: Precision,
    chunk_tokens: int,
    single_buffered: bool = False,
) -> list[int] | None:
    """`least_pes`, or None when some kernel fits no shape (sizing then says which)."""
    try:
        return least_pes(kg, target, precision, chunk_tokens, single_buffered)
    except SizingError:
        return None


def lone_segments(kg: KernelGraph, pes: Sequence[int], target: Target) -> int:
    """How many of `kg`'s segments (`segments`) need more than half of the densest fill a
    split sizes at (`DENSE_FILL` of the usable PEs) at their kernels' smallest shapes (`pes`,
    `least_pes` in `kg`'s order): no two of them can share a system, so a split needs at least
    that many (a bin-packing bound). Auto starts there: Llama 4 Maverick's 48 halves of MoE
    blocks (16.1 GB of experts each) take about 640,000 PEs apiece."""
    layers = find_layers([k.kind for k in kg.kernels])
    if layers is None:
        return 0
    half = DENSE_FILL * target.usable_pes / 2
    return sum(1 for g in segments(kg, layers) if sum(pes[g.start : g.stop]) > half)


SizingMemo = dict[tuple[object, ...], "Sizing | str"]
"""A group's sizing (or its sizing error) by its shapes (`shape_key`), fill and chunk: within
one `size_over_systems` call, where the rule, target and precision are fixed."""


def sram_at_smallest(
    kg: KernelGraph,
    target: Target,
    precision: Precision,
    chunk_tokens: int,
    single_buffered: bool = False,
) -> SramBytes:
    """`kg`'s SRAM at its kernels' smallest fitting shapes, split into weights and K/V cache,
    reserve, buffers, tables, tile rounding and free bytes (`wsecc.core.sizing_bytes`). Raises
    SizingError when a kernel fits no shape."""
    costs = smallest_costs(
        kg, target, precision, chunk_tokens=chunk_tokens, single_buffered=single_buffered
    )
    return sram_bytes(
        kg, costs, resident_bytes(kg, precision), target, precision, chunk_tokens, single_buffered
    )


def _fewer(
    kg: KernelGraph, n: int, target: Target, precision: Precision, chunk: int, single: bool
) -> str:
    """Why auto's fewest count `n` is not one fewer, in bytes (`SramBytes.line`), when one
    fewer is still several systems; "" otherwise."""
    if n < 3:
        return ""
    try:
        line = sram_at_smallest(kg, target, precision, chunk, single).line(n - 1)
    except SizingError:
        return ""
    return f"; at {n - 1}: {line}"


def _sized_at(
    partition: Partition,
    rule: SizingRule,
    target: Target,
    precision: Precision,
    chunks: Sequence[tuple[int, bool]],
    fill: float = FILL_STEPS[0],
    memo: SizingMemo | None = None,
) -> tuple[tuple[Sizing, ...], int] | str:
    """Every group of `partition` sized by `rule` at `fill`, at the first of `chunks` (tokens
    per chunk, and whether single-buffered: `CostContext.single_buffered`) at which all fit: the
    sizings and that chunk, else the last error. A group with the shapes of an earlier one
    (`shape_key`) takes its sizing, renamed; `memo` keeps them (and the errors) across calls
    of one rule, target and precision."""
    done: SizingMemo = {} if memo is None else memo
    failed = ""
    for chunk, single in chunks:
        sizings = []
        for p in partition.parts:
            key = (shape_key(p.graph), fill, chunk, single)
            if key not in done:
                try:
                    done[key] = rule.size(p.graph, target, precision, fill, chunk, single)
                except SizingError as e:
                    done[key] = str(e)
            got = done[key]
            if isinstance(got, str):
                failed = got
                break
            sizings.append(renamed(got, p.graph))
        else:
            return tuple(sizings), chunk
    return failed


def renamed(sizing: Sizing, kg: KernelGraph) -> Sizing:
    """`sizing`, of a graph with `kg`'s shapes (`shape_key`), as `kg`'s: its graph's and
    kernels' names, in order."""
    kernels = tuple(
        replace(ks, name=k.name) for ks, k in zip(sizing.kernels, kg.kernels, strict=True)
    )
    return replace(sizing, graph=kg.name, kernels=kernels)


def split_why(host: HostLookups, by_pes: bool = False) -> str:
    """The partition's `why`: the split, what balanced it, and what the host holds
    (`host_lookups`) and sends."""
    split = SPLIT_WHY
    if by_pes:
        split = split.replace(
            "balanced by the bytes each system keeps resident (weights and K/V cache, also what "
            "a decode step reads)",
            "balanced by the PEs each group needs at its kernels' smallest shapes (balanced by "
            "resident bytes, a group did not fit its system)",
        )
    if any(k.kind == KernelKind.MOE and k.params["accumulate"] for k in host.graph.kernels):
        split += (
            "; a mixture-of-experts block split into shards of its experts may be cut between "
            "shards, the block's input and the running sum crossing"
        )
    if not host.kernels:
        return split
    tokens = host.graph.tokens_per_sample
    return (
        f"{split}; the host holds the embedding ({', '.join(host.kernels)}, "
        f"{bytes_text(host.resident_bytes)}: a lookup of one row per token) and sends its rows, "
        f"{host.rows_bytes_per_sample // tokens:,} B per token in place of "
        f"{host.ids_bytes_per_sample // tokens:,} B of ids, on the system I/O"
    )


def shortfall(
    partition: Partition,
    target: Target,
    precision: Precision,
    chunk_tokens: int,
    single_buffered: bool = False,
) -> str:
    """Why `partition`'s groups do not fit their systems, in PEs and bytes: the fullest group's
    PEs at its kernels' smallest fitting shapes (`fit_bounds`, `chunk_tokens` per chunk)
    against sizing's fill of a system, and what all the groups' PEs hold: the weights and K/V
    cache, the per-PE reserve, and the rest (buffers, and the shapes' rounding)."""
    pes_of: dict[tuple[object, ...], int] = {}
    need = []
    try:
        for p in partition.parts:
            key = shape_key(p.graph)
            if key not in pes_of:
                pes_of[key] = fit_bounds(
                    p.graph, target, precision, chunk_tokens=chunk_tokens,
                    single_buffered=single_buffered,
                ).min_pes  # fmt: skip
            need.append(pes_of[key])
    except SizingError as e:
        return str(e)
    n, pes, sram = len(need), target.usable_pes, target.sram.bytes_per_pe
    worst = max(range(n), key=lambda i: need[i])
    total = sum(need)
    resident = sum(p.resident_bytes for p in partition.parts)
    reserve = total * target.sram.reserved_bytes
    rest = total * sram - resident - reserve
    return (
        f"system {worst}'s group needs {need[worst]:,} PEs at its kernels' smallest fitting "
        f"shapes, over {FILL_STEPS[0]:.0%} of {pes:,} usable PEs = {int(FILL_STEPS[0] * pes):,}; "
        f"the {n} groups need {total:,} PEs ({total / pes:.2f} systems), whose "
        f"{bytes_text(total * sram)} of SRAM hold {bytes_text(resident)} of weights and K/V cache, "
        f"{bytes_text(reserve)} of per-PE reserve ({target.sram.reserved_bytes:,} B a PE) and "
        f"{bytes_text(rest)} of buffers at {chunk_tokens} token(s) per chunk and shape rounding"
    )


__all__ = [
    "HOST_PORT",
    "DENSE_FILL",
    "ONE_TOKEN",
    "PIPELINE",
    "HostLookups",
    "Partition",
    "PartitionError",
    "Segment",
    "SizedSystems",
    "SystemPart",
    "balanced_bounds",
    "bytes_text",
    "crossing_latency_s",
    "host_lookups",
    "lone_segments",
    "resident_bytes",
    "segments",
    "shape_key",
    "shortfall",
    "regroup",
    "size_over_systems",
    "split_layers",
    "system_graph",
    "systems_needed",
]


def place_systems(
    systems: SizedSystems,
    target: Target,
    precision: Precision,
    *,
    placer: str,
    time_budget_s: float,
    seed: int = 0,
    deterministic: bool = False,
    rule: SizingRule,
    say: Callable[[str, str], None] = lambda stage, s: None,
) -> tuple[tuple[Placed, ...], Systems]:
    """Each system's layer group placed and routed (`place_and_route`, one copy, `time_budget_s`
    each), a group whose shapes equal an earlier one's (`shape_key`) reusing
    its placement: the placed groups (one per distinct placement, in system order) and the
    program over the systems with its crossings."""
    placed: list[Placed] = []
    programs: list[Program] = []
    placed_as: list[int] = []
    first_of: dict[tuple[object, ...], int] = {}
    for part, sizing in zip(systems.partition.parts, systems.sizings, strict=True):
        key = shape_key(part.graph)
        if key in first_of:
            i = first_of[key]
            programs.append(programs[i])
            placed_as.append(i)
            say("place", f"system {part.index}: the placement of system {i} (the same shapes)")
            continue
        say("place", f"system {part.index}: layers L{part.first}-L{part.last}")
        one = place_and_route(
            part.graph, sizing, target, precision, placer=placer, time_budget_s=time_budget_s,
            seed=seed, deterministic=deterministic, say=say, rule=rule, replicas=1,
        )  # fmt: skip
        first_of[key] = part.index
        placed.append(one)
        programs.append(one.program)
        placed_as.append(part.index)
    over = Systems(tuple(programs), systems.partition.crossings, tuple(placed_as))
    return tuple(placed), over
