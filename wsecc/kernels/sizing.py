"""Sizing: a region shape (h x w PEs) per kernel, balancing the pipeline under SRAM and area.

The problem. In the layer-pipelined model (ARCHITECTURE §3) every kernel owns a rectangle and the
steady-state rate is set by the slowest stage. `size_regions` chooses (h_k, w_k) per kernel to

    minimise  T = max_k cycles_k(h_k, w_k)                  cycles per sample of the slowest stage
    s.t.      sram_k(h_k, w_k) <= target.sram.bytes_per_pe  on every PE (the cost model's fullest)
              h_k <= program_height, w_k <= program_width
              sum_k h_k w_k <= fill x usable_pes            room left for the placer to pack

The algorithm. Each kernel's candidate shapes (the cost model's menu of useful row and column
counts, preferring aspect ratios <= max_aspect) are costed once. The ones that fit SRAM, sorted
by cycles, give a staircase min_area_k(T): the smallest fitting area with cycles <= T. (A kind
whose model lists its own frontier per T — the contest's convolutions — gives min_area_k(T)
directly, computed on demand.) The sum over kernels is non-increasing in T, so a binary search
over T finds the smallest T whose areas fit the budget; each kernel then takes its smallest
shape within T.
Over the menu this is optimal for the max-stage objective: any assignment with a smaller
bottleneck T' would need sum_k min_area_k(T') <= budget, which the search rejected.

The bound. `Sizing.ceiling_samples_per_s` is the compute-bound ceiling the search balances toward:
every usable PE busy on the FMAC path,

    ceiling = clock_hz x usable_pes x flops_per_cycle[precision] / flops_per_sample

(vector ops counted as flops); `efficiency` is the sized throughput over it.

`work_proportional_sizing` is the baseline: areas proportional to flops, same SRAM rule.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from types import MappingProxyType
from typing import Any

from wsecc.core.lanes import shared_edge_cycles
from wsecc.errors import WseccError
from wsecc.kernels.costs import (
    DEFAULT_CHUNK_TOKENS,
    CostContext,
    FrontierFn,
    KernelCost,
    SramBreakdown,
    TrainCosts,
    cost_at,
    costs_over,
    least_true,
)
from wsecc.kernels.ir import Kernel, KernelGraph
from wsecc.targets import Target, check_precision
from wsecc.vocab import Precision

DEFAULT_FILL = 0.85
DEFAULT_MAX_ASPECT = 16.0
DEFAULT_ALT_TOLERANCE = 0.05
DEFAULT_MAX_ALTERNATIVES = 4
# further shapes, the same way, for a placer that packs one layer with any of them and keeps
# what it took (`wsecc.place.problem.PlaceKernel.pool`); 10% aspect steps leave 20-40 of them
POOL_MAX = 48


class SizingError(WseccError, ValueError):
    """The model cannot be sized on this target; one line naming the kernel(s) and the shortfall."""


@dataclass(frozen=True)
class KernelSizing:
    """One kernel's region: shape (h rows x w columns), SRAM on its fullest PE, stage cycles, and
    alternative shapes (h, w) for the placer: cycles within the stage time, area within a few %;
    `pool`: more shapes that hold to the same limits, which the placer may take (the menu is
    `alternatives`, the bound's business; the pool only the tiled start's)."""

    name: str
    kind: str
    h: int
    w: int
    sram: SramBreakdown
    compute_cycles: int
    link_cycles: int
    alternatives: tuple[tuple[int, int], ...] = ()
    edge_cycles: int = 0  # its routed flows through its shortest side (`wsecc.core.lanes`)
    pool: tuple[tuple[int, int], ...] = ()

    @property
    def pes(self) -> int:
        return self.h * self.w

    @property
    def cycles_per_sample(self) -> int:
        return max(self.compute_cycles, self.link_cycles, self.edge_cycles)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["alternatives"] = [list(a) for a in self.alternatives]
        d["pool"] = [list(a) for a in self.pool]
        return d

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> KernelSizing:
        return KernelSizing(
            name=d["name"],
            kind=d["kind"],
            h=d["h"],
            w=d["w"],
            sram=SramBreakdown(**d["sram"]),
            compute_cycles=d["compute_cycles"],
            link_cycles=d["link_cycles"],
            alternatives=tuple((a[0], a[1]) for a in d["alternatives"]),
            edge_cycles=d.get("edge_cycles", 0),
            pool=tuple((a[0], a[1]) for a in d.get("pool", ())),
        )


@dataclass(frozen=True)
class Sizing:
    """Region shapes for every kernel of a graph on a target, and what they achieve."""

    strategy: str  # "balanced" (size_regions), "decode" (size_for_decode) or "work-proportional"
    graph: str
    target: str
    precision: Precision
    fill: float
    chunk_tokens: int
    clock_hz: float
    usable_pes: int
    sram_bytes_per_pe: int
    tokens_per_sample: int
    flops_per_sample: int
    peak_flops_per_cycle: int  # usable_pes x flops_per_cycle[precision]
    kernels: tuple[KernelSizing, ...]
    # link cycles per sample each region's edge lanes leave for the region they may cross
    # (`crossing_headroom`), charged in every kernel's edge_cycles
    crossing_headroom: int = 0
    # one chunk buffer per stream (`CostContext.single_buffered`): a decode step's regions
    single_buffered: bool = False

    def kernel(self, name: str) -> KernelSizing:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)

    @property
    def stage_cycles(self) -> int:
        """Cycles per sample of the slowest stage: the pipeline's steady-state period."""
        return max(k.cycles_per_sample for k in self.kernels)

    @property
    def bottleneck(self) -> str:
        return max(self.kernels, key=lambda k: k.cycles_per_sample).name

    @property
    def balance(self) -> float:
        """max / mean stage cycles: 1.0 is a perfectly balanced pipeline."""
        mean = sum(k.cycles_per_sample for k in self.kernels) / len(self.kernels)
        return self.stage_cycles / mean

    @property
    def pes_used(self) -> int:
        return sum(k.pes for k in self.kernels)

    @property
    def fabric_fraction(self) -> float:
        return self.pes_used / self.usable_pes

    @property
    def max_sram_per_pe(self) -> int:
        return max(k.sram.total for k in self.kernels)

    @property
    def samples_per_s(self) -> float:
        return self.clock_hz / self.stage_cycles

    @property
    def tokens_per_s(self) -> float:
        return self.samples_per_s * self.tokens_per_sample

    @property
    def ceiling_samples_per_s(self) -> float:
        """Compute-bound ceiling: clock x usable PEs x flops/cycle/PE / flops per sample."""
        return self.clock_hz * self.peak_flops_per_cycle / self.flops_per_sample

    @property
    def ceiling_tokens_per_s(self) -> float:
        return self.ceiling_samples_per_s * self.tokens_per_sample

    @property
    def efficiency(self) -> float:
        return self.samples_per_s / self.ceiling_samples_per_s

    def summary(self) -> str:
        return (
            f"{self.graph} on {self.target} ({self.precision}, {self.strategy}): "
            f"{len(self.kernels)} kernels, {self.pes_used:,} PEs "
            f"({self.fabric_fraction:.1%} of {self.usable_pes:,}), max SRAM "
            f"{self.max_sram_per_pe:,}/{self.sram_bytes_per_pe:,} B/PE; bottleneck "
            f"{self.bottleneck} at {self.stage_cycles:,} cycles/sample, balance {self.balance:.2f}; "
            f"{self.samples_per_s:,.2f} samples/s = {self.tokens_per_s:,.0f} tokens/s "
            f"(ceiling {self.ceiling_samples_per_s:,.2f} samples/s, {self.efficiency:.0%})"
        )

    def verify(self) -> None:
        """Raise SizingError naming the first kernel whose region is empty or overfills a PE,
        or if the regions together exceed fill x usable PEs."""
        for k in self.kernels:
            if k.h < 1 or k.w < 1:
                raise SizingError(f"kernel {k.name!r}: region {k.h}x{k.w} is empty")
            if k.sram.total > self.sram_bytes_per_pe:
                raise SizingError(
                    f"kernel {k.name!r}: {k.sram.total:,} B/PE exceeds {self.sram_bytes_per_pe:,}"
                )
        if self.pes_used > self.fill * self.usable_pes:
            raise SizingError(
                f"regions use {self.pes_used:,} PEs, more than fill {self.fill} x "
                f"{self.usable_pes:,} usable"
            )

    def to_json(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "kernels"}
        if not self.single_buffered:  # double-buffered sizings are written as before it
            del d["single_buffered"]
        d["kernels"] = [k.to_json() for k in self.kernels]
        return d

    def context(self, target: Target, precision: Precision | None = None) -> CostContext:
        """The cost context its kernels were costed in (`precision`: another one)."""
        return CostContext(
            target,
            self.precision if precision is None else precision,
            self.chunk_tokens,
            single_buffered=self.single_buffered,
        )

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Sizing:
        """Load and verify."""
        scalars = {k: v for k, v in d.items() if k != "kernels"}
        scalars["precision"] = check_precision(d["precision"])
        sizing = Sizing(**scalars, kernels=tuple(KernelSizing.from_json(k) for k in d["kernels"]))
        sizing.verify()
        return sizing


