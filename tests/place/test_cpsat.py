"""CP-SAT placer: legal, never worse than greedy, above its bound, on budget, reproducible."""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from wsecc.place.api import place
from wsecc.place.cpsat import CpSatOptions, GuardError, place_cpsat
from wsecc.place.cpsat import _end as cpsat_end
from wsecc.place.greedy import place_greedy
from wsecc.place.problem import (
    STOPS,
    PlaceFlow,
    PlaceKernel,
    Placement,
    PlacementError,
    PlacementProblem,
    Rect,
    Search,
    validate_placement,
    weighted_wirelength,
)
from wsecc.place.synthetic import chain_problem, transformer_problem

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "n, budget, deterministic", [(24, 2.0, False), (96, 2.0, True), (300, 3.0, True)]
)
def test_cpsat_beats_or_ties_greedy_and_respects_its_bound(n, budget, deterministic):
    # every assertion holds whatever the time spent (the start is greedy's or better, the bound
    # is the pairwise one or better), so the wall-clock case cannot fail on a loaded machine;
    # the deterministic ones give the same placement on any machine
    problem = chain_problem(n, alt_shapes=True)
    greedy = place_greedy(problem)
    p = place_cpsat(problem, time_budget_s=budget, seed=1, deterministic=deterministic)
    assert validate_placement(problem, p) == []
    assert p.objective <= greedy.objective
    assert p.bound <= p.objective
    assert p.bound >= greedy.bound  # never weaker than the pairwise bound
    assert p.gap == pytest.approx((p.objective - p.bound) / p.objective)
    assert p.placer == "cpsat" and p.status.split()[0] in ("FEASIBLE", "OPTIMAL")


def test_cpsat_proves_a_tiny_instance_optimal():
    # deterministic: the proof is asked of a work quota, not of seconds a loaded machine may lack
    problem = chain_problem(4, width=20, height=20)
    p = place_cpsat(problem, time_budget_s=5.0, deterministic=True)
    assert p.status.startswith("OPTIMAL")
    assert p.bound == p.objective and p.gap == 0.0


def test_pins_are_fixed_obstacles():
    problem = replace(
        chain_problem(30), pins={"k3": Rect(90, 90, 20, 20), "k17": Rect(0, 0, 15, 40)}
    )
    p = place_cpsat(problem, time_budget_s=1.5, deterministic=True)
    assert validate_placement(problem, p) == []
    assert p.rects["k3"] == Rect(90, 90, 20, 20) and p.rects["k17"] == Rect(0, 0, 15, 40)


_RUN = """
import sys
from wsecc.place.cpsat import place_cpsat
from wsecc.place.synthetic import transformer_problem
p = place_cpsat(transformer_problem(60), time_budget_s=1.0, seed=7, deterministic=True)
sys.stdout.write(p.dumps(include_timing=False))
"""


def test_deterministic_mode_is_byte_identical_across_processes():
    from conftest import two_fresh_runs

    first, second = two_fresh_runs(_RUN)
    assert first == second and '"placer": "cpsat"' in first


def test_place_dispatches_and_rejects_unknown_placers():
    problem = transformer_problem(20)  # wall-clock mode: legality holds whatever the time
    for name in ("greedy", "cpsat", "manual"):
        p = place(problem, placer=name, time_budget_s=0.5, seed=0)
        assert p.placer == name and validate_placement(problem, p) == []
    with pytest.raises(
        PlacementError, match="unknown placer 'sa'; choose one of cpsat, greedy, manual"
    ):
        place(problem, placer="sa", time_budget_s=1.0)


# ---------------------------------------------------------------------- the search's stall rule


def _row_problem(n: int) -> tuple[PlacementProblem, dict[str, Rect]]:
    """n unit squares chained k0→k1→…, in a fabric one row high: in order is optimal."""
    kernels = tuple(PlaceKernel(f"k{i}", ((1, 1),), (f"n{i}",), "chain") for i in range(n))
    flows = tuple(PlaceFlow(f"k{i}", f"k{i + 1}", 1024.0) for i in range(n - 1))
    return PlacementProblem(n, 1, kernels, flows), {f"k{i}": Rect(i, 0, 1, 1) for i in range(n)}


