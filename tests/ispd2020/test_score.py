"""The scorer and the solution format: the handout example, violations, parse errors."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wsecc.ispd2020.kgraph import read_kgraph
from wsecc.ispd2020.score import (
    KernelPlacement,
    Solution,
    SolutionError,
    format_solution,
    parse_solution,
    read_solution,
    score_solution,
)

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def handout():
    """The handout's example: k1 dblock → k2 cblock → k3 dblock (reconstructed, see docs)."""
    return read_kgraph(DATA / "handout.kgraph"), read_solution(DATA / "handout.solution")


def test_handout_example_scores_as_published(handout) -> None:
    graph, solution = handout
    s = score_solution(graph, solution)
    assert s.legal, s.violations
    assert s.delta_t == 50176
    assert (
        s.wirelength == 517
    )  # |k1−k2| 302.5 + |k2−k3| 214.5, centres (132,220) (286.5,72) (72,72)
    assert s.score == 50176 + 517
    assert not s.adapter_modelled and s.ceil_memory_ok
    assert (s.rects["k1"].w, s.rects["k1"].h) == (264, 144)  # R0: width along x


def test_format_round_trip(handout) -> None:
    _, solution = handout
    text = format_solution(solution)
    assert text.splitlines()[:2] == [
        "k1 = dblock( 56 56 256 4 4 8 8 8 8 64 16 )",
        "k1 : place(0 148 R0)",
    ]
    assert parse_solution(text) == solution


def test_template_lines_and_comments_are_ignored(handout) -> None:
    _, solution = handout
    text = (
        'include "common.paint"\n'
        + format_solution(solution).replace(
            "k1 : place(0 148 R0)", "k1 : place(0 148 R0)   # lower-left\nk1 : name('k1)"
        )
        + "kmap = union( k1 k2 k3 )\n"
    )
    assert parse_solution(text) == solution


def _with(solution: Solution, kernel: str, **changes) -> Solution:
    return Solution(
        tuple(replace(k, **changes) if k.name == kernel else k for k in solution.kernels)
    )


@pytest.mark.parametrize(
    ("kernel", "changes", "violation"),
    [
        ("k3", {"y": 100}, "k1 and k3 overlap"),
        ("k3", {"x": 100}, "k2 and k3 overlap"),
        ("k2", {"x": 400}, "k2: 273x144 at (400, 0) leaves the 633x633 fabric"),
        ("k3", {"rot": "R0", "y": -1}, "k3: 144x144 at (0, -1) leaves the 633x633 fabric"),
        ("k1", {"kind": "cblock"}, "k1: is a dblock in the kgraph, not a cblock"),
        (
            "k1",
            {"args": (56, 56, 256, 4, 4, 8, 8, 8, 8, 64, 0)},
            "k1: k3'=0 is not an integer in [1, 256]",
        ),
        (
            "k1",
            {"args": (56, 56, 255, 4, 4, 8, 8, 8, 8, 64, 16)},
            "k1: formal arguments 56 56 255 do not match the kgraph's 56 56 256",
        ),
        (
            "k1",
            {"args": (56, 56, 256, 1, 1, 1, 1, 1, 1, 1, 1)},
            "k1: memory 819200 > memlimit 24576",
        ),
        ("k1", {"name": "k9"}, "k9: not a kernel of handout.kgraph"),
    ],
)
def test_violations(handout, kernel: str, changes: dict, violation: str) -> None:
    graph, solution = handout
    s = score_solution(graph, _with(solution, kernel, **changes))
    assert violation in s.violations
    assert not s.legal


def test_missing_and_duplicate_kernels(handout) -> None:
    graph, solution = handout
    s = score_solution(graph, Solution(solution.kernels[:2] + solution.kernels[:1]))
    assert s.violations == ("k1: placed more than once", "k3: not placed")


def test_touching_is_legal(handout) -> None:
    graph, solution = handout
    s = score_solution(graph, _with(solution, "k2", x=144))  # k2 starts where k3 ends
    assert s.legal


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "k1 = pool( 1 2 )\nk1 : place(0 0 R0)\n",
            "s.sol:1: expected conv, dblock or cblock, got 'pool'",
        ),
        ("k1 = conv( 1 )\nk1 : place(0 0 R45)\n", "s.sol:2: expected R0 or R90, got 'R45'"),
        (
            "k1 = conv( 1 )\nk1 at 0 0\n",
            "s.sol:2: expected 'kN = kind( n n .. )' or 'kN : place(x y R0|R90)', got 'k1 at 0 0'",
        ),
        ("k1 = conv( 1 )\n", "s.sol:1: k1 is defined but never placed"),
        ("k1 : place(0 0 R0)\n", "s.sol:1: k1 is placed but never defined"),
        ("k1 = conv( 1 )\nk1 = conv( 1 )\n", "s.sol:2: k1 is defined twice"),
    ],
)
def test_parse_errors(text: str, message: str) -> None:
    with pytest.raises(SolutionError) as err:
        parse_solution(text, source="s.sol")
    assert str(err.value) == message


@settings(max_examples=200, deadline=None)
@given(
    victim=st.sampled_from(["k1", "k2", "k3"]),
    other=st.sampled_from(["k1", "k2", "k3"]),
    dx=st.integers(min_value=0, max_value=10_000),
    dy=st.integers(min_value=0, max_value=10_000),
)
def test_injected_overlap_is_flagged(handout, victim: str, other: str, dx: int, dy: int) -> None:
    """Move `victim` so that its lower-left corner lands anywhere inside `other`."""
    graph, solution = handout
    if victim == other:
        return
    rects = score_solution(graph, solution).rects
    target = rects[other]
    x, y = target.x + dx % target.w, target.y + dy % target.h
    s = score_solution(graph, _with(solution, victim, x=x, y=y))
    assert any("overlap" in v and victim in v and other in v for v in s.violations), s.violations
    assert not s.legal


def test_kernel_placement_is_frozen() -> None:
    k = KernelPlacement("k1", "conv", (1,), 0, 0, "R0")
    with pytest.raises(AttributeError):
        k.x = 1  # type: ignore[misc]