# --- candidates --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Menu:
    """A kernel's fitting candidate shapes and its min-area-within-cycles staircase."""

    fitting: tuple[KernelCost, ...]  # by (area, cycles)
    stair_cycles: tuple[int, ...]  # ascending
    stair: tuple[KernelCost, ...]  # stair[i]: min area among fitting with cycles <= stair_cycles[i]

    def within(self, T: int) -> KernelCost | None:
        """The smallest fitting shape with cycles <= T (None if there is none)."""
        i = bisect.bisect_right(self.stair_cycles, T)
        return self.stair[i - 1] if i else None

    def shapes_within(self, T: int | None) -> tuple[KernelCost, ...]:
        """Every fitting shape with cycles <= T (None: any), by (area, cycles)."""
        if T is None:
            return self.fitting
        return tuple(c for c in self.fitting if c.cycles_per_sample <= T)

    @property
    def smallest(self) -> KernelCost:
        return self.stair[-1]

    @property
    def least_sram(self) -> int:
        return min(c.sram.total for c in self.fitting)


class _FrontierMenu:
    """The menu of a kind whose cost model lists its own shapes within a stage time
    (`KindDef.frontier`): computed per T on demand and kept."""

    def __init__(self, frontier: FrontierFn, kernel: Kernel, ctx: CostContext) -> None:
        self._frontier, self._params, self._ctx = frontier, kernel.params, ctx
        self._cache: dict[int | None, tuple[KernelCost, ...]] = {}

    def shapes_within(self, T: int | None) -> tuple[KernelCost, ...]:
        """Every fitting shape with cycles <= T (None: any), by (area, cycles)."""
        if T not in self._cache:
            self._cache[T] = tuple(
                sorted(
                    self._frontier(self._params, T, self._ctx),
                    key=lambda c: (c.area, c.cycles_per_sample),
                )
            )
        return self._cache[T]

    def within(self, T: int) -> KernelCost | None:
        shapes = self.shapes_within(T)
        return shapes[0] if shapes else None

    @property
    def smallest(self) -> KernelCost:
        return self.shapes_within(None)[0]

    @property
    def least_sram(self) -> int:
        return min(c.sram.total for c in self.shapes_within(None))