def _scrambled_row(n: int, seed: int) -> tuple[PlacementProblem, dict[str, Rect]]:
    """`_row_problem(n)` and a bad start for it: the chain's kernels in a shuffled row."""
    problem, _ = _row_problem(n)
    order = random.Random(seed).sample(range(n), n)
    return problem, {f"k{i}": Rect(x, 0, 1, 1) for i, x in enumerate(order)}


_SEARCH_ONLY = CpSatOptions(
    full_model_max_kernels=0, bound_share=0.0, stall_windows=8, probe_windows=4
)


def _trace_windows(monkeypatch) -> list[bool]:
    """Whether each window of the next `place_cpsat` improved the placement, in order."""
    return _trace(monkeypatch)[0]


def _trace(monkeypatch) -> tuple[list[bool], list[float]]:
    """Whether each window of the next `place_cpsat` improved the placement, and the
    wirelength after it, in order (the lists fill as the placement runs)."""
    import wsecc.place.cpsat as cpsat

    flags: list[bool] = []
    after: list[float] = []

    def accept(*args):
        out = _accept(*args)
        flags.append(out[2])
        after.append(out[1])
        return out

    _accept = cpsat._accept
    monkeypatch.setattr(cpsat, "_accept", accept)
    return flags, after


def test_the_search_stops_after_its_probe_when_no_neighbourhood_improves(monkeypatch):
    # the start is optimal: the search gives up after the probe's `probe_windows` windows (4),
    # before `stall_windows` (8) and long before the budget's work quota (60 s: 306 windows),
    # and says it could not improve its start
    problem, optimal = _row_problem(10)
    flags = _trace_windows(monkeypatch)
    p = place_cpsat(
        problem, time_budget_s=60.0, deterministic=True, options=_SEARCH_ONLY, initial=optimal
    )
    assert p.rects == optimal
    assert flags == [False] * _SEARCH_ONLY.probe_windows
    assert p.search == Search("initial", p.objective, p.objective, 4, 0, "no gain")
    said = "could not improve the initial start: its first 4 neighbourhoods improved nothing"
    assert p.search.reason == said
    assert p.search.summary().startswith(f"CP-SAT search {said} (the start, ")
    assert Placement.from_json(p.to_json()).search == p.search  # report.json: `reason` too


def _gain(begun: float, now: float) -> float:
    return (begun - now) / begun


def test_the_search_runs_on_while_neighbourhoods_gain_and_stops_when_they_gain_too_little(
    monkeypatch,
):
    # a bad start (the chain's kernels in a scrambled row): from the probe on, the search
    # goes on while the last min(n, `stall_windows`) windows took at least `stall_gain` off the
    # wirelength they began from, and stops at the first window where they did not
    problem, scrambled = _scrambled_row(24, 5)
    opts = replace(_SEARCH_ONLY, stall_gain=0.05)
    flags, after = _trace(monkeypatch)
    p = place_cpsat(
        problem, time_budget_s=60.0, deterministic=True, options=opts, initial=scrambled
    )
    assert p.search is not None and p.search.start == "initial"
    trail = [p.search.start_objective, *after]
    n, k = len(after), opts.stall_windows

    def recent(m: int) -> float:  # the gain of the last min(m, k) of the first m windows
        return _gain(trail[m - min(m, k)], trail[m])

    assert n > k  # it ran on past the probe and past one full look-back
    assert all(recent(m) >= opts.stall_gain for m in range(opts.probe_windows, n))
    assert recent(n) < opts.stall_gain and p.search.stopped == "stalled"
    assert p.search.windows == n and p.search.improved == sum(flags) >= 2
    assert p.search.reason == (
        f"its last {k} neighbourhoods took {100 * recent(n):.2f}% off the wirelength, "
        "under the 5% that keeps it going"
    )
    assert p.objective == p.search.objective == trail[-1] < p.search.start_objective
    assert validate_placement(problem, p) == []


def test_the_search_stops_after_its_probe_when_its_gain_is_below_the_threshold(monkeypatch):
    # the same start, a threshold no search can reach: the probe's windows improve the start
    # (so it is not "could not improve") but take less than the threshold off, so the search
    # stops there, where with the default threshold it runs on
    problem, scrambled = _scrambled_row(24, 5)
    high = replace(_SEARCH_ONLY, stall_gain=0.99)
    flags, _ = _trace(monkeypatch)
    p = place_cpsat(
        problem, time_budget_s=60.0, deterministic=True, options=high, initial=scrambled
    )
    assert p.search is not None and p.search.stopped == "stalled"
    assert p.search.windows == len(flags) == high.probe_windows and any(flags)
    assert p.search.reason.startswith(f"its last {high.probe_windows} neighbourhoods took ")
    assert "under the 99% that keeps it going" in p.search.reason
    flags.clear()
    q = place_cpsat(
        problem, time_budget_s=60.0, deterministic=True, options=_SEARCH_ONLY, initial=scrambled
    )
    assert q.search is not None and q.search.windows > high.probe_windows
    assert q.objective <= p.objective


