"""Solve an ISPD 2020 benchmark: size the kernels for a Δt, pack them, refine the wirelength.

Steps (all inside `time_budget_s`):

1. **Lower bound.** Δt_LB = the least Δt with Σ_kernels min area(Δt) ≤ W·H (size.py). No legal
   solution has a smaller Δt.
2. **Least packable Δt.** Binary search for the least Δt at which the serpentine column
   floorplan (floorplan.py, width-minimising DP) fits: Δt_pack. Packability is monotone in Δt
   (a larger Δt only adds shapes), so bisection is exact for this floorplan family. If some
   kernels are long at the bound (least-area shapes longer than half the fabric) and a
   full-width band of them under the columns packs at a smaller Δt with a better score (tried
   only when the columns pack more than `band_gap` above the bound), the band is kept
   (`with_band`, floorplan.band_floorplan) and every later floorplan tries both layouts.
3. **Δt / wirelength trade-off.** score = wdeltat·Δt + wlength·WL, and a looser Δt buys
   thinner kernels and fewer columns. Any Δt above Δt_pack + (wlength/wdeltat)·WL(Δt_pack)
   cannot win, so Δt values in that window are scanned with the wirelength-aware DP and each
   floorplan's exact score is computed.
4. **Refinement.** The best floorplans become `PlacementProblem`s (kernels with their chosen
   shape first plus neighbouring frontier shapes, R0 and R90 as alternatives; one flow of
   weight 1 per kernel→kernel edge) and go to the shared CP-SAT placer, started from the
   floorplan (placer.py).
5. The best placement is written as a contest `Solution` and re-scored by score.py, next to a
   lower bound on the score (size.py; it says more than Δt / Δt_LB when wlength is large).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from fractions import Fraction

from wsecc.ispd2020.floorplan import (
    Floorplan,
    Oriented,
    band_floorplan,
    column_floorplan,
    long_kernels,
    orientations,
)
from wsecc.ispd2020.kgraph import KGraph, kernel_sequence
from wsecc.ispd2020.perf import KernelSpec, kernel_graph, kernel_spec
from wsecc.ispd2020.placer import refine
from wsecc.ispd2020.score import KernelPlacement, Score, Solution, score_solution
from wsecc.ispd2020.size import Sizer, contest_target
from wsecc.kernels.costs import least_true
from wsecc.place.problem import PlaceFlow, PlaceKernel, PlacementProblem, Rect


@dataclass(frozen=True)
class SolveOptions:
    time_budget_s: float = 60.0
    seed: int = 0
    deterministic: bool = False
    scan_share: float = 0.6  # of the budget for step 3
    scan_points: int = 200  # DP runs in step 3 (at most)
    # deterministic mode: the scan stops after one DP run per this many seconds of its share
    # (instead of on the wall clock), so the same input, seed and budget give the same result
    deterministic_dp_seconds: float = 0.5
    junctions: tuple[Fraction, ...] = (Fraction(0), Fraction(1, 4))  # DP variants per Δt
    refine_top: int = 2  # floorplans refined in step 4, at most
    refine_hope: float = 0.03  # refine a runner-up only if 3% less WL would make it win
    neighbour_shapes: int = 2  # frontier neighbours offered on each side of the chosen shape
    # try a band of long kernels (with_band) only if the columns pack this far above the bound
    band_gap: float = 0.05


@dataclass(frozen=True)
class SolveResult:
    solution: Solution
    score: Score
    lower_bound: int  # Δt_LB: the larger of the area and the pair bound
    packable_dt: int  # Δt_pack
    floorplan_score: float  # best score before refinement
    seconds: float
    log: tuple[str, ...]
    area_bound: int = 0  # Δt_LB from area alone (≤ lower_bound)
    bound_kind: str = "area"  # "area" or "pairs": which bound lower_bound is
    score_bound: float = 0.0  # a lower bound on the score (Sizer.score_lower_bound)

    @property
    def gap(self) -> float:
        """(Δt − Δt_LB) / Δt_LB."""
        return (self.score.delta_t - self.lower_bound) / self.lower_bound


@dataclass(frozen=True)
class Instance:
    """A graph's kernels in floorplan sequence order, with their edges as sequence positions."""

    graph: KGraph
    specs: tuple[KernelSpec, ...]
    edges: tuple[tuple[int, int], ...]
    band: frozenset[int] = frozenset()  # kernels a full-width band may take (band_floorplan)

    @staticmethod
    def of(graph: KGraph) -> Instance:
        nodes = kernel_sequence(graph)
        pos = {n.index: i for i, n in enumerate(nodes)}
        edges = tuple((pos[e.src], pos[e.dst]) for e in graph.kernel_edges)
        return Instance(graph, tuple(kernel_spec(n) for n in nodes), edges)

    def sizer(self) -> Sizer:
        """The shared sizing's view of this graph: its kernel graph on the contest target."""
        return Sizer(kernel_graph(self.graph), contest_target(self.graph))

    @property
    def fabric(self) -> tuple[int, int]:
        return (self.graph.width, self.graph.height)