Menu = _Menu | _FrontierMenu


def _aspect(c: KernelCost) -> float:
    return max(c.h, c.w) / min(c.h, c.w)


def _menu(
    costs: Sequence[KernelCost],
    sram_limit: int,
    max_aspect: float,
    charge: Callable[[list[KernelCost]], list[KernelCost]] = list,
) -> _Menu | None:
    """The fitting shapes (aspect <= max_aspect if any such fits), each as `charge` costs it
    (sizing: with its edge cycles), or None if none fits."""
    fitting = [c for c in costs if c.sram.total <= sram_limit]
    if not fitting:
        return None
    preferred = charge([c for c in fitting if _aspect(c) <= max_aspect] or fitting)
    # (cycles, area) of each shape worked out once, not in every comparison of two sorts
    # (a menu has thousands of shapes; the properties were a third of a menu's CPU)
    cycles = [max(c.compute_cycles, c.link_cycles, c.edge_cycles) for c in preferred]
    areas = [c.h * c.w for c in preferred]
    index = range(len(preferred))  # the last key: ties keep their order, as a stable sort
    stair: list[KernelCost] = []
    least = 0
    for _, area, i in sorted(zip(cycles, areas, index, strict=True)):
        if not stair or area < least:
            stair.append(preferred[i])
            least = area
    return _Menu(
        tuple(preferred[i] for _, _, i in sorted(zip(areas, cycles, index, strict=True))),
        tuple(c.cycles_per_sample for c in stair),
        tuple(stair),
    )


_RawCosts = dict[tuple[Any, ...], list[KernelCost]]


def _menu_of(
    kernel: Kernel,
    ctx: CostContext,
    max_aspect: float,
    flows: tuple[int, ...] = (),
    headroom: int = 0,
    raw: _RawCosts | None = None,
) -> tuple[list[KernelCost], Menu | None]:
    """A kernel's menu (None if no shape fits a PE) and the shapes costed to build it, as its
    kind costs them; each shape of the menu charged the cycles its routed `flows` need through
    its shortest side (`_charge_edges`). `raw` keeps the kind's costs per kernel signature for
    another menu of the same kernels."""
    model = kernel.spec
    if model.frontier is not None:
        menu = _FrontierMenu(model.frontier, kernel, ctx)
        return [], menu if menu.shapes_within(None) else None
    assert model.shapes is not None  # a kind without a frontier has shapes (KindDef)
    fab = ctx.target.fabric
    raw = {} if raw is None else raw
    key = _signature(kernel)
    if key not in raw:
        rows, cols = model.shapes(kernel.params, fab.program_height, fab.program_width)
        raw[key] = costs_over(kernel, rows, cols, ctx)
    costs = raw[key]

    def charge(shapes: list[KernelCost]) -> list[KernelCost]:
        return _charge_edges(shapes, flows, ctx, headroom)

    return costs, _menu(costs, ctx.target.sram.bytes_per_pe, max_aspect, charge)


