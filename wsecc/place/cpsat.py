"""CP-SAT placer: greedy hint + pairwise separation cuts + full model (small N) + window LNS.

The only module in `wsecc.place` that imports ortools. One model builder serves both the full
model and the LNS windows: a window frees some kernels inside a box and fixes the rest as
constant intervals; the full model is the window "all unpinned kernels, whole fabric".

Model (coordinates in PEs, centres doubled so they stay integral):
    x_i ∈ [bx, bx + bw − w_i],  y_i ∈ [by, by + bh − h_i]       (box = fabric for the full model)
    shape: one Boolean s_ik per allowed shape, Σ_k s_ik = 1, w_i = Σ_k w_k s_ik, h_i likewise
    NoOverlap2D(x-intervals [x_i, x_i + w_i), y-intervals)     (fixed kernels: constant intervals)
    cx_i = 2x_i + w_i,  cy_i = 2y_i + h_i
    dx_ij ≥ ±(cx_i − cx_j),  dy_ij ≥ ±(cy_i − cy_j)            (two inequalities per |·|)
    dx_ij + dy_ij ≥ min(min_w_i + min_w_j, min_h_i + min_h_j)   (redundant separation cut)
    minimise Σ_pairs q_ij (dx_ij + dy_ij),  q_ij = ⌊bytes_ij / unit⌋

Reported objective is always the exact `weighted_wirelength` recomputed from the rectangles.
Reported bound = max(`wsecc.place.bounds.lower_bound` — separation or star —, CP-SAT's proven
bound on the full model × unit / 2, the cluster bound of `wsecc.place.clusters`), and
`bound_kind` says which; CP-SAT's is valid because q_ij · unit ≤ bytes_ij, and is only
available when the full model ran (N ≤ `CpSatOptions.full_model_max_kernels`). The cluster
bound's solves (`cluster_values`: short cycles of flows placed exactly in the plane, one
worker) run in a thread beside the windows, within `bound_share` of the budget: the tiled
start's packings leave that much time for them.

Tiled start (`wsecc.place.tiled`): `pack_unit` packs one transformer layer in a box with the
same model plus `_Period` — the used height `top` ≥ y_i + h_i, and the joins to the next copy
`top` rows below priced as |cx_i − cx_j| + |cy_j + 2·top − cy_i|.

Time budget: greedy, then each sub-solve gets min(its share, remaining − margin) and the clock
is checked between LNS windows; the full model (the only solve whose presolve can overrun its
limit) runs only for N ≤ full_model_max_kernels. Wall time thus stays within the budget.

Search: large-neighbourhood search over `NEIGHBOURHOODS` in turn (a layer's chain, a window of
the fabric, the ends of a costly flow), the incumbent as hint, no linear relaxation. It ends when
it stalls (`_end`): from its first `probe_windows` neighbourhoods on (the probe), it stops when
the last min(n, `stall_windows`) of them took less than `stall_gain` (0.1%) off the wirelength
they began from, and says it could not improve its start when the probe improved nothing
(beside the cluster bound, not taken from the tiled start's packings). The budget is a
ceiling, not a target. `Placement.search` says from which start, by how much and why it
stopped. Default mode limits each window by deterministic time (`window_dtime`), so that it
does the same work at any load, under a wall-clock ceiling (`window_time_s`); a window that
ceiling cut short without improving is "starved" and not counted by the stall rule (the
budget still ends the search), and the status and `Search.reason` say how many there were.

Deterministic mode: every solve uses one worker, a fixed seed and a deterministic-time limit
(2-worker interleaved search was measured NOT to be reproducible in 9.15); the LNS runs at most
a fixed number of windows (budget × det_windows_per_second, less the tiled start's share) drawn
from a seeded RNG, and the stall rule depends on results only. Wall time only guards: each
solve's wall limit is the time left to max(wall_guard_floor_s, wall_guard_factor × budget),
and once that has passed the placement fails in one line (`GuardError`) — a solve the wall
clock cut short never decides a result. Same input + seed → byte-identical
`Placement.dumps(include_timing=False)`, whatever the machine's load. It finds less than the
2-worker default mode.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from wsecc.place.bounds import LowerBound, lower_bound, min_separation
from wsecc.place.clusters import Cluster, cluster_bound
from wsecc.place.greedy import flow_order, greedy_rects
from wsecc.place.layered import layered_rects
from wsecc.place.problem import (
    STOPS,
    PlaceFlow,
    Placement,
    PlacementError,
    PlacementProblem,
    Rect,
    Search,
    kernel_shapes,
    tailored,
    validate_placement,
    weight_unit,
    weighted_wirelength,
    with_pools,
)
from wsecc.place.tiled import Stage, tiled_rects


@dataclass(frozen=True)
class CpSatOptions:
    """Tuning knobs; the defaults are what bench/bench_place.py measured best on 2 cores."""

    workers: int = 2
    full_model_max_kernels: int = 150  # above ~300 the full model overruns its time limit
    full_model_share: float = 0.4  # of the budget, when the full model runs
    window_min: int = 6
    window_max: int = 12
    # default mode: a window's work limit in CP-SAT deterministic time, so that it does the
    # same work at any load, and a wall-clock ceiling (`window_time_s`) against a window whose
    # deterministic time runs slow (the budget still caps the search). A window the ceiling cut
    # short without improving ("starved") says nothing about its neighbourhood and is not
    # counted by the stall rule (`_end`). The former 0.25 s wall-clock windows did 0.04-0.11
    # (CP-SAT's figure, both workers' work) when they got the CPU and 0.002-0.02 at load 2.4-4
    # on 2 cores, where Llama 3.1 8B generate's probe then stopped with "no gain" or
    # "stalled" at its greedy start. 0.025 (~0.05 reported with 2 workers) against 0.05, two
    # runs each at load 2.6-2.9: Llama 9.7-10.9% off its start against 7.2-9.4%, GPT-2 small
    # ended 0.5% shorter, in 1.6x the windows (bench/RESULTS.md, "Issue 34: windows that do
    # the same work at any load"). 2 s: such windows took at most 1 s at load 2.6-2.9.
    window_dtime: float = 0.025
    window_time_s: float = 2.0
    margin_s: float = 0.1
    # the search's end: once its first `probe_windows` neighbourhoods are solved, and after
    # every one from then on, it stops when the last min(n, `stall_windows`) neighbourhoods
    # together took less than `stall_gain` off the wirelength they began from: a fixed rule
    # on neighbourhood counts and objective values (never the clock, so deterministic mode
    # stays deterministic), the same for every model; the budget is a ceiling, not a target.
    # 15: GPT-2 small's gains from its tiled start came at most 11 windows apart
    # (deterministic, bench/RESULTS.md); 0.1%: those 60 windows took 0.6% off, 0.15% per 15,
    # so a search gaining like that runs on, and 15 windows (3.75 s of 0.25 s windows)
    # that take less than 0.1% off do not earn their time.
    stall_windows: int = 15
    stall_gain: float = 0.001
    # the probe: the first check of that rule, after `probe_windows` neighbourhoods (two of
    # each kind); when none of them improved the start it stops saying it could not ("no
    # gain"). The probe's time (`probe_windows` windows, 1.5 s when they took 0.25 s) is the
    # time the packings leave the cluster bound (`bound_share`), beside which it runs, so that every
    # start gets it and the packings keep theirs (taken from them, GPT-2 XL's placement was
    # 1.2% longer than without the probe at a like load, one run each). GPT-2 small's tiled
    # start at 10 s: 2 of its first 5 windows improved (bench/RESULTS.md, "Issue 34, third
    # pass")
    probe_windows: int = 6
    # windows solve without the linear relaxation: on GPT-2 small's tiled start, 60 windows
    # took 0.55x the wall time and found 0.6% (against 0.4%) with it off (bench/RESULTS.md)
    window_lp: bool = False
    # of the budget kept for the windows from the tiled start's later packings (default mode).
    # 0: on GPT-2 small the windows took 0.3-0.6% off the tiled start where its pool packing
    # takes 16% off a layer's (bench/RESULTS.md, "CP-SAT that earns its time"), so the time
    # goes to the packing first (deterministic mode too: its quota is the windows' less what
    # the tiled start's packings took).
    window_share: float = 0.0
    # deterministic mode (work-based limits, calibrated on 2 cores to roughly fill the budget)
    det_window_dtime: float = 0.05  # CP-SAT deterministic time per window
    det_windows_per_second: float = 6.0  # windows per second of budget
    dtime_per_second: float = 0.2  # full-model deterministic time per second of its share
    # deterministic mode's wall-clock guard: past max(floor, factor × budget) the placement
    # fails in one line (`GuardError`), never returns a different result; far enough out that
    # a loaded machine does not reach it: the work quota takes about the budget on an idle
    # machine, and GPT-2 small's 10 s quota took 173 s at load 19 on 2 cores (bench/RESULTS.md)
    wall_guard_factor: float = 60.0
    wall_guard_floor_s: float = 300.0
    # tiled start (`wsecc.place.tiled`): one CP-SAT solve per layer block size tried
    unit_time_s: float = 0.3
    det_unit_dtime: float = 0.1
    unit_height_weight: float = 0.01  # per row of block height, × the block's flow weights
    tiled_share: float = 0.5  # of the budget, at most, for the tiled start's solves
    unit_again_factor: float = 4.0  # the best layer packing is improved for this many times
    # then once more with the kernels' pools in their menus: a larger model, which needs 2-3 s
    # (GPT-2 XL's layer, bench/RESULTS.md "Shapes from the pool"); off the windows' time
    unit_pools_s: float = 3.0
    det_unit_pools_dtime: float = 3.0
    # cluster bound (`wsecc.place.clusters`): its solves take this share of the budget, beside
    # the windows (a thread: the core their one worker leaves in deterministic mode; the
    # deterministic window quota is the budget less this share, as when they ran after), in
    # deterministic time on one worker in both modes (the bound is reproducible);
    # measured on the real-size suite: bench/RESULTS.md, "Re-run with the cluster bound"
    bound_share: float = 0.15


# ----------------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class _Data:
    """Solver-ready view of a problem: kernel indices, shapes, merged integer-weighted pairs."""

    names: tuple[str, ...]
    shapes: tuple[tuple[tuple[int, int], ...], ...]
    pairs: dict[tuple[int, int], int]  # (i < j) -> q_ij, flows in both directions merged
    unit: float  # bytes per unit of q
    exact: bool  # q_ij · unit == bytes_ij for every pair (no rounding)
    order: tuple[int, ...]  # unpinned kernels in flow order

    @staticmethod
    def of(problem: PlacementProblem) -> _Data:
        names = tuple(k.name for k in problem.kernels)
        index = {n: i for i, n in enumerate(names)}
        merged: dict[tuple[int, int], float] = {}
        for f in problem.flows:
            i, j = sorted((index[f.src], index[f.dst]))
            if i != j:
                merged[(i, j)] = merged.get((i, j), 0.0) + f.bytes_per_sample
        unit = weight_unit(list(merged.values()))
        pairs = {e: int(b // unit) for e, b in sorted(merged.items()) if b // unit > 0}
        exact = all(pairs.get(e, 0) * unit == b for e, b in merged.items())
        return _Data(
            names=names,
            shapes=tuple(kernel_shapes(problem, n) for n in names),
            pairs=pairs,
            unit=unit,
            exact=exact,
            order=tuple(index[n] for n in flow_order(problem)),
        )

    def separation(self, i: int, j: int) -> int:
        """Doubled-centre distance two disjoint rectangles i, j must keep (any shapes)."""
        si, sj = self.shapes[i], self.shapes[j]
        return min(
            min(w for w, _ in si) + min(w for w, _ in sj),
            min(h for _, h in si) + min(h for _, h in sj),
        )


@dataclass(frozen=True)
class _Limits:
    """How long one CP-SAT call may run: wall seconds, or deterministic time if set."""

    seconds: float
    workers: int
    seed: int
    dtime: float | None = None
    lp: bool = True  # False: no linear relaxation (a window needs a better placement, not a bound)


@dataclass(frozen=True)
class _Period:
    """The free kernels as one copy of a unit repeated down a column: copy n + 1 lies `top`
    rows below copy n, `top` being the rows the copy uses. `joins` are flows from kernel i of
    one copy to kernel j of the next (q-weighted, like `_Data.pairs`); `top` costs
    `height_weight` per row, so that the copies stay short enough to stack."""

    joins: dict[tuple[int, int], int]
    height_weight: int


@dataclass(frozen=True)
class _Solved:
    rects: dict[str, Rect] | None  # new rectangles of the free kernels, None if none found
    status: str
    bound: float  # CP-SAT's proven objective bound, in q·doubled-PE units
    # the wall clock ended the solve (its `_Limits.seconds`) before its work limit or a proof:
    # what it found says more about the machine's load than about the neighbourhood
    starved: bool = False


# ------------------------------------------------------------------------------------ one solve


def _solve(
    data: _Data,
    rects: Mapping[str, Rect],
    free: list[int],
    box: Rect,
    limits: _Limits,
    period: _Period | None = None,
) -> _Solved:
    """Re-place kernels `free` inside `box`, all others fixed; hint = current `rects`.
    With `period`, the objective also prices the joins to the next copy and the height used
    (`_Period`; only for a box at y = 0 with every kernel free).

    Guarantees: any rectangles returned are legal together with the fixed ones (CP-SAT proves
    the constraints); with the full hint, a FEASIBLE result is never worse in the integer
    objective than the current placement.
    """
    # data: shapes that fit the box, pairs touching a free kernel, fixed kernels in the box
    free_set = set(free)
    options = {i: [(w, h) for w, h in data.shapes[i] if w <= box.w and h <= box.h] for i in free}
    pairs = {e: q for e, q in data.pairs.items() if e[0] in free_set or e[1] in free_set}
    obstacles = [
        rects[n] for i, n in enumerate(data.names) if i not in free_set and rects[n].overlaps(box)
    ]
    x_end, y_end, span = box.x + box.w, box.y + box.h, 2 * max(box.x + box.w, box.y + box.h)

    # model
    model = cp_model.CpModel()

    # variables: position and shape choice of each free kernel; |Δx|, |Δy| per pair
    xs: dict[int, cp_model.IntVar] = {}
    ys: dict[int, cp_model.IntVar] = {}
    pick: dict[int, list[cp_model.IntVar | int]] = {}
    ws: dict[int, cp_model.IntVar | int] = {}  # each free kernel's width and height
    hs: dict[int, cp_model.IntVar | int] = {}
    sized: dict[int, tuple[cp_model.IntVar, ...]] = {}  # w, h and the ends of one with a choice
    for i in free:
        xs[i] = model.new_int_var(box.x, x_end - min(w for w, _ in options[i]), f"x{i}")
        ys[i] = model.new_int_var(box.y, y_end - min(h for _, h in options[i]), f"y{i}")
        # a single shape is a constant choice: plain intervals propagate best
        if len(options[i]) == 1:
            pick[i] = [1]
            ws[i], hs[i] = options[i][0]
            continue
        pick[i] = [model.new_bool_var(f"s{i}_{k}") for k in range(len(options[i]))]
        model.add_exactly_one(pick[i])
        wv = model.new_int_var_from_domain(_values(w for w, _ in options[i]), f"w{i}")
        hv = model.new_int_var_from_domain(_values(h for _, h in options[i]), f"h{i}")
        model.add(wv == sum(wk * s for s, (wk, _) in zip(pick[i], options[i], strict=True)))
        model.add(hv == sum(hk * s for s, (_, hk) in zip(pick[i], options[i], strict=True)))
        x1 = model.new_int_var(box.x, x_end, f"xe{i}")  # the ends: inside the box
        y1 = model.new_int_var(box.y, y_end, f"ye{i}")
        ws[i], hs[i], sized[i] = wv, hv, (wv, hv, x1, y1)
    dxs: dict[tuple[int, int], cp_model.IntVar] = {}
    dys: dict[tuple[int, int], cp_model.IntVar] = {}
    for i, j in pairs:
        dxs[(i, j)] = model.new_int_var(0, span, f"dx{i}_{j}")
        dys[(i, j)] = model.new_int_var(0, span, f"dy{i}_{j}")

    # constraints: inside the box, no overlap (fixed kernels as constants). A kernel with a
    # choice of shapes has one interval of variable size per axis, not an optional interval
    # per shape: CP-SAT then reached GPT-2 XL's best layer packing with the pools in its menus
    # in 0.7-1.0 s where the optional intervals took 2.8 s or did not reach it in 3 s, and
    # the default placement's wirelength fell on every suite model (bench/RESULTS.md,
    # "Issue 34: one interval of variable size per kernel")
    xivs, yivs = [], []
    for i in free:
        if i in sized:
            wv, hv, x1, y1 = sized[i]
            xivs.append(model.new_interval_var(xs[i], wv, x1, f"xi{i}"))
            yivs.append(model.new_interval_var(ys[i], hv, y1, f"yi{i}"))
        else:  # inside the box by x's and y's domains
            (w, h) = options[i][0]
            xivs.append(model.new_fixed_size_interval_var(xs[i], w, f"xi{i}"))
            yivs.append(model.new_fixed_size_interval_var(ys[i], h, f"yi{i}"))
    for k, r in enumerate(obstacles):
        xivs.append(model.new_fixed_size_interval_var(r.x, r.w, f"fx{k}"))
        yivs.append(model.new_fixed_size_interval_var(r.y, r.h, f"fy{k}"))
    model.add_no_overlap_2d(xivs, yivs)
    top = model.new_int_var(0, box.h, "top")  # rows the free kernels use (with `period`)
    if period is not None:
        for i in free:
            model.add(ys[i] + hs[i] <= top)
    # doubled centres, |Δ| by two inequalities, and the redundant separation cut
    cx: dict[int, cp_model.LinearExpr | int] = {}
    cy: dict[int, cp_model.LinearExpr | int] = {}
    for i, n in enumerate(data.names):
        if i in free_set:
            cx[i] = 2 * xs[i] + ws[i]
            cy[i] = 2 * ys[i] + hs[i]
        else:
            cx[i], cy[i] = rects[n].center2()
    for (i, j), dx in dxs.items():
        dy = dys[(i, j)]
        model.add(dx >= cx[i] - cx[j])
        model.add(dx >= cx[j] - cx[i])
        model.add(dy >= cy[i] - cy[j])
        model.add(dy >= cy[j] - cy[i])
        model.add(dx + dy >= data.separation(i, j))  # lifts the LP bound off zero

    objective = sum(q * (dxs[e] + dys[e]) for e, q in pairs.items())
    joins = period.joins if period is not None else {}
    jdx = {e: model.new_int_var(0, span, f"jx{e}") for e in joins}
    jdy = {e: model.new_int_var(0, 2 * span, f"jy{e}") for e in joins}
    for (i, j), q in joins.items():  # kernel j of the next copy: same x, 2·top further in y
        model.add(jdx[(i, j)] >= cx[i] - cx[j])
        model.add(jdx[(i, j)] >= cx[j] - cx[i])
        model.add(jdy[(i, j)] >= cy[j] + 2 * top - cy[i])
        model.add(jdy[(i, j)] >= cy[i] - cy[j] - 2 * top)
        objective += q * (jdx[(i, j)] + jdy[(i, j)])
    if period is not None:
        objective += period.height_weight * top

    # objective
    model.minimize(objective)

    # solve: with a full hint (positions, shapes, |Δ|) from the current placement
    for i in free:
        cur = rects[data.names[i]]
        model.add_hint(xs[i], cur.x)
        model.add_hint(ys[i], cur.y)
        for s, shape in zip(pick[i], options[i], strict=True):
            if not isinstance(s, int):
                model.add_hint(s, shape == (cur.w, cur.h))
        if i in sized:  # the whole hint: without the sizes and ends, windows found less
            current = (cur.w, cur.h, cur.x + cur.w, cur.y + cur.h)
            for var, value in zip(sized[i], current, strict=True):
                model.add_hint(var, value)
    for i, j in pairs:
        (ax, ay), (bx, by) = rects[data.names[i]].center2(), rects[data.names[j]].center2()
        model.add_hint(dxs[(i, j)], abs(ax - bx))
        model.add_hint(dys[(i, j)], abs(ay - by))
    if period is not None:
        model.add_hint(
            top, min(box.h, max(rects[data.names[i]].y + rects[data.names[i]].h for i in free))
        )
    solver = cp_model.CpSolver()
    p = solver.parameters
    p.num_workers = limits.workers
    p.random_seed = limits.seed
    p.max_time_in_seconds = max(limits.seconds, 0.01)
    if limits.dtime is not None:
        p.max_deterministic_time = limits.dtime
    if not limits.lp:
        p.linearization_level = 0
    # Ctrl-C must interrupt wsecc (which cleans up and says so), not only end this one solve.
    p.catch_sigint_signal = False
    status = solver.solve(model)
    starved = _starved(status, solver.wall_time, limits)

    # extract
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return _Solved(None, solver.status_name(status), 0.0, starved)
    out: dict[str, Rect] = {}
    for i in free:
        w, h = next(o for s, o in zip(pick[i], options[i], strict=True) if solver.value(s))
        out[data.names[i]] = Rect(solver.value(xs[i]), solver.value(ys[i]), w, h)
    return _Solved(out, solver.status_name(status), solver.best_objective_bound, starved)


def _values(values: Iterable[int]) -> cp_model.Domain:
    return cp_model.Domain.from_values(sorted(set(values)))


def _starved(status: cp_model.CpSolverStatus, wall_s: float, limits: _Limits) -> bool:
    """Whether a solve that ended with `status` after `wall_s` seconds was cut short by its
    wall-clock limit rather than by its deterministic-time limit or a proof (OPTIMAL,
    INFEASIBLE). Only a solve with a deterministic-time limit can tell the two apart; a
    deterministic-mode solve's wall limit is the guard, past which the placement fails."""
    if limits.dtime is None or status in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
        return False
    return wall_s >= STARVED_WALL_FRACTION * limits.seconds


