"""Replication (wsecc.core.replicas): k data-parallel copies of the pipeline on a grid of tiles.

The bundled GPT-2 sample fills the fabric or names what stops it; `--replicas 1` is one copy on
the whole fabric; every copy, on the whole fabric, passes the placement and routing validators;
the report, its schema and the summary agree; a fabric too small for two copies keeps one."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from importlib import resources

import pytest
from conftest import SAMPLES

import wsecc
from wsecc.core.replicas import (
    FABRIC_AREA,
    FILLS_WAFER,
    HOST_IO,
    REASONS,
    REQUESTED,
    Replicas,
    choose,
    copies_for_host,
    copy_area,
    grid_origins,
    tile_grids,
    whole_placement,
    whole_problem,
    whole_routing,
)
from wsecc.errors import WseccError
from wsecc.options import Options
from wsecc.place.problem import PlaceFlow, PlaceKernel, PlacementProblem, validate_placement
from wsecc.progress import summary_rows
from wsecc.route.problem import make_routing_problem, validate_routing

GPT2 = SAMPLES / "gpt2_legacy_op17.onnx"
FAST = {"seq": 32, "placer": "greedy", "validate": False, "sim": "l0"}


def _compile(**options):
    return wsecc.compile(GPT2, **(FAST | options))


@pytest.fixture(scope="module")
def auto():
    return _compile()


def _check_every_copy(c) -> None:
    """Every copy on the whole fabric through the solver-free validators."""
    program, t = c.program, c.target
    reps = program.replicas
    rp = make_routing_problem(
        c.problem, program.placement, colors_total=t.colors.total,
        colors_reserved=t.colors.reserved,
    )  # fmt: skip
    lanes = {f.name: 0 for f in rp.flows}
    for ln in program.routing.lanes:
        lanes[ln.flow] += 1
    rp = replace(rp, flows=tuple(replace(f, lanes=lanes[f.name]) for f in rp.flows))
    W, H = t.fabric.program_width, t.fabric.program_height
    wp = whole_problem(c.problem, reps, W, H)
    placement = whole_placement(wp, program.placement, reps)
    whole_rp, routing = whole_routing(rp, program.routing, reps, W, H)
    assert validate_placement(wp, placement) == []
    assert validate_routing(whole_rp, placement, routing) == []
    assert routing.colors_used_max <= routing.color_budget
    assert len(placement.rects) == reps.k * len(program.placement.rects)


def test_gpt2_sample_fills_the_fabric_or_names_what_stops_it(auto):
    rep = auto.report()
    reps = rep["replicas"]
    assert reps["k"] >= 2, reps
    assert reps["reason"] in REASONS
    assert rep["sizing"]["fabric_fraction"] >= 0.6 or reps["reason"] != ""
    if reps["reason"] == HOST_IO:
        # the copies fill the host I/O, and one copy fewer would not have
        host = reps["host_io_samples_per_s"]
        assert reps["samples_per_s"] <= host * (1 + 1e-9)
        assert (reps["k"] - 1) * rep["performance"]["on_wafer_samples_per_s"] < host
    _check_every_copy(auto)


def test_report_summary_and_schema_agree(auto):
    rep = auto.report()
    reps, sizing, perf = rep["replicas"], rep["sizing"], rep["performance"]
    k = reps["k"]
    assert sizing["pes_used"] == k * sum(row["pes"] for row in rep["kernels"])
    t = rep["target"]["fabric"]
    assert sizing["fabric_fraction"] == pytest.approx(
        sizing["pes_used"] / (t["width"] * t["height"])
    )
    assert perf["samples_per_s"] == pytest.approx(reps["samples_per_s"])
    assert reps["samples_per_s"] == pytest.approx(k * reps["per_copy_samples_per_s"])
    assert perf["samples_per_s"] == pytest.approx(k * auto.perf.samples_per_s)
    assert len(reps["origins"]) == k and reps["origins"][0] == [0, 0]
    rows = dict(summary_rows(rep))
    assert rows["replicas"].startswith(f"{k} copies (stopped by {reps['reason']}): ")
    assert rows["PEs used"].startswith(f"{sizing['pes_used']:,} ")
    assert rows["on wafer"].endswith(", per copy")
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((resources.files("wsecc.report") / "report.schema.json").read_text())
    jsonschema.validate(rep, schema)
    broken = json.loads(json.dumps(rep))
    broken["replicas"]["reason"] = "because"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


@pytest.mark.pictures  # the copies drawn into placement.png for real (tests/conftest.py)
def test_the_viewer_and_png_show_the_copies(auto, tmp_path):
    html = auto.viewer_html()
    assert f'"replicas":{{"k":{auto.copies},' in html
    auto.write(tmp_path / "o")
    assert (tmp_path / "o" / "placement.png").stat().st_size > 0
    # a saved folder keeps its copies (re-simulating shares the host I/O the same way)
    from wsecc.view import load_outdir

    assert load_outdir(tmp_path / "o").program.replicas == auto.program.replicas


def test_replicas_1_is_one_copy_on_the_whole_fabric():
    c = _compile(replicas=1)
    rep = c.report()
    assert rep["replicas"]["k"] == 1 and rep["replicas"]["reason"] == REQUESTED
    assert rep["replicas"]["tile"] is None
    assert (c.problem.width, c.problem.height) == (750, 994)
    assert rep["sizing"]["pes_used"] == sum(row["pes"] for row in rep["kernels"])
    assert rep["performance"]["samples_per_s"] == pytest.approx(c.perf.samples_per_s)


def test_replicas_n_gives_n_copies_each_routed():
    c = _compile(replicas=2)
    reps = c.program.replicas
    assert (reps.k, reps.reason) == (2, REQUESTED)
    assert c.problem.width * c.problem.height <= 750 * 994 // 2  # the copy's tile
    _check_every_copy(c)


def test_fabric_area_stops_replication_when_host_io_does_not(tmp_path):
    # wse2 with a host I/O no copy count fills: the fabric's area is what is left
    wide = (resources.files("wsecc.targets") / "wse2.toml").read_text()
    wide = wide.replace("offwafer_bytes_per_s = 150e9", "offwafer_bytes_per_s = 150e15")
    wide = wide.replace('name = "wse2"', 'name = "wse2-widehost"')
    path = tmp_path / "widehost.toml"
    path.write_text(wide)
    c = _compile(target=str(path))
    rep = c.report()
    assert rep["replicas"]["reason"] == FABRIC_AREA
    assert rep["sizing"]["fabric_fraction"] >= 0.6
    _check_every_copy(c)


def test_a_fabric_too_small_for_two_copies_keeps_one():
    c = wsecc.compile(GPT2, **(FAST | {"seq": 8, "target": "tiny32"}))
    reps = c.report()["replicas"]
    assert (reps["k"], reps["reason"], reps["tile"]) == (1, FILLS_WAFER, None)


def test_replicas_is_an_infer_mode_option():
    assert Options(replicas="auto").replicas is None
    assert Options(replicas=3).replicas == 3
    for bad in (0, -1, "three", True):
        with pytest.raises(WseccError, match="replicas"):
            Options(replicas=bad)
    with pytest.raises(WseccError, match="--systems"):
        Options(mode="train", replicas=2)
    assert Options(mode="train").replicas is None  # auto: training keeps one program


def test_cli_replicas_flag():
    from wsecc.cli import build_parser

    p = build_parser()
    assert p.parse_args(["compile", "m.onnx"]).replicas is None
    assert p.parse_args(["compile", "m.onnx", "--replicas", "auto"]).replicas is None
    assert p.parse_args(["compile", "m.onnx", "--replicas", "4"]).replicas == 4
    with pytest.raises(SystemExit):
        p.parse_args(["compile", "m.onnx", "--replicas", "0"])


# ---------------------------------------------------------------------- the pure pieces


def test_choose_names_what_stops_k():
    assert choose(tiles=15, k_host=4, requested=None, blocked=FABRIC_AREA) == (4, HOST_IO)
    assert choose(tiles=15, k_host=15, requested=None, blocked=FABRIC_AREA) == (15, HOST_IO)
    assert choose(tiles=15, k_host=40, requested=None, blocked=FABRIC_AREA) == (15, FABRIC_AREA)
    assert choose(tiles=15, k_host=4, requested=8, blocked=FABRIC_AREA) == (8, REQUESTED)
    assert choose(tiles=6, k_host=4, requested=8, blocked=FABRIC_AREA) == (6, FABRIC_AREA)


def test_copies_for_host_is_the_fewest_that_reach_the_bound():
    assert copies_for_host(871e3, 2.34375e6) == 3  # 2 x 871k < 2.34M <= 3 x 871k
    assert copies_for_host(1e6, 2e6) == 2
    assert copies_for_host(3e6, 2e6) == 1
    assert copies_for_host(1e6, math.inf) > 1_000_000


def _problem(width: int = 100, height: int = 60) -> PlacementProblem:
    kernels = (PlaceKernel("a", ((20, 10),)), PlaceKernel("b", ((10, 20), (20, 10))))
    return PlacementProblem(width, height, kernels, (PlaceFlow("a", "b", 64.0, "a->b"),))


def test_tile_grids_hold_the_copies_in_the_largest_tiles():
    p = _problem()
    for copies in (2, 3, 6, 12):
        grids = tile_grids(p, copies)
        assert grids, f"a 100x60 fabric has room for {copies} 400-PE copies"
        for cols, rows in grids:
            w, h = p.width // cols, p.height // rows
            assert cols * rows >= copies > cols * (rows - 1)  # the fewest rows
            assert w * h >= copy_area(p) and w >= 20 and h >= 10
    assert tile_grids(p, 40) == []  # 40 tiles of 150 PEs cannot hold 400-PE copies


def test_overlapping_copies_fail_the_validators():
    from wsecc.place.greedy import place_greedy
    from wsecc.route.router import route

    p = _problem()
    tile = (50, 30)
    one = replace(p, width=tile[0], height=tile[1])
    placement = place_greedy(one)
    rp = make_routing_problem(one, placement)
    routing = route(rp, placement)
    good = Replicas(4, REQUESTED, tile, grid_origins(tile, 2, 4))
    wp = whole_problem(one, good, p.width, p.height)
    whole = whole_placement(wp, placement, good)
    assert validate_placement(wp, whole) == []
    whole_rp, whole_lanes = whole_routing(rp, routing, good, p.width, p.height)
    assert validate_routing(whole_rp, whole, whole_lanes) == []
    bad = Replicas(2, REQUESTED, tile, ((0, 0), (5, 0)))  # the second copy's tile overlaps
    wp = whole_problem(one, bad, p.width, p.height)
    assert any("overlap" in v for v in validate_placement(wp, whole_placement(wp, placement, bad)))


def test_train_mode_keeps_one_program():
    c = wsecc.compile(GPT2, seq=16, mode="train", validate=False, placer="greedy")
    reps = c.report()["replicas"]
    assert (reps["k"], reps["reason"], reps["tile"]) == (1, "train mode", None)
    assert c.report()["sizing"]["pes_used"] == c.sizing.pes_used


def test_a_copy_that_does_not_route_on_a_tile_names_colors(monkeypatch):
    import wsecc.core.flow as flow
    from wsecc.route.problem import RoutingError

    real = flow._route_placed

    def short_of_colors(work, problem, *rest, **kw):
        if problem.width < work.target.fabric.program_width or problem.height < 994:  # a tile
            raise RoutingError("router (1, 1) needs 30 colors, budget 21", ())
        return real(work, problem, *rest, **kw)

    monkeypatch.setattr(flow, "_route_placed", short_of_colors)
    reps = _compile().report()["replicas"]
    assert (reps["k"], reps["reason"], reps["tile"]) == (1, "colors", None)