def routed_flow_bytes(kg: KernelGraph, precision: Precision) -> dict[str, tuple[int, ...]]:
    """Kernel -> bytes per sample of each routed flow it sends or receives: the kernel graph's
    flows between two kernels, merged per pair as the placer and the router take them
    (`wsecc.place.from_kernels`); flows to or from ports and within a kernel are not routed."""
    names = {k.name for k in kg.kernels}
    pairs: dict[tuple[str, str], int] = {}
    for f in kg.flows:
        if f.src in names and f.dst in names and f.src != f.dst:
            pairs[(f.src, f.dst)] = pairs.get((f.src, f.dst), 0) + f.bytes_per_sample(precision)
    out: dict[str, list[int]] = {n: [] for n in names}
    for (src, dst), b in pairs.items():
        out[src].append(b)
        out[dst].append(b)
    return {n: tuple(sorted(b, reverse=True)) for n, b in out.items()}


def _with_edges(
    cost: KernelCost, flows: tuple[int, ...], ctx: CostContext, headroom: int = 0
) -> KernelCost:
    """`cost` with the cycles per sample its routed flows need through the region's shortest
    side, all of them sharing it (`wsecc.core.lanes.shared_edge_cycles`): the placer decides which
    side faces which neighbour, and flows in and out may share one, so a shape is charged for
    the worst case. Plus `headroom`: a lane may cross another kernel's region and then shares a
    link with that kernel's own traffic (L0 adds the two), so each lane must move its bytes
    within the stage time less that kernel's link cycles (`crossing_headroom`). Training is
    costed from sizing alone and keeps its own link model."""
    return _charge_edges([cost], flows, ctx, headroom)[0]


def _charge_edges(
    costs: Sequence[KernelCost], flows: tuple[int, ...], ctx: CostContext, headroom: int
) -> list[KernelCost]:
    """`_with_edges` of every cost, its edge cycles worked out once per length of the shortest
    side (a menu has thousands of shapes and a few dozen such lengths)."""
    if not flows or ctx.train is not None:
        return list(costs)
    sides = {min(c.h, c.w) for c in costs}
    edge = {s: shared_edge_cycles(flows, s, ctx.L) + headroom for s in sides}
    # the constructor, not `dataclasses.replace`: the same values at a third of the time (a
    # GPT-2 small compile charges 62,000 shapes; replace took 0.9 s of its CPU under cProfile)
    return [
        KernelCost(
            c.h,
            c.w,
            c.sram,
            c.compute_cycles,
            c.link_cycles,
            c.in_bytes_per_sample,
            c.out_bytes_per_sample,
            edge[min(c.h, c.w)],
        )
        for c in costs
    ]


def crossing_headroom(kernels: Sequence[KernelCost | KernelSizing]) -> int:
    """Link cycles per sample of the busiest region a lane may cross: the largest own link time
    among the kernels whose stage it does not set (link below compute). A region whose link
    already sets its stage has no room for a crossing lane at any width, so lanes are planned
    for the busiest region that has room."""
    return max((k.link_cycles for k in kernels if k.link_cycles < k.compute_cycles), default=0)


def _signature(kernel: Kernel) -> tuple[Any, ...]:
    return (kernel.kind, tuple(sorted(kernel.params.items())))


_Choice = list[tuple[Kernel, Menu]]


def _menus(
    kg: KernelGraph,
    ctx: CostContext,
    max_aspect: float,
    headroom: int = 0,
    raw: _RawCosts | None = None,
    generate: bool = False,
) -> _Choice:
    """Every kernel with its menu; kernels of equal kind, params and routed flows share one
    evaluation. Raises SizingError naming the kernels no shape of which fits a PE (its remedies
    for generate mode's when `generate`)."""
    memo: dict[tuple[Any, ...], tuple[list[KernelCost], Menu | None]] = {}
    menus: _Choice = []
    failing: list[tuple[Kernel, list[KernelCost]]] = []
    flows = routed_flow_bytes(kg, ctx.precision)
    for k in kg.kernels:
        key = (_signature(k), flows[k.name])
        if key not in memo:
            memo[key] = _menu_of(k, ctx, max_aspect, flows[k.name], headroom, raw)
        costs, menu = memo[key]
        if menu is None:
            failing.append((k, costs))
        else:
            menus.append((k, menu))
    if failing:
        raise _sram_error(kg, ctx, failing, generate)
    return menus


# --- errors --------------------------------------------------------------------------------------

_REMEDIES: Mapping[str, str] = MappingProxyType(
    {
        "kv": "a shorter sequence (K/V grow with it)",
        "weights": "more systems (--systems auto: a pipeline of layer groups), or training, "
        "which streams weights one layer at a time (--mode train)",
        "buffers": "a smaller --chunk-tokens (tokens buffered per step)",
    }
)


