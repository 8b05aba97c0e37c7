"""The compile's stages as pure functions over products (no CLI or Compilation state).

    model.onnx ─load─▶ Graph ─fuse─▶ fused Graph ─lower_and_size─▶ KernelGraph, Sizing
               ─place_and_route─▶ Program ─simulate─▶ SramMap, L0, L1

`wsecc.compiler.Compilation` runs them one at a time, times them and keeps their products.

`place_and_route` owns the one feedback loop of the flow: sizing fills at most FILL_STEPS[0]
of the fabric, and when the placer cannot pack those regions the kernels are sized again at
the next, lower fill — so the placer always gets a problem it can legalise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from wsecc.ir.core import Graph
from wsecc.kernels import DEFAULT_CHUNK_TOKENS, KernelGraph, Sizing, size_regions, sizing_at
from wsecc.lanes import lane_bytes, lanes_within
from wsecc.options import Options
from wsecc.passes import DEFAULT_PIPELINE, LOWERING
from wsecc.place.api import place
from wsecc.place.from_kernels import placement_problem
from wsecc.place.manual import load_pins, with_pins
from wsecc.place.problem import Placement, PlacementError, PlacementProblem, validate_placement
from wsecc.pm import NumericsCheck, PassContext, PassManager, PassRecord
from wsecc.program import Program
from wsecc.route.problem import (
    Routing,
    RoutingError,
    RoutingProblem,
    crossed_regions,
    make_routing_problem,
    validate_routing,
)
from wsecc.route.router import route
from wsecc.targets import Target
from wsecc.vocab import Mode, SimLevel

if TYPE_CHECKING:
    from wsecc.frontend.onnx import ModelInfo
    from wsecc.kernels.costs import TrainCosts
    from wsecc.sim.events import EventResult
    from wsecc.sim.perf import PerfResult
    from wsecc.sim.sram import SramMap

FILL_STEPS = (0.85, 0.75, 0.65, 0.55)


def load(path: Path, options: Options) -> tuple[Graph, ModelInfo]:
    """Load, bind and import the ONNX file (folded, into the wsecc IR)."""
    from wsecc.frontend.onnx import import_model

    return import_model(
        path, batch=bound_batch(options), seq=options.seq, dims=dict(options.dims),
        weights=options.weights,
    )  # fmt: skip


def bound_batch(options: Options) -> int:
    """The batch the graph is bound at: `options.batch`, or 1 in train mode, whose kernels are
    per sample (the global batch is the step's, `wsecc.train`)."""
    return options.batch if options.mode is Mode.INFER and options.batch else 1


def per_sample_batch(options: Options) -> int:
    """The batch a graph must be bound at for `options` when it may be shared with other
    batches: `bound_batch`, or 1 when numerics do not run (`validate` false), for then every
    later stage is per sample (kernels, sizing, placement) or takes the batch as a number
    (performance). A sweep's points that differ in batch alone share one frontend this way."""
    return bound_batch(options) if options.validate is not False else 1


def fuse(graph: Graph, model_path: Path, options: Options) -> tuple[Graph, list[PassRecord]]:
    """The pass pipeline (canonicalize and fuse); with `check_each_pass`, every pass's graph is
    checked against onnxruntime on `model_path`."""
    numerics = None
    if options.check_each_pass:
        from wsecc.numerics import make_inputs, ort_run

        feeds = make_inputs(graph)
        numerics = NumericsCheck(feeds, ort_run(model_path, feeds))
    pm = PassManager(
        DEFAULT_PIPELINE,
        print_after_all=options.print_after_all,
        dump_dir=Path(options.dump_dir) if options.dump_dir else None,
        numerics=numerics,
    )
    fused, records = pm.run(graph, PassContext())
    assert isinstance(fused, Graph)  # the fusion pipeline stays at the graph level
    return fused, records


def lower(fused: Graph) -> KernelGraph:
    """The `lower` pass (it requires a fused graph): kernels and flows, per sample."""
    kg, _ = PassManager(LOWERING).run(fused)
    assert isinstance(kg, KernelGraph)  # lowering produces the KERNELS level
    return kg


def lower_and_size(
    fused: Graph, target: Target, precision: str, chunk_tokens: int = DEFAULT_CHUNK_TOKENS
) -> tuple[KernelGraph, Sizing]:
    """Lower and size at the first fill."""
    kg = lower(fused)
    return kg, size_regions(kg, target, precision, fill=FILL_STEPS[0], chunk_tokens=chunk_tokens)


def lane_bytes_per_sample(sizing: Sizing, target: Target) -> float:
    """What one lane carries in one stage time: stage cycles per sample x link bytes per cycle.

    A flow gets `wsecc.lanes.lanes_within(bytes per sample, this)` lanes (as many as its facing
    edges allow), so it moves a sample's data within the stage time and the fabric does not
    become the bottleneck the sizing balanced against.
    """
    return lane_bytes(sizing.stage_cycles, target.link_bytes_per_cycle)


LANE_CAPS = (16, 4, 1)
"""Lanes per flow tried in turn when narrowing the flows at the congestion does not route: at
most 16, 4, 1 for every flow."""
NARROWINGS = 4
"""Times a failed routing takes a quarter of the lanes (rounded up) from the flows it failed on
(those crossing an overloaded link, or the router short of colors) before the caps above narrow
every flow: 16 lanes become 12, 9, 6, 4."""


def _route_widest(
    problem: PlacementProblem,
    placement: Placement,
    sizing: Sizing,
    target: Target,
    say: Callable[[str], None],
) -> tuple[RoutingProblem, Routing]:
    """Route with as many lanes per flow as the bandwidth needs (edge slots permitting). While
    it does not route, narrow the flows it failed on by a quarter (up to `NARROWINGS` times),
    then cap every flow (`LANE_CAPS`). Raises the narrowest attempt's
    RoutingError when even one lane per flow cannot route."""

    def problem_at(cap: int | None) -> RoutingProblem:
        return make_routing_problem(
            problem,
            placement,
            colors_total=target.colors.total,
            colors_reserved=target.colors.reserved,
            bytes_per_lane=lane_bytes_per_sample(sizing, target),
            max_lanes=cap,
        )

    rp = problem_at(None)
    for attempt in range(NARROWINGS + 1):
        try:
            routing = route(rp, placement)
        except RoutingError as e:
            fewer = {
                f.name: f.lanes * 3 // 4 for f in rp.flows if f.name in e.flows and f.lanes > 1
            }
            if not fewer or attempt == NARROWINGS:
                break
            say(
                f"route      {str(e)[:60]}...: a quarter fewer lanes for the {len(fewer)} flows it failed on"
            )
            narrower = tuple(replace(f, lanes=fewer.get(f.name, f.lanes)) for f in rp.flows)
            rp = replace(rp, flows=narrower)
            continue
        return _widest_crossing(problem, placement, sizing, target, rp, routing, say)
    for cap in LANE_CAPS:
        rp = problem_at(cap)
        try:
            return rp, route(rp, placement)
        except RoutingError as e:
            if cap == LANE_CAPS[-1]:
                raise
            say(
                f"route      at most {cap} lanes per flow do not route ({str(e)[:80]}...); fewer lanes"
            )
    raise AssertionError("unreachable")


WIDENINGS = 2
"""Routing attempts with wider lanes for the flows that cross regions (`_widened`); after a
failure the flows it failed on step back a quarter of the way to their first lane counts."""


def _widest_crossing(
    problem: PlacementProblem,
    placement: Placement,
    sizing: Sizing,
    target: Target,
    rp: RoutingProblem,
    routing: Routing,
    say: Callable[[str], None],
) -> tuple[RoutingProblem, Routing]:
    """The routing of `rp`, or one whose flows crossing other regions have more lanes."""
    wider = _widened(problem, placement, sizing, target, rp, routing)
    if wider is None:
        return rp, routing
    first = {f.name: f.lanes for f in rp.flows}
    for _ in range(WIDENINGS):
        if wider is None:
            break
        try:
            return wider, route(wider, placement)
        except RoutingError as e:
            back = tuple(
                replace(f, lanes=f.lanes - (f.lanes - first[f.name] + 3) // 4)
                if f.name in e.flows
                else f
                for f in wider.flows
            )
            wider = replace(wider, flows=back) if back != wider.flows else None
    say("route      wider lanes for the flows crossing regions do not route; kept the first")
    return rp, routing


def _widened(
    problem: PlacementProblem,
    placement: Placement,
    sizing: Sizing,
    target: Target,
    rp: RoutingProblem,
    routing: Routing,
) -> RoutingProblem | None:
    """`rp` with more lanes for the flows whose lanes cross other kernels' regions, or None when
    none needs more. A crossing lane's bytes share the region's links with the kernel's own
    traffic (L0 adds them to its busiest link), so such a flow gets the lanes at which each
    carries at most what the busiest of those kernels leaves in the stage time:
    lanes_within(bytes, lane_bytes(T - its link cycles, L)), as many as its edge slots hold."""
    T, L = sizing.stage_cycles, target.link_bytes_per_cycle
    own = {k.name: k.link_cycles for k in sizing.kernels}
    crossed = crossed_regions(routing, placement)
    if not crossed:
        return None
    slots = make_routing_problem(problem, placement, bytes_per_lane=0.5**30, max_lanes=None)
    room = {f.name: f.lanes for f in slots.flows}
    flows, changed = [], False
    for f in rp.flows:
        slack = T - max((own.get(k, 0) for k in crossed.get(f.name, ())), default=T)
        lanes = f.lanes
        if 0 < slack < T:
            lanes = max(
                lanes, min(room[f.name], lanes_within(f.bytes_per_sample, lane_bytes(slack, L)))
            )
        changed |= lanes != f.lanes
        flows.append(replace(f, lanes=lanes))
    return replace(rp, flows=tuple(flows)) if changed else None


@dataclass(frozen=True)
class Placed:
    problem: PlacementProblem
    program: Program  # its sizing: the one that packed, costed at the placed shapes


def place_and_route(
    kg: KernelGraph,
    sizing: Sizing,
    target: Target,
    precision: str,
    *,
    placer: str,
    time_budget_s: float,
    seed: int = 0,
    deterministic: bool = False,
    pins: str | None = None,
    say: Callable[[str], None] = lambda s: None,
    train: TrainCosts | None = None,
) -> Placed:
    """Place (re-sizing at lower fill while the regions do not pack), route, validate.

    `time_budget_s` bounds the placement attempts together (re-sizings included), not routing.
    With `train`, every (re-)sizing costs the kernels as pipelined training does.

    Guarantees: the placement and routing pass the solver-free validators. Raises
    PlacementError / RoutingError (one line) when no legal result exists.
    """
    deadline = time.perf_counter() + time_budget_s
    for i, fill in enumerate(FILL_STEPS):
        if i:
            sizing = size_regions(
                kg, target, precision, fill=fill, chunk_tokens=sizing.chunk_tokens, train=train
            )
            say(f"size       re-sized at {100 * fill:.0f}% fill: {sizing.summary()}")
        problem = placement_problem(kg, sizing, target, precision)
        if pins:
            problem = with_pins(problem, load_pins(pins))
        try:
            # one budget for all attempts (deterministic mode: a work quota, the same each time)
            left = time_budget_s if deterministic else max(0.5, deadline - time.perf_counter())
            placement = place(
                problem,
                placer=placer,
                time_budget_s=left,
                seed=seed,
                deterministic=deterministic,
            )
            break
        except PlacementError as e:
            if i == len(FILL_STEPS) - 1:
                raise
            say(f"place      regions at {100 * fill:.0f}% fill do not pack: {str(e)[:100]}...")
    # what the placement achieves: each kernel costed at its placed shape (one of its menu's)
    shapes = {name: (r.h, r.w) for name, r in placement.rects.items()}
    sizing = sizing_at(sizing, kg, target, precision, shapes, train=train)
    rp, routing = _route_widest(problem, placement, sizing, target, say)
    # A result that fails the validators is a bug in wsecc, not in the user's input.
    bad = validate_placement(problem, placement) + validate_routing(rp, placement, routing)
    if bad:
        raise RuntimeError(f"placement/routing failed validation: {bad[0]}")
    return Placed(problem, Program(kg, sizing, placement, routing, target))


def simulate(program: Program, options: Options) -> tuple[SramMap, PerfResult, EventResult | None]:
    """The SRAM map, L0, and L1 when `options.sim` is l1, of a placed and routed program. L1's
    skew buffers take at most the SRAM each kernel's fullest PE leaves (fewer chunks, and L1
    shows the back-pressure, where a buffer would not fit), and the map charges them to the
    kernels that hold them."""
    from wsecc.errors import SimulationError
    from wsecc.sim.events import buffer_bytes_per_pe, simulate_l1
    from wsecc.sim.perf import simulate_l0
    from wsecc.sim.sram import SramError, sram_map

    perf = simulate_l0(program, options.batch)
    plain = sram_map(program)
    if options.sim is not SimLevel.L1:
        return plain, perf, None
    room = {k: plain.sram_bytes_per_pe - used for k, used in plain.kernel_max.items()}
    try:
        events = simulate_l1(program, options.batch, samples=options.sim_samples, skew_room=room)
    except SimulationError as stalled:
        # Cut to fit, the buffers stall the pipeline (a barrier waits on a residual): the
        # program needs them whole, and the map of the whole ones says where they do not fit.
        events = simulate_l1(program, options.batch, samples=options.sim_samples)
        try:
            sram_map(program, extra_buffers=buffer_bytes_per_pe(events))
        except SramError as e:
            raise SramError(f"{e}; cut to fit, they stall the pipeline ({stalled})") from None
        raise stalled from None  # they fit whole: the stall is not theirs
    return sram_map(program, extra_buffers=buffer_bytes_per_pe(events)), perf, events
