"""Generated contest graphs: they read back as written, and solve legal within the area bound."""

from __future__ import annotations

import hashlib

import pytest

from wsecc.ispd2020.generate import (
    GENERATED,
    GOOGLENET,
    conv_chain,
    densenet,
    inception,
    render,
    resnet_blocks,
    resnet_convs,
)
from wsecc.ispd2020.kgraph import parse_kgraph
from wsecc.ispd2020.score import score_solution
from wsecc.ispd2020.solve import SolveOptions, solve

PINNED_G1_G9 = "202f3bb59f684887"  # sha256 of G1–G9's text as first committed, 16 digits


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_graphs_read_back_with_their_kernels_and_edges(name: str) -> None:
    g = GENERATED[name]
    graph = parse_kgraph(render(g), name)
    assert (graph.width, graph.height, graph.memlimit) == (g.width, g.height, g.memlimit)
    assert len(graph.kernels) == sum(n.kind not in ("input", "output") for n in g.nodes)
    assert len(graph.edges) == len(g.edges)


def test_families_have_the_expected_structure() -> None:
    blocks = parse_kgraph(render(resnet_blocks((2, 2))))
    assert [k.kind for k in blocks.kernels] == ["cblock", "dblock", "cblock", "dblock"]
    convs = parse_kgraph(render(resnet_convs((1, 1))))
    assert len(convs.kernels) == 2 * 4  # three convs and a projection per first block
    assert len(parse_kgraph(render(conv_chain(5, seed=3))).kernel_edges) == 4


def test_a_generated_chain_solves_legal_at_or_above_its_bound() -> None:
    graph = parse_kgraph(render(conv_chain(4, seed=1, size=14, width=200, height=200)))
    result = solve(graph, SolveOptions(time_budget_s=2.0, deterministic=True))
    assert score_solution(graph, result.solution).legal
    assert result.score.delta_t >= result.lower_bound


def test_pair_bound_sees_two_kernels_that_each_want_half_the_fabric() -> None:
    # two 3x3 convs of 1024 channels: by area they fit at a Δt where no two shapes tile 633x633
    graph = parse_kgraph(render(GENERATED["G9"]))
    result = solve(graph, SolveOptions(time_budget_s=2.0, deterministic=True))
    assert result.bound_kind == "pairs"
    assert result.area_bound < result.lower_bound <= result.score.delta_t


def test_branching_families_have_the_expected_structure() -> None:
    googlenet = parse_kgraph(render(inception()))
    assert len(googlenet.kernels) == 6 * len(GOOGLENET)  # four branches, two of them two deep
    assert len(googlenet.kernel_edges) == 2 * 9 + 16 * 8  # inside modules, then concatenations
    dense = parse_kgraph(render(densenet((3,))))
    # layer i's 1x1 is fed by the block input and the i earlier 3x3s; the last 3x3s feed output
    assert len(dense.kernels) == 6
    assert len(dense.kernel_edges) == 3 + (1 + 2)


def test_the_first_nine_generated_graphs_do_not_change() -> None:
    # RESULTS.md compares runs of G1–G9 across branches; their text is pinned
    digest = hashlib.sha256("".join(render(GENERATED[f"G{i}"]) for i in range(1, 10)).encode())
    assert digest.hexdigest()[:16] == PINNED_G1_G9