def _help(
    component: str, ctx: CostContext, kernel: Kernel | None = None, generate: bool = False
) -> str:
    wider = ["fp16 or mixed storage (half of fp32)"] if ctx.precision == Precision.FP32 else []
    remedy = _REMEDIES[component]
    if component == "weights" and generate:  # generation keeps every weight resident
        remedy = (
            "a smaller --chunk-tokens (the prefill's buffers sit beside the weights), or more "
            "systems (--systems auto)"
        )
    if component == "kv" and kernel is not None and kernel.params.get("cache_sequences", 1) > 1:
        remedy = "a shorter --context or fewer sequences (--batch): the K/V cache grows with both"
    if component == "weights" and ctx.train is not None:  # already training, pipelined
        remedy = "weight streaming keeps weights and optimizer state off the wafer (--execution weight-streaming)"
    return ", ".join([remedy, *wider, "a bigger target"])


def _sram_error(
    kg: KernelGraph,
    ctx: CostContext,
    failing: Sequence[tuple[Kernel, list[KernelCost]]],
    generate: bool = False,
) -> SizingError:
    """No shape of these kernels fits a PE: name each distinct one with its best shape's need."""
    groups: dict[tuple[Any, ...], list[Kernel]] = {}
    best: dict[tuple[Any, ...], KernelCost] = {}
    for kernel, costs in failing:
        key = _signature(kernel)
        groups.setdefault(key, []).append(kernel)
        if costs:
            best[key] = min(costs, key=lambda c: c.sram.total)
    parts = []
    for key, kernels in list(groups.items())[:3]:
        k = kernels[0]
        more = f", {len(kernels) - 1} more like it" if len(kernels) > 1 else ""
        if key not in best:  # a frontier model: it lists fitting shapes only
            parts.append(
                f"kernel {k.name!r} ({k.kind.value}{more}) has no shape within the "
                f"{ctx.target.fabric.program_height}x{ctx.target.fabric.program_width} program "
                f"rectangle and its SRAM; would help: a bigger target"
            )
            continue
        c = best[key]
        sram = c.sram.as_dict()
        breakdown = ", ".join(f"{n} {v:,}" for n, v in sram.items() if v)
        dominant = max(_REMEDIES, key=lambda n: sram[n])
        parts.append(
            f"kernel {k.name!r} ({k.kind.value}{more}) needs {c.sram.total:,} B/PE at best "
            f"({c.h}x{c.w}: "
            f"{breakdown}); would help: {_help(dominant, ctx, k, generate)}"
        )
    rest = len(groups) - 3
    tail = f"; and {rest} more distinct kernels" if rest > 0 else ""
    return SizingError(
        f"cannot size {kg.name!r} on {ctx.target.name} ({ctx.precision}): no region shape fits "
        f"{ctx.target.sram.bytes_per_pe:,} B/PE: " + "; ".join(parts) + tail
    )


def _area_error(
    kg: KernelGraph,
    ctx: CostContext,
    menus: _Choice,
    budget: int,
    fill: float,
    generate: bool = False,
) -> SizingError:
    by_size = sorted(menus, key=lambda km: -km[1].smallest.area)
    need = sum(m.smallest.area for _, m in menus)
    largest = ", ".join(f"{k.name!r} {m.smallest.area:,}" for k, m in by_size[:3])
    weights = sum(k.weight_bytes(ctx.precision) for k in kg.kernels)
    per_pe = weights // ctx.target.usable_pes
    return SizingError(
        f"cannot size {kg.name!r} on {ctx.target.name} ({ctx.precision}): its kernels need "
        f"{need:,} PEs at their smallest fitting shapes but fill {fill} x "
        f"{ctx.target.usable_pes:,} usable PEs = {budget:,} (largest: {largest}); weights alone "
        f"are {weights:,} B = {per_pe:,} B/PE vs {ctx.target.sram_budget_bytes:,} B/PE of data "
        f"SRAM; would help: {_help('weights', ctx, generate=generate)}"
    )


# --- strategies ----------------------------------------------------------------------------------


def _prepare(
    kg: KernelGraph,
    target: Target,
    precision: Precision,
    fill: float,
    chunk_tokens: int,
    max_aspect: float,
    train: TrainCosts | None = None,
    raw: _RawCosts | None = None,
    generate: bool = False,
    single_buffered: bool = False,
) -> tuple[CostContext, _Choice, int]:
    kg.verify()
    check_precision(precision)
    if not 0 < fill <= 1:
        raise ValueError(f"fill must be in (0, 1], got {fill}")
    ctx = CostContext(target, precision, chunk_tokens, train, single_buffered)
    menus = _menus(kg, ctx, max_aspect, raw=raw, generate=generate)
    budget = math.floor(fill * target.usable_pes)
    if sum(m.smallest.area for _, m in menus) > budget:
        raise _area_error(kg, ctx, menus, budget, fill, generate)
    return ctx, menus, budget


@dataclass(frozen=True)
class FitBounds:
    """Placement-free lower bounds: does the model fit the target at all (`wsecc check`)?"""

    min_pes: int  # sum over kernels of the smallest region whose PEs fit their SRAM
    usable_pes: int
    min_sram_per_pe: int  # max over kernels of the least SRAM per PE any of its shapes needs
    sram_per_pe: int

    @property
    def fits(self) -> bool:
        return self.min_pes <= self.usable_pes and self.min_sram_per_pe <= self.sram_per_pe

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "fits": self.fits}


