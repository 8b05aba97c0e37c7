"""Tiled start: layers found by structure, legal, deterministic, and on a GPT-2-shaped instance
better than the greedy and layered starts; CP-SAT starts from the best of them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wsecc.place.cpsat import CpSatOptions, _Limits, pack_unit, place_cpsat
from wsecc.place.greedy import greedy_rects
from wsecc.place.layered import layered_rects
from wsecc.place.problem import (
    PlaceFlow,
    PlaceKernel,
    Placement,
    PlacementError,
    PlacementProblem,
    Rect,
    tailored,
    validate_placement,
    weighted_wirelength,
)
from wsecc.place.synthetic import chain_problem, gpt2_small_problem
from wsecc.place.tiled import _nearest_free, repeating_layers, tiled_rects


def _legal(problem, rects) -> list[str]:
    p = Placement.of(problem, rects, placer="tiled", bound=0.0, status="", seconds=0.0, seed=0)
    return validate_placement(problem, p)


def _pack(unit, joins, start, stage="first"):
    # deterministic: one worker, a deterministic-time limit (as place_cpsat's deterministic mode)
    dtime = {"first": 0.1, "again": 0.4, "pools": 1.0}[stage]
    return pack_unit(unit, joins, _Limits(30.0, 1, 0, dtime), 0.01, start)


def test_layers_are_found_by_structure():
    before, layers, after = repeating_layers(gpt2_small_problem(3))
    assert before == ["000_embedding"]
    assert [len(layer) for layer in layers] == [7, 7, 7]
    assert [n.split("_", 1)[1] for n in layers[0]][:3] == ["layernorm", "linear_qkv", "attention"]
    assert after == ["022_layernorm", "023_lm_head"]
    assert repeating_layers(chain_problem(12))[1] == []  # no attention: no layers
    # RoBERTa and MPNet compute position ids from the token ids in kernels before the embedding
    problem = gpt2_small_problem(3)
    ids = (PlaceKernel("a_equal", ((4, 2),), kind="elementwise"),
           PlaceKernel("a_cumsum", ((4, 2),), kind="elementwise"))  # fmt: skip
    into = (PlaceFlow("a_equal", "a_cumsum", 1e2), PlaceFlow("a_cumsum", "000_embedding", 1e2))
    roberta = replace(problem, kernels=ids + problem.kernels, flows=into + problem.flows)
    before, layers, after = repeating_layers(roberta)
    assert before == ["a_equal", "a_cumsum", "000_embedding"]
    assert [len(layer) for layer in layers] == [7, 7, 7]


@pytest.fixture(scope="module")
def gpt2_4() -> tuple[PlacementProblem, dict[str, Rect] | None]:
    """GPT-2 small's regions, 4 layers, 76% fill, and their tiled placement (made once: two
    tests read it, each packing takes seconds)."""
    problem = gpt2_small_problem(4, height=560)
    return problem, tiled_rects(problem, _pack)


def test_tiled_beats_greedy_and_layered_on_a_gpt2_shaped_problem(gpt2_4):
    # greedy smears each layer over the width, the strips pack it kernel by kernel; one packed
    # layer reused keeps every layer compact.
    problem, tiled = gpt2_4
    assert tiled is not None and _legal(problem, tiled) == []
    wl = weighted_wirelength(problem, tiled)
    layered = layered_rects(problem)
    assert layered is not None
    assert (
        wl
        < weighted_wirelength(problem, layered)
        < weighted_wirelength(problem, greedy_rects(problem)[1])
    )
    assert tiled_rects(problem, _pack) == tiled  # deterministic with a deterministic `pack`


def test_a_packed_layer_stays_in_its_box():
    problem = gpt2_small_problem(3)
    _, layers, _ = repeating_layers(problem)
    names = set(layers[1])
    unit = replace(
        problem,
        width=250,
        height=200,
        kernels=tuple(k for k in problem.kernels if k.name in names),
        flows=tuple(f for f in problem.flows if f.src in names and f.dst in names),
    )
    rects = _pack(unit, [], None)
    assert rects is not None and _legal(unit, rects) == []


def test_cpsat_starts_from_the_tiled_placement_when_it_is_best(gpt2_4):
    problem, tiled = gpt2_4
    # a share of the budget that lets every layer packing run, with `_pack`'s limits
    opts = CpSatOptions(tiled_share=1.0)
    p = place_cpsat(problem, time_budget_s=4.0, deterministic=True, options=opts)
    assert validate_placement(problem, p) == []
    assert tiled is not None and p.objective <= weighted_wirelength(problem, tiled)


def test_the_tiled_start_takes_pool_shapes_that_pack_a_layer_better():
    # GPT-2 small's layers with one shape each in the menu, sizing's other shapes in the pool:
    # the layer's last packing may take pool shapes, and the placement is legal for the problem
    # tailored to them (and only for it); 16% less wirelength than without the pool
    full = gpt2_small_problem(3, height=560)
    pooled = replace(
        full,
        kernels=tuple(replace(k, shapes=k.shapes[:1], pool=k.shapes[1:]) for k in full.kernels),
    )
    menu_only = replace(pooled, kernels=tuple(replace(k, pool=()) for k in pooled.kernels))
    with_pool, without = tiled_rects(pooled, _pack), tiled_rects(menu_only, _pack)
    assert with_pool is not None and without is not None
    assert _legal(tailored(pooled, with_pool), with_pool) == []
    assert _legal(menu_only, with_pool) != []  # it took pool shapes
    assert weighted_wirelength(full, with_pool) < weighted_wirelength(full, without)
    # greedy cannot pack it with the menus alone; CP-SAT starts from the tiled placement
    with pytest.raises(PlacementError, match="greedy packing failed"):
        greedy_rects(pooled)
    p = place_cpsat(pooled, time_budget_s=4.0, deterministic=True)
    assert validate_placement(tailored(pooled, p.rects), p) == []
    assert p.bound <= p.objective


def test_tiled_declines_pinned_problems():
    problem = gpt2_small_problem(3)
    pinned = replace(problem, pins={"000_embedding": Rect(0, 0, 70, 28)})
    assert tiled_rects(pinned, _pack) is None


_RUN = """
import sys
from wsecc.place.cpsat import place_cpsat
from wsecc.place.synthetic import gpt2_small_problem
p = place_cpsat(gpt2_small_problem(4, height=560), time_budget_s=4.0, deterministic=True)
sys.stdout.write(p.dumps(include_timing=False))
"""


def test_deterministic_mode_with_the_tiled_start_is_byte_identical_across_processes():
    from conftest import two_fresh_runs

    first, second = two_fresh_runs(_RUN)
    assert first == second


def test_the_blocks_are_sized_only_for_packings_that_will_run(monkeypatch):
    # a `pack` whose budget ends after m first packings: asked beforehand (`ready`), the tiled
    # start skips the strip counts whose packing would be refused, and ends the same
    import wsecc.place.tiled as tiled

    problem = gpt2_small_problem(4, height=560)
    sized: list[int] = []
    tallest = tiled._tallest
    monkeypatch.setattr(tiled, "_tallest", lambda *a: sized.append(1) or tallest(*a))

    def run(m: int, asked: bool) -> dict[str, Rect] | None:
        packed: list[str] = []

        def pack(unit, joins, start, stage="first"):
            if stage == "first" and packed.count("first") >= m:
                return None
            packed.append(stage)
            return _pack(unit, joins, start, stage)

        def ready(stage) -> bool:
            return stage != "first" or packed.count("first") < m

        sized.clear()
        return tiled_rects(problem, pack, ready) if asked else tiled_rects(problem, pack)

    for m in (0, 1):
        without = run(m, asked=False)
        sized_without = len(sized)
        assert run(m, asked=True) == without
        assert len(sized) < sized_without
    assert run(0, asked=True) is None and sized == []


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 9),
    st.integers(1, 9),
    st.lists(
        st.tuples(st.integers(0, 11), st.integers(0, 7), st.integers(1, 4), st.integers(1, 4))
    ),
    st.integers(1, 6),
    st.integers(1, 6),
    st.floats(-5, 30),
    st.floats(-5, 20),
)
def test_the_nearest_free_spot_is_the_one_a_scan_of_the_free_positions_finds(
    W_extra, H_extra, occupied, w, h, tx, ty
):
    # `_leftovers` puts a kernel where `_nearest_free` says: the free position of least L1
    # distance from its doubled centre to (tx, ty), the first in row-major order on ties, as
    # the scan over every free position it replaced found it (same cost, same position)
    W, H = 12 + W_extra, 8 + H_extra
    grid = np.zeros((H, W), dtype=np.int32)
    for x, y, rw, rh in occupied:
        grid[y : y + rh, x : x + rw] = 1
    used = np.zeros((H + 1, W + 1), dtype=np.int32)
    np.cumsum(np.cumsum(grid, axis=0, out=used[1:, 1:]), axis=1, out=used[1:, 1:])
    free = [
        (abs(2 * x + w - tx) + abs(2 * y + h - ty), y, x)
        for y in range(H - h + 1)
        for x in range(W - w + 1)
        if not grid[y : y + h, x : x + w].any()
    ]
    got = _nearest_free(used, w, h, tx, ty)
    if not free:
        assert got is None
    else:
        cost, y, x = min(free)
        assert got == (cost, x, y)