# a solve that ran this fraction of its wall limit was stopped by it (CP-SAT checks its limits
# between steps, so it ends a little before or after the limit, never far before)
STARVED_WALL_FRACTION = 0.95


# ------------------------------------------------------------------------------------ windows

# The neighbourhoods the search takes in turn, each small enough (6-12 kernels, the fixed ones
# as obstacles) to solve in a fraction of a second at real size:
#   "chain": consecutive kernels in flow order (a layer and its neighbours);
#   "area":  the kernels nearest a random kernel (a window of the fabric);
#   "flow":  the kernels nearest both ends of a pair drawn by its share of the wirelength
#            (the flows that cost most).
NEIGHBOURHOODS = ("chain", "area", "flow")


def _pick_window(
    data: _Data, rects: Mapping[str, Rect], rng: random.Random, opts: CpSatOptions, kind: str
) -> list[int]:
    """The free kernels of one neighbourhood of kind `kind` (`NEIGHBOURHOODS`), drawn by `rng`."""
    order = data.order
    size = min(rng.randint(opts.window_min, opts.window_max), len(order))
    if kind == "chain":
        start = rng.randrange(len(order) - size + 1)
        return sorted(order[start : start + size])
    centres = np.array([rects[data.names[i]].center2() for i in order])
    if kind == "flow":
        every = [rects[n].center2() for n in data.names]
        costs = [
            (e, q * (abs(every[e[0]][0] - every[e[1]][0]) + abs(every[e[0]][1] - every[e[1]][1])))
            for e, q in data.pairs.items()
        ]
        costs = [(e, c) for e, c in costs if c > 0]
        if costs:
            i, j = rng.choices([e for e, _ in costs], weights=[c for _, c in costs])[0]
            near_i = np.abs(centres - np.array(every[i])).sum(axis=1)
            near_j = np.abs(centres - np.array(every[j])).sum(axis=1)
            ranked = np.argsort(np.minimum(near_i, near_j), kind="stable")
            half_i = np.argsort(near_i, kind="stable")[: size // 2]
            picked = dict.fromkeys(int(k) for k in half_i)
            for k in ranked:
                if len(picked) >= size:
                    break
                if near_j[k] <= near_i[k]:
                    picked.setdefault(int(k))
            for k in ranked:  # top up when one end's side is short
                if len(picked) >= size:
                    break
                picked.setdefault(int(k))
            return sorted(order[k] for k in picked)
    seed = rng.randrange(len(order))
    dist = np.abs(centres - centres[seed]).sum(axis=1)
    return sorted(order[k] for k in np.argsort(dist, kind="stable")[:size])


def _window_box(data: _Data, rects: Mapping[str, Rect], free: list[int], W: int, H: int) -> Rect:
    """Bounding box of the window's rectangles, grown by their mean side, clipped to the fabric."""
    rs = [rects[data.names[i]] for i in free]
    grow = round(sum(r.w + r.h for r in rs) / (2 * len(rs)))
    x0, y0 = max(0, min(r.x for r in rs) - grow), max(0, min(r.y for r in rs) - grow)
    x1 = min(W, max(r.x + r.w for r in rs) + grow)
    y1 = min(H, max(r.y + r.h for r in rs) + grow)
    return Rect(x0, y0, x1 - x0, y1 - y0)


# ------------------------------------------------------------------------------------- placer


class GuardError(PlacementError):
    """Deterministic placement ran past its wall-clock guard (`CpSatOptions.wall_guard_factor`):
    its result would depend on the machine's load, so there is none."""


@dataclass(frozen=True)
class _Budget:
    """Turns the time budget into per-solve limits: wall-clock shares capped by the deadline,
    or, in deterministic mode, deterministic time and a window count. In deterministic mode
    wall time only guards: every solve's wall limit is the time left to the guard, and `check`
    (after each solve) raises `GuardError` once it has passed, so a solve the wall clock cut
    short never decides a result."""

    t0: float
    seconds: float
    deterministic: bool
    seed: int
    opts: CpSatOptions
    cpu0: float = field(default_factory=time.process_time)  # the process's CPU time at t0

    def remaining(self) -> float:
        return self.t0 + self.seconds - time.perf_counter() - self.opts.margin_s

    def full_model(self) -> _Limits:
        share = self.opts.full_model_share * self.seconds
        if self.deterministic:
            return _Limits(self.guard(), 1, self.seed, share * self.opts.dtime_per_second)
        return _Limits(min(share, self.remaining()), self.opts.workers, self.seed)

    def window(self, done: int, full_model_ran: bool, tiled_dtime: float) -> _Limits | None:
        """Limits for the next LNS window (`done` windows tried so far), or None when the
        budget (or work quota) is spent. Default mode: `window_dtime` of deterministic time
        under a wall-clock ceiling, `window_time_s` or what is left of the budget.
        Deterministic mode: the tiled start's deterministic time comes off the window quota."""
        if self.deterministic:
            share = 1 - self.opts.full_model_share * full_model_ran - self.opts.bound_share
            quota = round(self.seconds * share * self.opts.det_windows_per_second)
            quota -= round(tiled_dtime / self.opts.det_window_dtime)
            if done >= max(
                quota, self.opts.probe_windows
            ):  # the probe runs whatever the start took
                return None
            return _Limits(
                self.guard(), 1, self.seed, self.opts.det_window_dtime, lp=self.opts.window_lp
            )
        # to the budget's end: the cluster bound runs beside the windows, not after them
        seconds = min(self.opts.window_time_s, self.remaining())
        if seconds < 0.05:
            return None
        return _Limits(
            seconds, self.opts.workers, self.seed, self.opts.window_dtime, lp=self.opts.window_lp
        )

    def unit(self, stage: Stage, spent_dtime: float) -> _Limits | None:
        """Limits for one layer packing of the tiled start (`tiled.Stage`), or None past the
        tiled start's share of the budget; "again" takes `unit_again_factor` times a first
        packing's, "pools" its own time, both off the windows'. Deterministic mode: the share
        is of the windows' deterministic time, and the first packings leave room for "again"."""
        o = self.opts
        if self.deterministic:
            share = o.tiled_share * self.seconds * o.det_windows_per_second * o.det_window_dtime
            dtime = {
                "first": o.det_unit_dtime,
                "again": o.unit_again_factor * o.det_unit_dtime,
                "pools": o.det_unit_pools_dtime,
            }[stage]
            need = dtime + (o.unit_again_factor * o.det_unit_dtime if stage == "first" else 0.0)
            if stage == "first" and spent_dtime + need > share + 1e-9:
                return None
            return _Limits(self.guard(), 1, self.seed, dtime)
        if stage == "first":
            left = self.t0 + o.tiled_share * self.seconds - time.perf_counter()
        else:
            left = self.remaining() - (o.bound_share + o.window_share) * self.seconds
        wanted = {"first": o.unit_time_s, "again": o.unit_again_factor * o.unit_time_s}
        seconds = min(wanted.get(stage, o.unit_pools_s), left)
        return _Limits(seconds, o.workers, self.seed) if seconds >= 0.05 else None

    def starts_spent(self) -> bool:
        """Default mode: whether the starts have taken their share of the budget
        (`tiled_share`) in CPU seconds of this process; deterministic mode: never (work, not
        time). CPU, not wall: stopped by the wall clock at load 17, GPT-2 XL's layered start
        kept its first packing, 2.1x the wirelength of its whole search (bench/RESULTS.md,
        "Issue 34, third pass"); its 0.6 s of CPU is the same at any load."""
        if self.deterministic:
            return False
        return time.process_time() > self.cpu0 + self.opts.tiled_share * self.seconds

    def guard_s(self) -> float:
        """Deterministic mode's wall-clock guard, seconds after the start."""
        return max(self.opts.wall_guard_floor_s, self.opts.wall_guard_factor * self.seconds)

    def guard(self) -> float:
        """Wall seconds left before the guard (deterministic mode's wall limit of a solve)."""
        return max(0.0, self.t0 + self.guard_s() - time.perf_counter())

    def check(self) -> None:
        """Deterministic mode: raise `GuardError` once the guard has passed (a solve may then
        have stopped at its wall limit rather than at its deterministic time)."""
        if self.deterministic and self.guard() == 0.0:
            raise GuardError(
                f"deterministic placement ran past its {self.guard_s():.0f} s wall-clock guard "
                f"(for a {self.seconds:g} s budget): the machine is too loaded for a result "
                "that depends on the inputs and seed only; run again on a quieter machine, "
                "or without --deterministic"
            )


def _accept(
    problem: PlacementProblem, rects: dict[str, Rect], wl: float, solved: _Solved
) -> tuple[dict[str, Rect], float, bool]:
    """Keep the solve's rectangles iff they strictly lower the exact wirelength."""
    if solved.rects is None:
        return rects, wl, False
    cand = {**rects, **solved.rects}
    cand_wl = weighted_wirelength(problem, cand)
    return (cand, cand_wl, True) if cand_wl < wl else (rects, wl, False)


def _cluster_bound(problem: PlacementProblem, budget: _Budget, deterministic: bool) -> LowerBound:
    """`cluster_bound` of `problem` within the bound's share of the budget (`bound_share`), its
    solves cut at the budget's end (deterministic mode: at the wall-clock guard, which the
    caller checks afterwards)."""
    seconds = budget.opts.bound_share * budget.seconds
    end = budget.t0 + (budget.guard_s() if deterministic else budget.seconds)
    return cluster_bound(problem, lambda cs: cluster_values(cs, seconds, end, deterministic))


def _end(trail: Sequence[float], improved: int, gained: bool, opts: CpSatOptions) -> str:
    """Why the search stops after the neighbourhoods whose wirelengths are `trail` (the
    search's start first, then one per neighbourhood), `improved` of them better (a key of
    `STOPS`), or "" to run on. From the probe's `probe_windows` on: "no gain" when none
    improved the start (or "stalled" if the whole model's solve, `gained`, had improved it),
    "stalled" when the last min(n, `stall_windows`) neighbourhoods took less than `stall_gain`
    off the wirelength they began from. Results only, no clock: deterministic mode stays
    deterministic."""
    windows = len(trail) - 1
    if windows < opts.probe_windows:
        return ""
    if improved == 0:
        return "stalled" if gained else "no gain"
    return "stalled" if _recent_gain(trail, opts) < opts.stall_gain else ""


def _recent_gain(trail: Sequence[float], opts: CpSatOptions) -> float:
    """The fraction of the wirelength the last min(n, `stall_windows`) neighbourhoods of
    `trail` (see `_end`) took off the one they began from."""
    k = min(len(trail) - 1, opts.stall_windows)
    begun = trail[-k - 1]
    return (begun - trail[-1]) / begun if begun > 0 else 0.0


def _stall_reason(trail: Sequence[float], opts: CpSatOptions) -> str:
    """The words of a "stalled" stop: how much the last neighbourhoods took off, against what
    they had to."""
    k = min(len(trail) - 1, opts.stall_windows)
    return (
        f"its last {k} neighbourhoods took {100 * _recent_gain(trail, opts):.2f}% off the "
        f"wirelength, under the {100 * opts.stall_gain:g}% that keeps it going"
    )


def place_cpsat(
    problem: PlacementProblem,
    *,
    time_budget_s: float,
    seed: int = 0,
    deterministic: bool = False,
    options: CpSatOptions | None = None,
    initial: Mapping[str, Rect] | None = None,
) -> Placement:
    """Best legal placement found within `time_budget_s`; never worse than its start.

    The start is `initial` when given and legal (a caller's own floorplan, e.g. the ISPD 2020
    column packing at 95% fill, where greedy finds no room), else the best (by wirelength) of
    the greedy placement, the layered one (`layered_rects`) and, when the problem has repeated
    transformer layers, the tiled one (`tiled_rects`, its layer packings by `pack_unit` within
    `tiled_share` of the budget; deterministic mode: their deterministic time comes off the
    window quota).
    Steps: start hint → full model with hint and cuts (if N ≤ full_model_max_kernels and the
    start is not the tiled one) → large-neighbourhood search (`NEIGHBOURHOODS` in turn, the
    incumbent as hint): it stops after the first `probe_windows` when none of them improved
    the start ("no gain"), else once the last min(n, `stall_windows`) took less than
    `stall_gain` off the wirelength they began from ("stalled"), or when the budget
    (deterministic mode: the work quota, which always holds the probe) is spent; beside it, in
    a thread, the cluster bound (`bound_share` of the budget, one worker; not once the full
    model proved its placement optimal). `result.search` says from which start, by how much,
    and why it stopped. Windows the wall clock cut short before their work limit without
    improving (a loaded machine; `_Solved.starved`) are not counted by the stall rule; the
    status and `Search.reason` say how many there were, and the quota counts them.
    Kernels' pools (`PlaceKernel.pool`): the tiled start may take pool shapes (and `initial`
    may hold them); everything after the start, the bound included, is on
    `tailored(problem, start)`, whose menus hold the ones taken. The result is legal for
    `tailored(problem, result.rects)`, and its bound holds there (fewer shapes, no lower optimum).
    Status: OPTIMAL when the full model proved it (exact integer weights only), else FEASIBLE.
    Raises PlacementError (greedy's) when no start packs the kernels, and `GuardError` when
    deterministic mode runs past its wall-clock guard (its result would depend on the load).
    """
    opts = options or CpSatOptions()
    budget = _Budget(time.perf_counter(), time_budget_s, deterministic, seed, opts)
    start = (
        None
        if initial is None
        else Placement.of(
            problem, initial, placer="initial", bound=0.0, status="", seconds=0.0, seed=seed
        )
    )
    tiled_dtime = 0.0  # deterministic time the tiled start's solves were given
    tiled = None
    if start is not None and not validate_placement(with_pools(problem), start):
        rects, begun = dict(initial), "initial"  # type: ignore[arg-type]
    else:
        try:
            greedy: dict[str, Rect] | None = greedy_rects(problem)[1]
        except PlacementError as e:  # the tiled start may still pack what greedy does not
            greedy, failed = None, e

        def pack(
            unit: PlacementProblem,
            joins: Sequence[PlaceFlow],
            start: dict[str, Rect] | None,
            stage: Stage,
        ) -> dict[str, Rect] | None:
            nonlocal tiled_dtime
            limits = budget.unit(stage, tiled_dtime)
            if limits is None:
                return None
            tiled_dtime += limits.dtime or 0.0
            packed = pack_unit(unit, joins, limits, opts.unit_height_weight, start)
            budget.check()
            return packed

        # before the tiled start, whose shares see its time; in default mode it ends with its
        # best so far once the starts took their share of the budget in CPU seconds
        layered = layered_rects(problem, budget.starts_spent)
        tiled = tiled_rects(
            problem, pack, lambda stage: budget.unit(stage, tiled_dtime) is not None
        )
        starts = {"greedy": greedy, "layered": layered, "tiled": tiled}
        found = {k: r for k, r in starts.items() if r is not None}
        if not found:
            raise failed
        begun = min(found, key=lambda k: weighted_wirelength(problem, found[k]))  # greedy on ties
        rects = found[begun]
    problem = tailored(problem, rects)  # from here on, the pool shapes the start took are menu
    data = _Data.of(problem)
    wl = start_wl = weighted_wirelength(problem, rects)
    own = lower_bound(problem)
    bound, bound_kind = own.value, own.kind
    fabric = Rect(0, 0, problem.width, problem.height)

    proven = False
    # not after a tiled start: its last packings took that time, and the full model moved
    # its wirelength by < 1% (bench/RESULTS.md, "The tiled start")
    full = 0 < len(data.order) <= opts.full_model_max_kernels and rects is not tiled
    if full:
        solved = _solve(data, rects, list(data.order), fabric, budget.full_model())
        budget.check()
        rects, wl, _ = _accept(problem, rects, wl, solved)
        if solved.rects is not None:
            if solved.bound * data.unit / 2 > bound:
                bound, bound_kind = solved.bound * data.unit / 2, "cpsat"
            proven = solved.status == "OPTIMAL" and data.exact

    rng = random.Random(seed)
    windows = improved = 0
    tried = starved = 0  # every window solved; those the window's wall ceiling cut short
    trail = [wl]  # the wirelength at the search's start, then after each counted neighbourhood
    stopped = "optimal" if proven else "nothing to move" if len(data.order) <= 1 else ""
    # The cluster bound's solves (one worker each) run in a thread beside the search, whose
    # own solves release the GIL: on the core they leave in deterministic mode (one worker),
    # and in default mode on what the search's two workers leave. Both only read `problem`,
    # so neither changes what the other finds.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="wsecc-bound") as pool:
        bounding = (
            pool.submit(_cluster_bound, problem, budget, deterministic)
            if not proven and opts.bound_share > 0
            else None
        )
        while not stopped:
            # the quota counts every window tried, starved or not, so the search ends
            limits = budget.window(tried, full, tiled_dtime)
            if limits is None:
                stopped = "quota" if deterministic else "budget"
                break
            kind = NEIGHBOURHOODS[tried % len(NEIGHBOURHOODS)]
            free = _pick_window(data, rects, rng, opts, kind)
            box = _window_box(data, rects, free, problem.width, problem.height)
            solved = _solve(data, rects, free, box, limits)
            budget.check()
            rects, wl, better = _accept(problem, rects, wl, solved)
            tried += 1
            if solved.starved and not better:  # a verdict on the machine, not the neighbourhood
                if deterministic or limits.seconds >= opts.window_time_s:
                    starved += 1  # not one the budget's end cut short: the search ends next
                continue
            windows, improved = windows + 1, improved + better
            trail.append(wl)
            stopped = _end(trail, improved, full and wl < start_wl, opts)
        if bounding is not None:
            tight = bounding.result()
            budget.check()
            if tight.value > bound:
                bound, bound_kind = tight.value, tight.kind

    status = "OPTIMAL" if proven else "FEASIBLE"
    return Placement.of(
        problem,
        rects,
        placer="cpsat",
        bound=wl if proven else min(bound, wl),
        status=f"{status} ({windows} windows, {improved} improved{_starved_note(starved)})",
        seconds=time.perf_counter() - budget.t0,
        seed=seed,
        bound_kind="optimal" if proven else bound_kind,
        search=Search(
            begun,
            start_wl,
            wl,
            windows,
            improved,
            stopped,
            whole=full,
            reason=_reason(stopped, trail, improved, starved, begun, opts),
        ),
    )


def _starved_note(starved: int) -> str:
    """The placement status's words for `starved` windows (none: nothing, so that a search
    without any reads as before)."""
    return f", {starved} more cut short by the wall clock" if starved else ""


def _reason(
    stopped: str,
    trail: Sequence[float],
    improved: int,
    starved: int,
    begun: str,
    opts: CpSatOptions,
) -> str:
    """`Search.reason`: why the search stopped, in words ("" leaves `Search` its own words),
    and, when the wall clock cut windows short (`_Solved.starved`), that those were not
    counted."""
    said = _stall_reason(trail, opts) if stopped == "stalled" and improved else ""
    if not starved:
        return said
    if not said:
        said = STOPS.get(stopped, stopped)
        if stopped == "no gain":
            said = (
                f"could not improve the {begun} start: its first {len(trail) - 1} "
                "neighbourhoods improved nothing"
            )
    return (
        f"{said}; {starved} more {'neighbourhood was' if starved == 1 else 'neighbourhoods were'} "
        "cut short by the wall clock before their work limit (a loaded machine) and not counted"
    )


# ------------------------------------------------------------------------------ repeating unit


def pack_unit(
    unit: PlacementProblem,
    joins: Sequence[PlaceFlow],
    limits: _Limits,
    height_weight: float,
    start: Mapping[str, Rect] | None = None,
) -> dict[str, Rect] | None:
    """One copy of a repeating unit (a transformer layer) placed inside `unit`'s fabric, as
    copies stacked down a column would want it: least wirelength of its own flows plus the
    `joins` (flows from a kernel of this copy to one of the next copy, which lies as many rows
    below as this one uses) plus `height_weight` × (Σ join and flow weights) per row used.
    None if CP-SAT found no packing within `limits`. Starts from `start`, else from greedy on
    `unit` stretched to any height (a hint outside the box only guides the search).
    """
    if any(all(w > unit.width or h > unit.height for w, h in k.shapes) for k in unit.kernels):
        return None
    data = _Data.of(unit)
    index = {n: i for i, n in enumerate(data.names)}
    merged: dict[tuple[int, int], float] = {}
    for f in joins:
        e = (index[f.src], index[f.dst])
        merged[e] = merged.get(e, 0.0) + f.bytes_per_sample
    q_joins = {e: max(1, int(b // data.unit)) for e, b in sorted(merged.items())}
    total = sum(data.pairs.values()) + sum(q_joins.values())
    period = _Period(q_joins, max(1, round(height_weight * total)))
    tall = PlacementProblem(
        unit.width,
        4 * unit.height + sum(max(h for _, h in k.shapes) for k in unit.kernels),
        unit.kernels,
        unit.flows,
    )
    if start is None:
        try:
            _, start = greedy_rects(tall)
        except PlacementError:
            return None
    box = Rect(0, 0, unit.width, unit.height)
    solved = _solve(data, start, list(range(len(data.names))), box, limits, period)
    return solved.rects


# --------------------------------------------------------------------------------- cluster bound


def cluster_values(
    clusters: Sequence[Cluster],
    seconds: float,
    deadline: float | None = None,
    deterministic: bool = False,
) -> list[float]:
    """A lower bound per cluster on its weighted wirelength over every placement of its
    kernels in the plane (`wsecc.place.clusters`, whose doc proves the model's reductions):
    the optimum where CP-SAT proves it, else CP-SAT's proven objective bound. The solves (one
    per hub shape) share `seconds` evenly as deterministic time (`BOUND_DTIME_PER_SECOND`) on
    one worker. Wall limits: `deterministic`, the time left to `deadline` (the guard, which the
    caller checks afterwards, so the bound is a function of the clusters only); else 3× a
    solve's share, cut at `deadline` (a `time.perf_counter()` time) when given — a loaded
    machine then gets a weaker bound, not a longer compile."""
    solves = sum(len(c.shapes[_hub(c)]) for c in clusters)
    share = seconds / max(1, solves)

    def limits() -> _Limits:
        left = math.inf if deadline is None else deadline - time.perf_counter()
        wall = left if deterministic else min(3 * share + 0.05, left)
        return _Limits(max(wall, 0.01), 1, 0, BOUND_DTIME_PER_SECOND * share)

    return [min(_plane_bound(c, s, limits()) for s in c.shapes[_hub(c)]) for c in clusters]


# deterministic time per second of the bound's share, one worker: 0.6 fills about the share on
# this 2-core machine (BERT-large on wse2: 1.5 s of share, 2.0 s of wall time at load ~1.5)
BOUND_DTIME_PER_SECOND = 0.6


def _hub(c: Cluster) -> int:
    """The largest kernel: pinning it leaves CP-SAT the least room (proves fastest)."""
    return max(range(len(c.shapes)), key=lambda i: (min(w * h for w, h in c.shapes[i]), -i))


def _plane_bound(c: Cluster, hub_shape: tuple[int, int], limits: _Limits) -> float:
    """CP-SAT's proven lower bound on the cluster's cost in the plane with the hub's centre at
    the origin in `hub_shape` (bytes × PEs)."""
    n, hub = len(c.shapes), _hub(c)
    unit = weight_unit([b for _, _, b in c.pairs])
    q = {(i, j): int(b // unit) for i, j, b in c.pairs if b // unit > 0}
    twins = c.twins(hub)
    anchor = next((i for i in range(n) if i != hub and all(i not in t for t in twins)), None)
    room_x = 2 * sum(max(w for w, _ in s) for s in c.shapes)  # doubled: the module doc's room
    room_y = 2 * sum(max(h for _, h in s) for s in c.shapes)
    options = [[hub_shape] if i == hub else list(s) for i, s in enumerate(c.shapes)]
    model = cp_model.CpModel()
    cx: list[cp_model.IntVar | int] = []  # the hub's centre is the origin
    cy: list[cp_model.IntVar | int] = []
    xivs, yivs = [], []
    for i, opts in enumerate(options):
        x = model.new_int_var(-room_x, room_x, f"cx{i}") if i != hub else 0
        y = model.new_int_var(-room_y, room_y, f"cy{i}") if i != hub else 0
        cx.append(x)
        cy.append(y)
        picks = [model.new_bool_var(f"s{i}_{k}") for k in range(len(opts))]
        model.add_exactly_one(picks)
        for s, (w, h) in zip(picks, opts, strict=True):  # doubled: the centre ± the extent
            xivs.append(model.new_optional_interval_var(x - w, 2 * w, x + w, s, f"x{i}_{w}"))
            yivs.append(model.new_optional_interval_var(y - h, 2 * h, y + h, s, f"y{i}_{h}"))
    model.add_no_overlap_2d(xivs, yivs)
    terms = []
    for (i, j), qij in q.items():
        dx = model.new_int_var(0, 2 * room_x, f"dx{i}_{j}")
        dy = model.new_int_var(0, 2 * room_y, f"dy{i}_{j}")
        model.add_abs_equality(dx, cx[i] - cx[j])
        model.add_abs_equality(dy, cy[i] - cy[j])
        model.add(dx + dy >= round(2 * min_separation(options[i], options[j])))
        terms.append(qij * (dx + dy))
    if anchor is not None:  # the reflections
        model.add(cx[anchor] >= 0)
        model.add(cy[anchor] >= 0)
    for a, b in twins:
        model.add(cx[a] <= cx[b])
    model.minimize(sum(terms))
    solver = cp_model.CpSolver()
    p = solver.parameters
    p.num_workers, p.random_seed, p.catch_sigint_signal = limits.workers, limits.seed, False
    p.max_time_in_seconds = max(limits.seconds, 0.01)
    if limits.dtime is not None:
        p.max_deterministic_time = limits.dtime
    status = solver.solve(model)
    if status == cp_model.INFEASIBLE:  # cannot happen (the room holds a placement): no bound
        return 0.0
    return max(0.0, solver.best_objective_bound) * unit / 2
