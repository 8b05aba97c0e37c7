"""Generated contest graphs: they read back as written, and solve legal within the area bound."""

from __future__ import annotations

import pytest

from wsecc.ispd2020.generate import GENERATED, conv_chain, render, resnet_blocks, resnet_convs
from wsecc.ispd2020.kgraph import parse_kgraph
from wsecc.ispd2020.score import score_solution
from wsecc.ispd2020.solve import SolveOptions, solve


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