def test_the_probe_runs_whatever_the_deterministic_quota(monkeypatch):
    # a budget whose work quota holds no window: the probe's windows run all the same (every
    # start gets its chance), and a probe that gains runs on past it
    problem, scrambled = _scrambled_row(16, 2)
    flags = _trace_windows(monkeypatch)
    opts = replace(_SEARCH_ONLY, det_windows_per_second=0.0)  # quota 0
    p = place_cpsat(problem, time_budget_s=1.0, deterministic=True, options=opts, initial=scrambled)
    assert p.search is not None and p.search.windows == len(flags) == opts.probe_windows
    assert p.search.stopped == "quota" and p.search.improved == sum(flags) >= 1


@pytest.mark.parametrize(
    ("trail", "improved", "gained", "stop"),
    [
        ([100.0] * 4, 0, False, ""),  # the probe (4 windows) is not over
        ([100.0] * 5, 0, False, "no gain"),  # the probe found nothing: stop, could not improve
        ([100.0] * 5, 0, True, "stalled"),  # ... but the whole model's solve had improved it
        ([100.0, 99.0, 99.0, 99.0, 99.0], 1, False, ""),  # the probe took 1% off: run on
        ([100.0, 99.995, 99.99, 99.99, 99.99], 2, False, "stalled"),  # 0.01%: under 0.1%
        # from then on the last `stall_windows` (8) count: 0.5% over the last 8, run on ...
        ([100.0, 99.0, *[99.0] * 7, 98.5], 2, False, ""),
        # ... 0.05% over them, stop, however much the windows before them took off
        ([100.0, 90.0, 80.0, *[80.0] * 7, 79.96], 3, False, "stalled"),
        ([100.0, 90.0, 80.0, *[80.0] * 7, 79.9], 3, False, ""),  # 0.125%: run on
    ],
)
def test_the_end_rule(trail, improved, gained, stop):
    assert cpsat_end(trail, improved, gained, _SEARCH_ONLY) == stop


def test_deterministic_mode_past_its_wall_clock_guard_fails_in_one_line():
    # a guard that has passed before the first solve ends: no placement, one line saying why
    opts = CpSatOptions(wall_guard_factor=0.0, wall_guard_floor_s=0.0)
    with pytest.raises(GuardError, match="ran past its 0 s wall-clock guard") as e:
        place_cpsat(chain_problem(12), time_budget_s=1.0, deterministic=True, options=opts)
    assert "\n" not in str(e.value)


def test_the_search_line_says_when_the_whole_model_was_solved() -> None:
    """A gain with no improving neighbourhood came from the one solve of the whole model; the
    placement line must not credit it to nothing."""
    whole = Search("layered", 100.0, 80.0, 15, 0, "stalled", whole=True)
    assert "20.0% below the layered start" in whole.summary()
    assert "one solve of the whole model and 15 neighbourhoods (0 improved)" in whole.summary()
    assert "whole model" not in Search("tiled", 100.0, 99.0, 3, 1, "budget").summary()


@pytest.mark.parametrize("stopped", sorted(STOPS))
def test_every_way_the_search_stops_fits_the_report_schema(stopped):
    # report.json's `placement.search` is the Search's fields and its gain: every stop, the
    # probe's "no gain" included, must validate against the schema users check reports with
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "wsecc" / "report" / "report.schema.json").read_text())
    search = Search("tiled", 10.0, 10.0, 6, 0, stopped)
    entry = {**asdict(search), "gain": search.gain}
    jsonschema.validate(entry, schema["properties"]["placement"]["properties"]["search"])
    assert search.reason