@dataclass(frozen=True)
class Candidate:
    """The best floorplan found at a target Δt: its exact Δt, wirelength and score, and the
    DP's wirelength estimate with junction = 0 (monotone in the target Δt; used by `scan`)."""

    target_dt: int
    floorplan: Floorplan
    delta_t: int
    wirelength: float
    score: float
    estimate: int


def _candidate(
    inst: Instance, sizer: Sizer, dt: int, junctions: tuple[Fraction | None, ...]
) -> Candidate | None:
    """The floorplan of least exact score over the DP variants `junctions` (the first one
    sets `estimate`), or None if the kernels do not pack at dt."""
    options = [orientations(sizer.frontier(spec, dt)) for spec in inst.specs]
    if any(not o for o in options):
        return None
    g = inst.graph
    best: Candidate | None = None
    for fp in _floorplans(inst, options, junctions):
        wl = _wirelength(fp.rects, inst.edges)
        delta_t = max(o.shape.time for o in fp.choices)
        score = g.wdeltat * delta_t + g.wlength * wl
        if best is None or score < best.score:
            best = Candidate(dt, fp, delta_t, wl, score, best.estimate if best else fp.objective)
    return best


def _floorplans(
    inst: Instance, options: list[tuple[Oriented, ...]], junctions: tuple[Fraction | None, ...]
) -> Iterator[Floorplan]:
    """The column floorplan per DP variant, then (if the instance has a band) the band
    floorplan per variant; nothing for a layout that does not pack (packability does not
    depend on the variant)."""
    edges = list(inst.edges)
    layouts: list[Callable[[Fraction | None], Floorplan | None]] = [
        lambda j: column_floorplan(options, edges, inst.fabric, j)
    ]
    if inst.band:
        layouts.append(lambda j: band_floorplan(options, edges, inst.fabric, j, inst.band))
    for layout in layouts:
        for junction in junctions:
            fp = layout(junction)
            if fp is None:
                break
            yield fp


def _wirelength(rects: tuple[Rect, ...] | list[Rect], edges: tuple[tuple[int, int], ...]) -> float:
    total = 0
    for u, v in edges:
        (ux, uy), (vx, vy) = rects[u].center2(), rects[v].center2()
        total += abs(ux - vx) + abs(uy - vy)
    return total / 2


