"""End to end: solve the corpus with a short budget; every written solution re-reads legal."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import ISPD_CORPUS

from wsecc.ispd2020 import solve as solve_module
from wsecc.ispd2020.floorplan import band_floorplan, column_floorplan, long_kernels, orientations
from wsecc.ispd2020.generate import GENERATED, render
from wsecc.ispd2020.kgraph import kernel_sequence, parse_kgraph, read_kgraph
from wsecc.ispd2020.perf import ExecParams
from wsecc.ispd2020.score import read_solution, score_solution, write_solution
from wsecc.ispd2020.solve import Instance, SolveOptions, least_packable_dt, solve, with_band
from wsecc.kernels.conv import ConvShape

CORPUS = ISPD_CORPUS

# Published best scores (CU.POKer, ICCAD'20); see docs/ispd2020.md.
PUBLISHED = {"A": 35810, "B": 66143.5, "C": 66920, "D": 36435}


def _shape(h: int, w: int) -> ConvShape:
    return ConvShape(ExecParams(1, 1, (1,), (1,)), h, w, 1)


def test_column_floorplan_packs_and_respects_the_fabric() -> None:
    # four 5x5 squares (or 2x10 / 10x2 strips) on a 10x10 fabric
    opts = [orientations((_shape(5, 5), _shape(2, 10))) for _ in range(4)]
    for weight in (0, 1):
        fp = column_floorplan(opts, [(0, 1), (1, 2), (2, 3)], (10, 10), weight)
        assert fp is not None
        rects = fp.rects
        assert all(0 <= r.x and r.x + r.w <= 10 and 0 <= r.y and r.y + r.h <= 10 for r in rects)
        assert not any(a.overlaps(b) for i, a in enumerate(rects) for b in rects[i + 1 :])
    assert column_floorplan([orientations((_shape(6, 6),))] * 4, [], (10, 10), 0) is None


def test_a_band_takes_long_kernels_that_no_columns_pack() -> None:
    # long 9x2 strips and 5x5 squares alternating on 10x10: a column holding a strip is 9 wide
    # (or the strip stands 9 high alone), so no columns fit; the strips flat in a band do
    long, square = orientations((_shape(2, 9),)), orientations((_shape(5, 5),))
    opts = [long, square, long, square]
    edges = [(0, 1), (1, 2), (2, 3)]
    assert column_floorplan(opts, edges, (10, 10), None) is None
    band = frozenset(long_kernels(opts, (10, 10)))
    assert band == {0, 2}
    for junction in (None, 0):
        fp = band_floorplan(opts, edges, (10, 10), junction, band)
        assert fp is not None
        rects = fp.rects
        assert all(0 <= r.x and r.x + r.w <= 10 and 0 <= r.y and r.y + r.h <= 10 for r in rects)
        assert not any(a.overlaps(b) for i, a in enumerate(rects) for b in rects[i + 1 :])
        assert [(c.w, c.h) for c in fp.choices] == [(9, 2), (5, 5), (9, 2), (5, 5)]
    assert band_floorplan(opts, edges, (10, 10), None, frozenset({0})) is None


@pytest.mark.slow
def test_a_band_packs_memory_bound_blocks_at_a_smaller_dt() -> None:
    # G16: ResNet-50 blocks at memlimit 2048, whose least-area shapes span most of the fabric
    inst = Instance.of(parse_kgraph(render(GENERATED["G16"])))
    sizer = inst.sizer()
    area = sizer.area_lower_bound()
    plain = least_packable_dt(inst, sizer, area)
    banded, dt = with_band(inst, sizer, area, plain)
    assert banded.band and area <= dt < plain


def test_sequence_keeps_chains_together() -> None:
    a = read_kgraph(CORPUS / "A.kgraph")
    names = [n.name for n in kernel_sequence(a)]
    assert names[:4] == ["k4", "k16", "k15", "k3"]  # input → k4 → k16 → k15 → k3
    d = read_kgraph(CORPUS / "D.kgraph")
    assert len(kernel_sequence(d)) == 52


@pytest.mark.parametrize("bench", ["Fork_fork.txt", "ConvBlock_conv.txt"])
def test_samples(bench: str, tmp_path: Path) -> None:
    graph = read_kgraph(CORPUS / bench)
    result = solve(graph, SolveOptions(time_budget_s=2, deterministic=True))
    assert result.score.legal
    assert result.lower_bound <= result.packable_dt <= result.score.delta_t
    write_solution(tmp_path / "s.solution", result.solution)
    assert score_solution(graph, read_solution(tmp_path / "s.solution")) == result.score


@pytest.mark.parametrize(
    "bench",
    # C's deterministic scan takes 23 s of CPU (A, B, D: 4-10 s): the slow run keeps it, the
    # same checks run on A, B and D by default
    ["A", "B", pytest.param("C", marks=pytest.mark.slow), "D"],
)
def test_contest_benchmarks(bench: str, tmp_path: Path) -> None:
    graph = read_kgraph(CORPUS / f"{bench}.kgraph")
    # deterministic: the work, not the seconds, is budgeted, so the score is the same on any load
    result = solve(graph, SolveOptions(time_budget_s=2, seed=1, deterministic=True))
    out = tmp_path / f"{bench}.solution"
    write_solution(out, result.solution)
    again = score_solution(graph, read_solution(out))
    assert again.legal, again.violations
    assert again.delta_t == result.score.delta_t and again.wirelength == result.score.wirelength
    assert result.lower_bound <= again.delta_t
    assert again.ceil_memory_ok
    # the deterministic 2 s run scores 0.991-1.000 of the best published score (A 35672, B
    # 66146.5, C 66855.5, D 36103; longer runs beat it: bench/RESULTS.md); 1% is left for
    # another OR-Tools version, none for the machine's load
    assert again.score <= 1.01 * PUBLISHED[bench]


def test_instance_edges_are_kernel_positions() -> None:
    graph = read_kgraph(Path(__file__).parent / "data" / "handout.kgraph")
    inst = Instance.of(graph)
    assert [s.name for s in inst.specs] == ["k1", "k2", "k3"]
    assert inst.edges == ((0, 1), (1, 2))


def test_deterministic_mode_repeats() -> None:
    graph = read_kgraph(CORPUS / "Fork_fork.txt")
    opts = SolveOptions(time_budget_s=1, deterministic=True, seed=3)
    assert solve(graph, opts).solution == solve(graph, opts).solution


def test_deterministic_mode_does_not_read_the_clock_for_its_work(monkeypatch) -> None:
    """A loaded machine (here: solve's clock running 50 times fast) gets the same solution: the
    refinement's share comes from the budget, not from the time left (G4's refinement changes
    its solution, so a skipped or shortened one shows)."""
    graph = parse_kgraph(render(GENERATED["G4"]))
    opts = SolveOptions(time_budget_s=4, deterministic=True, seed=3)
    calm = solve(graph, opts)
    real, start = time.perf_counter, time.perf_counter()
    fast = SimpleNamespace(perf_counter=lambda: start + 50 * (real() - start))
    monkeypatch.setattr(solve_module, "time", fast)
    assert solve(graph, opts).solution == calm.solution