def _checked_menus(
    kg: KernelGraph,
    target: Target,
    precision: Precision,
    chunk_tokens: int,
    max_aspect: float,
    single_buffered: bool,
) -> _Choice:
    """Each kernel's menu of shapes after checking `kg` and `precision` (raises SizingError
    when a kernel fits no shape): what `fit_bounds` and `smallest_costs` read."""
    kg.verify()
    check_precision(precision)
    ctx = CostContext(target, precision, chunk_tokens, single_buffered=single_buffered)
    return _menus(kg, ctx, max_aspect)


def fit_bounds(
    kg: KernelGraph,
    target: Target,
    precision: Precision,
    *,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    max_aspect: float = DEFAULT_MAX_ASPECT,
    single_buffered: bool = False,
) -> FitBounds:
    """Lower bounds on PEs and SRAM per PE, from each kernel's candidate shapes (no sizing).

    Raises SizingError (the same one-line error as sizing) when a kernel fits no shape.
    """
    menus = _checked_menus(kg, target, precision, chunk_tokens, max_aspect, single_buffered)
    return FitBounds(
        min_pes=sum(m.smallest.area for _, m in menus),
        usable_pes=target.usable_pes,
        min_sram_per_pe=max((m.least_sram for _, m in menus), default=0),
        sram_per_pe=target.sram.bytes_per_pe,
    )


def smallest_costs(
    kg: KernelGraph,
    target: Target,
    precision: Precision,
    *,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    max_aspect: float = DEFAULT_MAX_ASPECT,
    single_buffered: bool = False,
) -> list[KernelCost]:
    """Each kernel's smallest fitting shape as its kind costs it (the shapes `fit_bounds` sums),
    in `kg`'s order: what the SRAM of a model's fewest PEs holds (`wsecc.core.sizing_bytes`).
    Raises SizingError as `fit_bounds` does."""
    menus = _checked_menus(kg, target, precision, chunk_tokens, max_aspect, single_buffered)
    return [m.smallest for _, m in menus]


def smallest_region(
    kernel: Kernel, ctx: CostContext, max_aspect: float = DEFAULT_MAX_ASPECT
) -> KernelCost | None:
    """`kernel`'s smallest shape that fits a PE's SRAM in `ctx`, alone (no routed flows
    charged), as its kind costs it; None when no shape of its menu fits."""
    menu = _menu_of(kernel, ctx, max_aspect)[1]
    return None if menu is None else menu.smallest


def fits_a_region(
    kernel: Kernel,
    target: Target,
    precision: Precision,
    *,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    max_aspect: float = DEFAULT_MAX_ASPECT,
    single_buffered: bool = False,
) -> bool:
    """Whether some shape of `kernel`'s menu fits a PE's SRAM on `target` (what sizing needs of
    every kernel before it looks at the area)."""
    ctx = CostContext(target, precision, chunk_tokens, single_buffered=single_buffered)
    return smallest_region(kernel, ctx, max_aspect) is not None


def size_regions(
    kg: KernelGraph,
    target: Target,
    precision: Precision,
    *,
    fill: float = DEFAULT_FILL,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    max_aspect: float = DEFAULT_MAX_ASPECT,
    alt_tolerance: float = DEFAULT_ALT_TOLERANCE,
    max_alternatives: int = DEFAULT_MAX_ALTERNATIVES,
    train: TrainCosts | None = None,
    single_buffered: bool = False,
) -> Sizing:
    """Region shapes minimising the slowest stage's cycles per sample (see the module doc).
    With `train`, every kernel is costed with what pipelined training adds (`TrainCosts`);
    `single_buffered`: every stream holds one chunk, not two (`CostContext.single_buffered`).

    Verifies the graph first. Guarantees: every PE within target.sram.bytes_per_pe, every region
    within the program rectangle, total area within fill x usable PEs. Raises SizingError (one
    line) when no assignment exists.
    """
    raw: _RawCosts = {}  # the kinds' costs, shared by both balances
    ctx, menus, budget = _prepare(
        kg, target, precision, fill, chunk_tokens, max_aspect, train, raw,
        single_buffered=single_buffered,
    )  # fmt: skip
    choice = _balanced(menus, budget)
    # Lanes crossing a region share its links: size again with every region's edges charged
    # the busiest crossable region's link time of this first balance (`_with_edges`).
    headroom = 0 if train is not None else crossing_headroom([c for _, _, c in choice])
    if headroom:
        choice = _balanced(_menus(kg, ctx, max_aspect, headroom, raw), budget)
    sizing = _sizing("balanced", kg, ctx, fill, choice, alt_tolerance, max_alternatives)
    return replace(sizing, crossing_headroom=headroom)