def test_the_cluster_bound_beside_the_search_changes_neither(monkeypatch):
    """The cluster bound runs in a thread beside the windows: in deterministic mode the
    placement is the one found with the bound stubbed out, and the bound the one computed
    alone (`cluster_bound` on the same problem, after the search)."""
    import threading

    import wsecc.place.cpsat as cpsat
    from wsecc.place.bounds import lower_bound
    from wsecc.place.clusters import cluster_bound

    # the BERT-like miniature of tests/place/test_clusters.py: its best bound is the cluster's
    shapes = [((1, 1),), ((3, 1), (1, 3)), ((3, 1), (1, 3)), ((3, 1), (1, 3)), ((3, 1),)]
    pairs = [(0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (3, 4)]
    kernels = tuple(PlaceKernel(f"k{i}", s) for i, s in enumerate(shapes))
    flows = tuple(PlaceFlow(f"k{i}", f"k{j}", 1.0) for i, j in pairs)
    problem = PlacementProblem(9, 9, kernels, flows)
    opts = CpSatOptions(full_model_max_kernels=0)  # no whole-model proof: the windows search

    threads: list[str] = []
    real = cpsat._cluster_bound

    def traced(*args):
        threads.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(cpsat, "_cluster_bound", traced)
    placed = place_cpsat(problem, time_budget_s=1.0, seed=1, deterministic=True, options=opts)
    assert threads and threads[0] != threading.main_thread().name
    assert placed.bound_kind == "cluster"

    monkeypatch.setattr(cpsat, "_cluster_bound", lambda p, *args: lower_bound(p))
    stubbed = place_cpsat(problem, time_budget_s=1.0, seed=1, deterministic=True, options=opts)
    assert stubbed.rects == placed.rects and stubbed.search == placed.search

    seconds = opts.bound_share * 1.0
    alone = cluster_bound(problem, lambda cs: cpsat.cluster_values(cs, seconds, None, True))
    assert placed.bound == min(alone.value, placed.objective)


def _starving_solve(monkeypatch, first: int | None) -> list[bool]:
    """Make the next `place_cpsat`'s first `first` windows (all when None) come back as the
    wall clock leaves them on a loaded machine: no solution, cut short (`_Solved.starved`);
    the list says, per window tried, whether it was starved."""
    import wsecc.place.cpsat as cpsat

    tried: list[bool] = []
    real = cpsat._solve

    def solve(data, rects, free, box, limits, period=None):
        if first is None or len(tried) < first:
            tried.append(True)
            return cpsat._Solved(None, "UNKNOWN", 0.0, starved=True)
        tried.append(False)
        return real(data, rects, free, box, limits, period)

    monkeypatch.setattr(cpsat, "_solve", solve)
    return tried


def test_windows_the_wall_clock_starved_do_not_make_the_probe_say_no_gain(monkeypatch):
    # more starved windows than the probe holds, then real ones: the probe is taken from the
    # windows that ran, so the search improves its bad start instead of stopping with "could
    # not improve" (what a loaded machine made it say of Llama 3.1 8B)
    problem, scrambled = _scrambled_row(16, 2)
    starved = _SEARCH_ONLY.probe_windows + 1
    tried = _starving_solve(monkeypatch, starved)
    p = place_cpsat(
        problem, time_budget_s=60.0, deterministic=True, options=_SEARCH_ONLY, initial=scrambled
    )
    assert p.search is not None and p.search.stopped in ("stalled", "quota")
    assert p.search.improved >= 1 and p.objective < p.search.start_objective
    assert p.search.windows == len(tried) - starved  # the starved ones are not counted
    assert f"{p.search.windows} windows, {p.search.improved} improved, {starved} more cut " in (
        p.status
    )
    assert p.search.reason.endswith(
        f"; {starved} more neighbourhoods were cut short by the wall clock before their work "
        "limit (a loaded machine) and not counted"
    )
    assert validate_placement(problem, p) == []


def test_the_deterministic_quota_ends_a_search_whose_every_window_is_starved(monkeypatch):
    # the quota counts the windows tried, starved or not: a search none of whose windows
    # counts still ends, at its start, and says why
    problem, scrambled = _scrambled_row(16, 2)
    tried = _starving_solve(monkeypatch, None)
    p = place_cpsat(
        problem, time_budget_s=1.0, deterministic=True, options=_SEARCH_ONLY, initial=scrambled
    )
    quota = round(1.0 * _SEARCH_ONLY.det_windows_per_second)  # no full model, no bound share
    assert len(tried) == quota and all(tried)
    assert p.rects == scrambled and p.search is not None
    assert (p.search.windows, p.search.improved, p.search.stopped) == (0, 0, "quota")
    assert p.status == f"FEASIBLE (0 windows, 0 improved, {quota} more cut short by the wall clock)"
    assert p.search.reason.startswith("deterministic mode's work quota was spent; ")
    assert Placement.from_json(p.to_json()).search == p.search  # report.json: `reason` too


def test_default_mode_windows_are_limited_by_work_under_a_wall_clock_ceiling():
    # a window does the same work at any load (deterministic time); the wall clock is only its
    # ceiling, and one that reached it without a proof is starved
    import time

    from ortools.sat.python import cp_model

    import wsecc.place.cpsat as cpsat

    opts = CpSatOptions()
    budget = cpsat._Budget(time.perf_counter(), 3600.0, False, 0, opts)
    limits = budget.window(0, False, 0.0)
    assert limits is not None and limits.dtime == opts.window_dtime
    assert limits.seconds == opts.window_time_s and limits.workers == opts.workers
    ceiling = limits.seconds
    assert cpsat._starved(cp_model.FEASIBLE, ceiling, limits)
    assert cpsat._starved(cp_model.UNKNOWN, ceiling, limits)
    assert not cpsat._starved(cp_model.FEASIBLE, 0.5 * ceiling, limits)  # its work limit ended it
    assert not cpsat._starved(cp_model.OPTIMAL, ceiling, limits)
    assert not cpsat._starved(cp_model.INFEASIBLE, ceiling, limits)
    wall_only = replace(limits, dtime=None)  # nothing to tell the two ends apart by
    assert not cpsat._starved(cp_model.FEASIBLE, ceiling, wall_only)


def test_default_mode_counts_the_windows_its_wall_ceiling_starved_apart(monkeypatch):
    # the same in default mode, asserting only what holds at any load (a real window the
    # loaded machine starves is set apart as well): the stubbed windows, given the whole
    # ceiling, are reported as cut short, and the probe never stops on them
    import re

    problem, scrambled = _scrambled_row(16, 2)
    starved = _SEARCH_ONLY.probe_windows + 1
    tried = _starving_solve(monkeypatch, starved)
    p = place_cpsat(problem, time_budget_s=10.0, options=_SEARCH_ONLY, initial=scrambled)
    assert p.search is not None and p.search.stopped in ("stalled", "budget")
    said = re.search(r"(\d+) more cut short by the wall clock\)$", p.status)
    assert said is not None and int(said.group(1)) >= starved
    assert p.search.windows + int(said.group(1)) <= len(tried)  # the budget's end: neither
    assert validate_placement(problem, p) == []


def _brute_force_optimum(problem: PlacementProblem) -> float:
    """The least weighted wirelength over every legal placement (every shape, every position)."""
    options = [
        [Rect(x, y, w, h) for w, h in k.shapes
         for x in range(problem.width - w + 1) for y in range(problem.height - h + 1)]
        for k in problem.kernels
    ]  # fmt: skip
    names = [k.name for k in problem.kernels]
    best = float("inf")
    for rects in itertools.product(*options):
        if any(a.overlaps(b) for a, b in itertools.combinations(rects, 2)):
            continue
        best = min(best, weighted_wirelength(problem, dict(zip(names, rects, strict=True))))
    return best


@pytest.mark.parametrize("seed", range(4))
def test_a_choice_of_shapes_is_placed_at_the_true_optimum(seed):
    # each kernel may take any of its shapes (one interval of variable size per axis): the
    # optimum CP-SAT proves is the one every placement, shape by shape, gives by brute force
    rng = random.Random(seed)
    shapes = [((3, 1), (1, 3)), ((2, 2), (4, 1), (1, 4)), ((2, 1), (1, 2)), ((1, 1),)]
    kernels = tuple(PlaceKernel(f"k{i}", s) for i, s in enumerate(shapes))
    flows = tuple(
        PlaceFlow(f"k{i}", f"k{j}", float(rng.randint(1, 9)))
        for i, j in itertools.combinations(range(len(shapes)), 2)
        if rng.random() < 0.8
    )
    problem = PlacementProblem(4, 3, kernels, flows)
    p = place_cpsat(problem, time_budget_s=5.0, deterministic=True)
    assert validate_placement(problem, p) == []
    assert p.status.startswith("OPTIMAL")
    assert p.objective == _brute_force_optimum(problem)
