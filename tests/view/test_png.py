"""write_placement_png: a PNG of sensible size with every kind's color and the outline."""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import replace

import numpy as np
from matplotlib.colors import to_rgb
from matplotlib.image import imread
from view.conftest import keep_artifact, limit_pixels

from wsecc.view import load_outdir, write_placement_png
from wsecc.view.data import KIND_COLORS


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_placement_png(compiled_outdir, tmp_path):
    v = load_outdir(compiled_outdir)
    path = tmp_path / "placement.png"
    write_placement_png(path, v.program.kg, v.program.placement, v.program.target, v.title)
    width, height = _png_size(path.read_bytes())
    # the fabric is taller than wide (750 x 994): so is the plot area, legend aside
    assert 600 <= width <= 2000 and 800 <= height <= 2000
    pixels = imread(path)[:, :, :3]
    for kind in {k.kind.value for k in v.program.kg.kernels}:
        want = np.array(to_rgb(KIND_COLORS[kind]))
        assert (np.abs(pixels - want).max(axis=2) < 0.02).any(), f"no {kind} color drawn"
    keep_artifact(path, "placement_gpt2.png")


def test_kernels_the_graph_does_not_know_are_still_drawn(compiled_outdir, tmp_path):
    v = load_outdir(compiled_outdir)
    rects = dict(v.program.placement.rects)
    r = rects[v.program.kg.kernels[0].name]
    rects["stranger"] = type(r)(0, 900, 40, 40)
    placement = type(v.program.placement)(**{**v.program.placement.__dict__, "rects": rects})
    path = tmp_path / "p.png"
    write_placement_png(path, v.program.kg, placement, v.program.target, "with a stranger")
    assert _png_size(path.read_bytes())[0] > 0


def test_the_on_wafer_limit_is_highlighted(compiled_outdir, tmp_path):
    """The kernel that limits the wafer is outlined in LIMIT_COLOR; a flow has its lanes
    drawn; without limits nothing is."""
    v = load_outdir(compiled_outdir)
    args = (v.program.kg, v.program.placement, v.program.target, v.title)
    plain, kernel, flow = tmp_path / "plain.png", tmp_path / "kernel.png", tmp_path / "flow.png"
    write_placement_png(plain, *args)
    write_placement_png(kernel, *args, limits=v.limits, routing=v.program.routing)
    name = Counter(ln.flow for ln in v.program.routing.lanes).most_common(1)[0][0]
    as_flow = replace(v.limits, on_wafer=name, on_wafer_kind="flow")
    write_placement_png(flow, *args, limits=as_flow, routing=v.program.routing)
    assert limit_pixels(plain) == 0
    assert limit_pixels(kernel) > 0 and limit_pixels(flow) > 0
    keep_artifact(kernel, "placement_gpt2_limit.png")