def least_packable_dt(inst: Instance, sizer: Sizer, lower: int) -> int:
    """Least Δt ≥ lower at which the column floorplan fits (doubling, then bisection)."""

    def packs(dt: int) -> bool:
        return _candidate(inst, sizer, dt, (None,)) is not None

    if packs(lower):
        return lower
    lo, step = lower, max(1, lower // 64)
    hi = lo + step
    while not packs(hi):
        lo, step = hi, step * 2
        hi = lo + step
        if step > 1 << 40:
            raise ValueError(f"{inst.graph.source}: the kernels do not pack at any Δt")
    return least_true(packs, lo, hi)


def with_band(inst: Instance, sizer: Sizer, lower: int, dt_pack: int) -> tuple[Instance, int]:
    """The instance with the band of long kernels that packs at the least Δt < dt_pack, and
    that Δt; or (inst, dt_pack) if no band packs below it.

    The long kernels (`long_kernels`, ranked at Δt = lower) go into the band longest first;
    the first k of them for k = 1..8 and then every 25% more. Each band's packability is
    monotone in Δt (`band_floorplan`) and so is their union, so bisection is exact for the
    family; the band kept is the first one that packs at the Δt found.
    """
    options = [orientations(sizer.frontier(spec, lower)) for spec in inst.specs]
    if any(not o for o in options):
        return inst, dt_pack
    order = long_kernels(options, inst.fabric)
    sizes = sorted({k for k in range(1, 9)} | {int(8 * 1.25**i) for i in range(1, 40)})
    bands = [frozenset(order[:k]) for k in sizes if k <= len(order)]
    edges = list(inst.edges)

    def packing_band(dt: int) -> frozenset[int] | None:
        opts = [orientations(sizer.frontier(spec, dt)) for spec in inst.specs]
        if any(not o for o in opts):
            return None
        for band in bands:
            if band_floorplan(opts, edges, inst.fabric, None, band) is not None:
                return band
        return None

    if not bands or packing_band(dt_pack - 1) is None:
        return inst, dt_pack
    dt = least_true(lambda d: packing_band(d) is not None, lower - 1, dt_pack - 1)
    band = packing_band(dt)
    assert band is not None
    return replace(inst, band=band), dt


def _better_start(
    banded: Instance,
    dt_band: int,
    inst: Instance,
    dt_pack: int,
    sizer: Sizer,
    junctions: tuple[Fraction, ...],
) -> bool:
    """Whether the band's floorplan at its least Δt scores below the columns' at theirs: the
    band's Δt is smaller, but its kernels lie far from their neighbours."""
    band = _candidate(banded, sizer, dt_band, junctions)
    plain = _candidate(inst, sizer, dt_pack, junctions)
    return band is not None and (plain is None or band.score < plain.score)


def scan(
    inst: Instance,
    sizer: Sizer,
    dt_pack: int,
    runs: int,
    deadline: float,
    junctions: tuple[Fraction, ...],
) -> list[Candidate]:
    """Wirelength-aware floorplans for target Δt in [Δt_pack, Δt_pack + (wlength/wdeltat)·WL],
    best score first, one per distinct Δt reached.

    The DP's estimate E(Δt) never increases with Δt (a larger Δt only adds shapes), so the
    estimated score wdeltat·Δt + wlength·E(Δt)/2 is least at the left end of a step of E.
    Best-first bisection finds those steps: an interval [lo, hi] with E(lo) = E(hi) has no step
    inside; otherwise no point inside can score below wdeltat·(lo+1) + wlength·E(hi)/2, which
    orders the intervals and prunes them against the best estimate found. Stops at `deadline`
    (wall clock) or after `runs` target Δt values.
    """
    g = inst.graph
    tried: dict[int, Candidate] = {}

    def estimate(dt: int) -> float:
        c = tried.get(dt) or _candidate(inst, sizer, dt, junctions)
        assert c is not None, "every Δt ≥ Δt_pack packs"
        tried[dt] = c
        return g.wdeltat * dt + g.wlength * c.estimate / 2

    best = estimate(dt_pack)
    if g.wdeltat > 0:
        top = dt_pack + int(g.wlength * tried[dt_pack].wirelength / g.wdeltat) + 1
        best = min(best, estimate(top))
        heap = [(g.wdeltat * dt_pack, dt_pack, top)]
        while heap and len(tried) < runs and time.perf_counter() < deadline:
            bound, lo, hi = heapq.heappop(heap)
            if bound >= best:
                break
            if hi - lo <= 1 or tried[lo].estimate == tried[hi].estimate:
                continue
            mid = (lo + hi) // 2
            best = min(best, estimate(mid))
            for a, b in ((lo, mid), (mid, hi)):
                heapq.heappush(
                    heap, (g.wdeltat * (a + 1) + g.wlength * tried[b].estimate / 2, a, b)
                )
    found: dict[int, Candidate] = {}
    for c in tried.values():
        if c.delta_t not in found or c.score < found[c.delta_t].score:
            found[c.delta_t] = c
    return sorted(found.values(), key=lambda c: c.score)


def placement_problem(
    inst: Instance, sizer: Sizer, cand: Candidate, neighbours: int
) -> tuple[PlacementProblem, list[dict[tuple[int, int], Oriented]]]:
    """The candidate as a shared-placer problem, and per kernel the map (w, h) → oriented shape.

    Each kernel offers its floorplan shape first, then the frontier shapes within `neighbours`
    positions of it, each in R0 and R90 — only shapes no slower than the candidate's Δt, so the
    placer (which sees wirelength only) cannot raise Δt.
    """
    fab_w, fab_h = inst.fabric
    kernels, lookup = [], []
    for spec, chosen in zip(inst.specs, cand.floorplan.choices, strict=True):
        front = sizer.frontier(spec, cand.target_dt)
        at = front.index(chosen.shape)
        near = front[max(0, at - neighbours) : at + neighbours + 1]
        table: dict[tuple[int, int], Oriented] = {(chosen.w, chosen.h): chosen}
        for o in orientations(near):
            if o.w <= fab_w and o.h <= fab_h and o.shape.time <= cand.delta_t:
                table.setdefault((o.w, o.h), o)
        kernels.append(PlaceKernel(spec.name, tuple(table), kind=spec.kind))
        lookup.append(table)
    flows = tuple(PlaceFlow(inst.specs[u].name, inst.specs[v].name, 1.0) for u, v in inst.edges)
    return PlacementProblem(fab_w, fab_h, tuple(kernels), flows), lookup


def _promising(cand: Candidate, best: float, wlength: float, hope: float) -> bool:
    """Worth refining: it would score ≤ `best` if the placer cut its wirelength by `hope`."""
    return cand.score - wlength * hope * cand.wirelength <= best


def to_solution(inst: Instance, choices: list[Oriented], rects: list[Rect]) -> Solution:
    """Sequence-ordered shapes and rectangles as a contest solution, in kgraph order."""
    kernels = {
        spec.name: KernelPlacement(
            spec.name, spec.kind, spec.solution_args(o.shape.params), r.x, r.y, o.rot
        )
        for spec, o, r in zip(inst.specs, choices, rects, strict=True)
    }
    return Solution(tuple(kernels[n.name] for n in inst.graph.kernels))


def solve(graph: KGraph, opts: SolveOptions | None = None) -> SolveResult:
    """Size, pack and place `graph` within the time budget; the result is scored legal."""
    opts = opts or SolveOptions()
    t0 = time.perf_counter()
    log: list[str] = []

    def note(msg: str) -> None:
        log.append(f"{time.perf_counter() - t0:7.2f}s {msg}")

    inst = Instance.of(graph)
    sizer = inst.sizer()
    area = sizer.area_lower_bound()
    note(f"area lower bound Δt ≥ {area}")
    dt_pack = least_packable_dt(inst, sizer, area)
    note(f"least Δt the column floorplan packs: {dt_pack}")
    if dt_pack > (1 + opts.band_gap) * area:
        banded, dt_band = with_band(inst, sizer, area, dt_pack)
        if banded.band and _better_start(banded, dt_band, inst, dt_pack, sizer, opts.junctions):
            note(f"least Δt with {len(banded.band)} long kernels in a band: {dt_band}")
            inst, dt_pack = banded, dt_band
    lower = sizer.pair_lower_bound(inst.specs, area, dt_pack)
    if lower > area:
        note(f"pair lower bound Δt ≥ {lower}")
    scan_s = opts.scan_share * opts.time_budget_s
    if opts.deterministic:
        runs = max(8, int(scan_s / opts.deterministic_dp_seconds))
        cands = scan(inst, sizer, dt_pack, min(runs, opts.scan_points), math.inf, opts.junctions)
    else:
        cands = scan(inst, sizer, dt_pack, opts.scan_points, t0 + scan_s, opts.junctions)
    for c in cands[:5]:
        note(
            f"floorplan Δt={c.delta_t} WL={c.wirelength:g} score={c.score:g} ({len(c.floorplan.columns)} columns)"
        )

    best = (cands[0].score, list(cands[0].floorplan.choices), list(cands[0].floorplan.rects))
    top = [
        c
        for c in cands[: opts.refine_top]
        if _promising(c, best[0], graph.wlength, opts.refine_hope)
    ]
    for n, cand in enumerate(top):
        if opts.deterministic:  # the budget's rest, not the clock's: the same work on any load
            share = (opts.time_budget_s - scan_s) / len(top)
        else:
            share = (opts.time_budget_s - (time.perf_counter() - t0)) / (len(top) - n)
        if share < 0.5:
            break
        problem, lookup = placement_problem(inst, sizer, cand, opts.neighbour_shapes)
        start = {spec.name: r for spec, r in zip(inst.specs, cand.floorplan.rects, strict=True)}
        placement = refine(
            problem, start, time_budget_s=share, seed=opts.seed, deterministic=opts.deterministic
        )
        rects = [placement.rects[spec.name] for spec in inst.specs]
        choices = [lookup[i][(r.w, r.h)] for i, r in enumerate(rects)]
        delta_t = max(o.shape.time for o in choices)
        score = graph.wdeltat * delta_t + graph.wlength * _wirelength(rects, inst.edges)
        note(
            f"refined Δt={delta_t}: WL {cand.wirelength:g} → {placement.objective:g} ({placement.status})"
        )
        if score < best[0]:
            best = (score, choices, rects)
    solution = to_solution(inst, best[1], best[2])
    scored = score_solution(graph, solution)
    if not scored.legal:  # a bug, never an input problem
        raise AssertionError("illegal solution: " + "; ".join(scored.violations))
    # a solution slower than our score / wdeltat scores more than ours: the bound's grid stops there
    upper = math.ceil(scored.score / graph.wdeltat) if graph.wdeltat > 0 else scored.delta_t
    score_bound = sizer.score_lower_bound(
        inst.specs, inst.edges, (graph.wdeltat, graph.wlength), lower, upper, steps=64
    )
    return SolveResult(
        solution=solution,
        score=scored,
        lower_bound=lower,
        packable_dt=dt_pack,
        floorplan_score=cands[0].score,
        seconds=time.perf_counter() - t0,
        log=tuple(log),
        area_bound=area,
        bound_kind="pairs" if lower > area else "area",
        score_bound=score_bound,
    )
