"""Shared products for the viewer tests: a compiled sample folder and a full-size synthetic
WSE-2 placement, plus a headless Chromium (skipped when it or playwright is missing)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, SAMPLES
from wsecc.targets import Target, load_target

from wsecc.kernels import Kernel, KernelGraph, KernelKind, KernelSizing, Sizing, SramBreakdown
from wsecc.place.greedy import place_greedy
from wsecc.place.problem import Placement
from wsecc.place.synthetic import transformer_problem
from wsecc.route.problem import RoutedLane, Routing, make_routing_problem
from wsecc.route.router import route

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def compiled_outdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`wsecc compile samples/gpt2_legacy_op17.onnx --seq 32 --placer greedy` output folder."""
    from wsecc.cli import main

    out = tmp_path_factory.mktemp("view") / "gpt2.wsecc"
    model = SAMPLES / "gpt2_legacy_op17.onnx"
    argv = ["compile", str(model), "--seq", "32", "--placer", "greedy", "--out", str(out)]
    assert main(argv) == 0
    return out


def _synthetic_kind(kind: str) -> KernelKind:
    for prefix, k in (("linear", KernelKind.LINEAR), ("embed", KernelKind.EMBEDDING)):
        if kind.startswith(prefix):
            return k
    return KernelKind(kind)


def synthetic_wse2(
    n: int = 300, lane_copies: int = 0
) -> tuple[KernelGraph, Sizing, Placement, Routing, Target]:
    """`transformer_problem(n)` on the WSE-2 program rectangle, greedy-placed and routed with
    small lanes (bytes_per_lane 32 KiB, up to 64 lanes a flow, 8 lanes a link): 6,306 lanes
    and ~5 x 10^4 hops for n = 300, as many as the edges' slots allow. `lane_copies` adds that
    many copies of every lane shifted 1, 2, ... PEs east, as extra flows, to load the viewer
    with more (the copies are no legal routing: the viewer does not care). Wrapped in a
    KernelGraph and Sizing the viewer can show (params are left empty: nothing here computes
    work from them)."""
    target = load_target("wse2")
    problem = transformer_problem(n)
    placement = place_greedy(problem, seed=0)
    rp = make_routing_problem(
        problem, placement, bytes_per_lane=1 << 15, max_lanes=64, link_capacity=8
    )
    routing = route(rp, placement)
    copies = [
        RoutedLane(
            f"{ln.flow}~{k}",
            ln.index,
            tuple((min(x + k, problem.width - 1), y) for x, y in ln.path),
            ln.color,
        )
        for k in range(1, lane_copies + 1)
        for ln in routing.lanes
    ]
    if copies:
        lanes = routing.lanes + tuple(copies)
        routing = replace(routing, lanes=lanes, total_length=sum(len(ln.path) - 1 for ln in lanes))
    kernels = tuple(
        Kernel(k.name, _synthetic_kind(k.kind), {}, k.onnx_nodes) for k in problem.kernels
    )
    kg = KernelGraph(
        "synthetic",
        1024,
        kernels,
        (),
    )
    sized = tuple(
        KernelSizing(
            name=k.name,
            kind=k.kind.value,
            h=placement.rects[k.name].h,
            w=placement.rects[k.name].w,
            sram=SramBreakdown(weights=1000 * (i % 30), buffers=2048, kv=0, reserve=8192),
            compute_cycles=1000 + 10 * (i % 17),
            link_cycles=900 + 20 * (i % 13),
        )
        for i, k in enumerate(kernels)
    )
    sizing = Sizing(
        strategy="balanced",
        graph="synthetic",
        target="wse2",
        precision="mixed",
        fill=0.6,
        chunk_tokens=32,
        clock_hz=target.clock.hz,
        usable_pes=target.usable_pes,
        sram_bytes_per_pe=target.sram.bytes_per_pe,
        tokens_per_sample=1024,
        flops_per_sample=1,
        peak_flops_per_cycle=1,
        kernels=sized,
    )
    return kg, sizing, placement, routing, target


def limit_pixels(png: Path) -> int:
    """Pixels of a PNG in the color that highlights what limits the throughput."""
    from matplotlib.colors import to_rgb
    from matplotlib.image import imread

    from wsecc.view.data import LIMIT_COLOR

    pixels = imread(png)[:, :, :3]
    return int((np.abs(pixels - np.array(to_rgb(LIMIT_COLOR))).max(axis=2) < 0.02).sum())


def artifacts_dir() -> Path:
    """Where tests leave files for people to look at: $WSECC_TEST_ARTIFACTS, else the
    gitignored artifacts/ folder at the repository root."""
    d = Path(os.environ.get("WSECC_TEST_ARTIFACTS") or ROOT / "artifacts") / "view"
    d.mkdir(parents=True, exist_ok=True)
    return d


def keep_artifact(path: Path, name: str | None = None) -> Path:
    """Copy `path` into `artifacts_dir()` (as `name` if given); return the copy's path."""
    dest = artifacts_dir() / (name or path.name)
    shutil.copyfile(path, dest)
    return dest


@pytest.fixture(scope="session")
def chromium() -> Iterator[object]:
    """A headless Chromium browser (playwright driving /usr/bin/chromium)."""
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
    )
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install -y chromium)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