def _balanced(menus: _Choice, budget: int) -> list[tuple[Kernel, Menu, KernelCost]]:
    """Each kernel's smallest shape within the least stage time T whose areas fit `budget`."""

    def area_at(T: int) -> int:
        total = 0
        for _, m in menus:
            pick = m.within(T)
            if pick is None:
                return budget + 1
            total += pick.area
        return total

    # least T whose areas fit; at the slowest smallest shape every kernel fits its smallest
    slowest = max(m.smallest.cycles_per_sample for _, m in menus)
    T = least_true(lambda t: area_at(t) <= budget, 0, slowest)
    return [(k, m, m.within(T) or m.smallest) for k, m in menus]


DECODE_SEARCH_STEPS = 60
"""Bisection steps on the area price of `size_for_decode` (a factor 2^-60 of its range)."""


def size_for_decode(
    kg: KernelGraph,
    target: Target,
    precision: Precision,
    *,
    batch: int,
    fill: float = DEFAULT_FILL,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    max_aspect: float = DEFAULT_MAX_ASPECT,
    alt_tolerance: float = DEFAULT_ALT_TOLERANCE,
    max_alternatives: int = DEFAULT_MAX_ALTERNATIVES,
    single_buffered: bool = False,
) -> Sizing:
    """Generate mode: region shapes minimising the decode step's latency, the sum of the
    kernels' step latencies (`KindDef.decode`, `batch` sequences), under the same SRAM and area
    constraints as `size_regions`.

    A Lagrangian relaxation of the area budget: at a price p per PE, each kernel independently
    takes the shape of its menu minimising latency + p x area; the least p whose choices fit
    fill x usable PEs is found by bisection. Every kernel is on a decoder's step path, so the
    sum is the path's kernel time (flows and host I/O are not shaped here). `single_buffered`:
    every stream holds one chunk, not two (`CostContext.single_buffered`). Raises SizingError
    as `size_regions` does, or when a kind has no decode model."""
    ctx, menus, budget = _prepare(
        kg, target, precision, fill, chunk_tokens, max_aspect, generate=True,
        single_buffered=single_buffered,
    )  # fmt: skip
    fronts: dict[int, list[tuple[int, int, KernelCost]]] = {}  # menu -> (area, latency, cost)
    # a step latency depends on the kernel's kind and params and the shape, not on the routed
    # flows that give equal kernels menus of their own: each worked out once (Llama 3.1 8B:
    # 41,780 of 56,484)
    latencies: dict[tuple[Any, int, int], int] = {}
    for k, m in menus:
        if id(m) in fronts:
            continue
        decode = k.spec.decode
        if decode is None:
            raise SizingError(f"{k.describe()} has no decode model: it cannot generate")
        signature = _signature(k)
        front: list[tuple[int, int, KernelCost]] = []
        for c in sorted(m.shapes_within(None), key=lambda c: c.area):
            lat = latencies.get((signature, c.h, c.w))
            if lat is None:
                lat = decode(k.params, c.h, c.w, ctx, batch).latency
                latencies[(signature, c.h, c.w)] = lat
            if not front or lat < front[-1][1]:  # larger and faster only
                front.append((c.area, lat, c))
        fronts[id(m)] = front

    def pick(price: float) -> list[KernelCost]:
        best = {key: min(f, key=lambda e: e[1] + price * e[0])[2] for key, f in fronts.items()}
        return [best[id(m)] for _, m in menus]

    def area(price: float) -> int:
        return sum(c.area for c in pick(price))

    lo, hi = 0.0, 1.0
    while area(hi) > budget:
        hi *= 4
    if area(lo) > budget:
        for _ in range(DECODE_SEARCH_STEPS):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if area(mid) <= budget else (mid, hi)
    else:
        hi = lo
    choice = [(k, m, c) for (k, m), c in zip(menus, pick(hi), strict=True)]
    return _sizing("decode", kg, ctx, fill, choice, alt_tolerance, max_alternatives)


def sizing_at(
    base: Sizing,
    kg: KernelGraph,
    target: Target,
    precision: Precision,
    shapes: Mapping[str, tuple[int, int]] | None = None,
    *,
    train: TrainCosts | None = None,
) -> Sizing:
    """`base` with every kernel costed again at a fixed shape (h, w) — the placed one when
    `shapes` names it, else base's — in `precision`: what a placement achieves, or the same
    placement in another precision. Alternatives are dropped (the shapes are decided).
    Raises SizingError when a kernel's PE no longer fits its SRAM in `precision`."""
    check_precision(precision)
    ctx = CostContext(target, precision, base.chunk_tokens, train, base.single_buffered)
    shapes = shapes or {}
    kernels, over = [], []
    flows = routed_flow_bytes(kg, precision)
    for ks in base.kernels:
        h, w = shapes.get(ks.name, (ks.h, ks.w))
        k = kg.kernel(ks.name)
        c = cost_at(k, h, w, ctx)
        if k.spec.frontier is None:
            c = _with_edges(c, flows[ks.name], ctx, base.crossing_headroom)
        if c.sram.total > target.sram.bytes_per_pe:
            over.append(f"{ks.name!r} {c.sram.total:,} B")
        kernels.append(
            KernelSizing(
                ks.name, ks.kind, h, w, c.sram, c.compute_cycles, c.link_cycles,
                edge_cycles=c.edge_cycles,
            )
        )  # fmt: skip
    if over:
        raise SizingError(
            f"in {precision} these regions exceed {target.sram.bytes_per_pe:,} B/PE: "
            + ", ".join(over[:3])
            + (f" and {len(over) - 3} more" if len(over) > 3 else "")
            + f"; compile again with --precision {precision} to size for it"
        )
    used = sum(k.h * k.w for k in kernels)
    return replace(
        base,
        # placed alternatives may hold a few % more area than the fill target sized for
        fill=max(base.fill, min(1.0, (used + 0.5) / target.usable_pes)),
        target=target.name,
        precision=precision,
        peak_flops_per_cycle=target.usable_pes * target.flops_per_cycle[precision],
        kernels=tuple(kernels),
    )


def work_proportional_sizing(
    kg: KernelGraph,
    target: Target,
    precision: Precision,
    *,
    fill: float = DEFAULT_FILL,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    max_aspect: float = DEFAULT_MAX_ASPECT,
) -> Sizing:
    """Baseline: kernel k gets area a_k = budget x flops_k / sum flops, i.e. its fastest fitting
    shape with area <= a_k (its smallest fitting shape if none is that small)."""
    ctx, menus, budget = _prepare(kg, target, precision, fill, chunk_tokens, max_aspect)
    total = kg.flops_per_sample
    choice = []
    for k, m in menus:
        share = budget * k.flops_per_sample / total
        within = [c for c in m.shapes_within(None) if c.area <= share]
        best = min(within, key=lambda c: (c.cycles_per_sample, c.area)) if within else m.smallest
        choice.append((k, m, best))
    return _sizing("work-proportional", kg, ctx, fill, choice, 0.0, 0)


def _alternatives(
    menu: Menu, chosen: KernelCost, T: int, tolerance: float, limit: int
) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]:
    """Other shapes for the placer: cycles <= T, area within `tolerance` above the chosen one,
    aspect ratios (h / w) at least 10% apart, smallest area first; the first `limit` are the
    alternatives, the next (up to POOL_MAX) the pool."""
    picked: list[tuple[int, int]] = []
    ratios = [chosen.h / chosen.w]
    shapes = menu.shapes_within(T)
    start = bisect.bisect_left([c.area for c in shapes], chosen.area)
    for c in shapes[start:]:
        if len(picked) >= limit + POOL_MAX or c.area > chosen.area * (1 + tolerance):
            break
        r = c.h / c.w
        if all(abs(math.log(r / q)) > math.log(1.1) for q in ratios):
            picked.append((c.h, c.w))
            ratios.append(r)
    return tuple(picked[:limit]), tuple(picked[limit:])


def _sizing(
    strategy: str,
    kg: KernelGraph,
    ctx: CostContext,
    fill: float,
    choice: Sequence[tuple[Kernel, Menu, KernelCost]],
    alt_tolerance: float,
    max_alternatives: int,
) -> Sizing:
    T = max(c.cycles_per_sample for _, _, c in choice)
    memo: dict[tuple[int, int, int], tuple[tuple[tuple[int, int], ...], ...]] = {}
    kernels = []
    for k, m, c in choice:
        key = (id(m), c.h, c.w)  # kernels sharing a menu and a shape share alternatives
        if key not in memo:
            memo[key] = _alternatives(m, c, T, alt_tolerance, max_alternatives)
        kernels.append(
            KernelSizing(
                name=k.name,
                kind=k.kind.value,
                h=c.h,
                w=c.w,
                sram=c.sram,
                compute_cycles=c.compute_cycles,
                link_cycles=c.link_cycles,
                alternatives=memo[key][0],
                edge_cycles=c.edge_cycles,
                pool=memo[key][1],
            )
        )
    target = ctx.target
    return Sizing(
        strategy=strategy,
        graph=kg.name,
        target=target.name,
        precision=ctx.precision,
        fill=fill,
        chunk_tokens=ctx.chunk_tokens,
        clock_hz=target.clock.hz,
        usable_pes=target.usable_pes,
        sram_bytes_per_pe=target.sram.bytes_per_pe,
        tokens_per_sample=kg.tokens_per_sample,
        flops_per_sample=kg.train_flops_per_sample if ctx.train else kg.flops_per_sample,
        peak_flops_per_cycle=target.usable_pes * target.flops_per_cycle[ctx.precision],
        kernels=tuple(kernels),
        single_buffered=ctx.single_buffered,
    )
