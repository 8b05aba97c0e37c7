"""The viewer page: self-contained, and in headless Chromium it draws every region, shows a
kernel's details on hover, zooms, pans, toggles each layer and finds kernels without a
JavaScript error; on a full-size WSE-2 placement a frame stays under FRAME_BUDGET_MS."""

from __future__ import annotations

import json
import re
import shutil
import statistics
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from view.conftest import keep_artifact, limit_pixels, synthetic_wse2

from wsecc.cli import main
from wsecc.core.program import Program
from wsecc.limits import Limits
from wsecc.progress import summary_rows
from wsecc.route.problem import Routing
from wsecc.view import load_outdir, render_viewer
from wsecc.view.data import unpack_array

FRAME_BUDGET_MS = 50.0
LAYERS = ("regions", "labels", "flows", "limit", "sram", "colors", "links")
HEAT_LAYERS = ("sram", "colors", "links")


def _page_data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="wsecc-data">(.*?)</script>', html, re.S)
    assert m, "no data block"
    return json.loads(m.group(1))


def _render(outdir: Path, title: str | None = None, **kw) -> str:
    v = load_outdir(outdir)
    kw.setdefault("limits", v.limits)
    return render_viewer(v.program, title=title or v.title, **kw)


def _a_flow(v) -> tuple[str, int]:
    """The routed flow with the most lanes, and its lane count."""
    counts = Counter(ln.flow for ln in v.program.routing.lanes)
    return counts.most_common(1)[0]


# --- without a browser -----------------------------------------------------------------------


def test_page_is_self_contained(compiled_outdir):
    html = _render(compiled_outdir)
    assert html.startswith("<!doctype html>")
    assert not re.search(r"(src|href)\s*=", html, re.I), "the page must not load anything"
    assert "http://" not in html and "https://" not in html
    data = _page_data(html)
    v = load_outdir(compiled_outdir)
    assert [k["name"] for k in data["kernels"]] == [k.name for k in v.program.kg.kernels]
    assert data["lanes"]["count"] == len(v.program.routing.lanes)
    sram = unpack_array(data["heat"]["sram"]["data"])
    assert sram.shape == (
        v.program.target.fabric.program_height,
        v.program.target.fabric.program_width,
    )
    r = v.program.placement.rects[v.program.kg.kernels[0].name]
    assert sram[r.y, r.x] == v.program.sizing.kernel(v.program.kg.kernels[0].name).sram.total


def test_markup_in_names_and_info_is_escaped(compiled_outdir):
    first = load_outdir(compiled_outdir).program.kg.kernels[0].name
    evil = "</script><script>alert(1)</script> __DATA__"
    html = _render(compiled_outdir, title=evil, kernel_info={first: {"note": evil}})
    assert html.count("</script>") == 2  # the data block's and the code's, nothing else
    assert _page_data(html)["kernels"][0]["info"]["note"] == evil


def test_kernel_info_overrides_sizing_figures(compiled_outdir):
    name = load_outdir(compiled_outdir).program.kg.kernels[1].name
    extra = {name: {"bound": "memory", "sram_bytes_per_pe": 123}}
    info = _page_data(_render(compiled_outdir, kernel_info=extra))["kernels"][1]["info"]
    assert (info["bound"], info["sram_bytes_per_pe"]) == ("memory", 123)


def test_a_compile_without_lanes_still_renders(compiled_outdir):
    v = load_outdir(compiled_outdir)
    html = render_viewer(replace(v.program, routing=Routing.of([], 21, 0)), title="no lanes")
    data = _page_data(html)
    assert data["lanes"]["count"] == 0 and len(data["kernels"]) == len(v.program.kg.kernels)
    assert not unpack_array(data["heat"]["colors"]["data"]).any()


def _summary_lines(report: dict) -> list[str]:
    """The summary table's bottleneck and on-wafer rows, worded as the viewer's header."""
    rows = dict(summary_rows(report))
    return [f"bottleneck {rows['bottleneck']}", f"on-wafer limit {rows['on wafer']}"]


def test_compile_and_view_state_the_summarys_bottleneck(compiled_outdir, tmp_path):
    """`wsecc compile`'s viewer.html and `wsecc view`'s both say what the summary says: the
    performance simulation's bottleneck, not sizing's, and the on-wafer limit with the
    balanced and achieved figures; the highlight is the on-wafer limit's region."""
    report = json.loads((compiled_outdir / "report.json").read_text())
    perf = report["performance"]
    # the sample is chosen so that this test tells the two apart
    assert report["sizing"]["bottleneck"] != perf["bottleneck"]
    folder = tmp_path / "again"
    shutil.copytree(compiled_outdir, folder)
    (folder / "viewer.html").unlink()
    assert main(["view", str(folder)]) == 0
    for html_path in (compiled_outdir / "viewer.html", folder / "viewer.html"):
        lim = _page_data(html_path.read_text())["limits"]
        assert (lim["bottleneck"], lim["bottleneck_kind"]) == (
            perf["bottleneck"],
            perf["bottleneck_kind"],
        )
        assert (lim["on_wafer"], lim["on_wafer_kind"]) == (
            perf["on_wafer_bottleneck"],
            perf["on_wafer_bottleneck_kind"],
        )
        assert lim["balanced_samples_per_s"] == report["sizing"]["samples_per_s"]
        assert lim["on_wafer_samples_per_s"] == perf["on_wafer_samples_per_s"]
        assert lim["lines"] == _summary_lines(report), html_path
        assert "balanced" in lim["lines"][1] and "achieved" in lim["lines"][1]
        assert f"{report['sizing']['bottleneck']} (" not in lim["lines"][0]
        hl = lim["highlight"]
        assert (hl["name"], hl["label"]) == (perf["on_wafer_bottleneck"], "on-wafer limit")
        stats = _page_data(html_path.read_text())["stats"]  # the header's gap names its bound
        assert (stats["gap"], stats["bound_kind"]) == (
            report["placement"]["gap"],
            report["placement"]["bound_kind"],
        )
        kernels = _page_data(html_path.read_text())["kernels"]
        if perf["on_wafer_bottleneck_kind"] == "kernel":
            assert kernels[hl["kernel"]]["name"] == perf["on_wafer_bottleneck"]
        else:
            assert hl["lanes"] > 0


def test_a_flow_limit_highlights_its_lanes(compiled_outdir):
    v = load_outdir(compiled_outdir)
    flow, lanes = _a_flow(v)
    limits = replace(v.limits, on_wafer=flow, on_wafer_kind="flow")
    data = _page_data(_render(compiled_outdir, limits=limits))
    hl = data["limits"]["highlight"]
    assert hl["kind"] == "flow" and hl["kernel"] == -1
    assert data["lanes"]["flows"][hl["flow"]] == flow and hl["lanes"] == lanes
    assert data["limits"]["lines"][1].startswith(f"on-wafer limit {flow} (flow): ")


def test_without_performance_data_the_viewer_says_sizings(compiled_outdir, tmp_path):
    folder = tmp_path / "unsimulated"
    shutil.copytree(compiled_outdir, folder)
    report = json.loads((folder / "report.json").read_text())
    del report["performance"]
    (folder / "report.json").write_text(json.dumps(report))
    v = load_outdir(folder)
    assert v.limits == Limits(
        report["sizing"]["bottleneck"], "kernel", False, report["sizing"]["samples_per_s"]
    )
    for html in (_render(folder), render_viewer(v.program, title="no limits given")):
        lim = _page_data(html)["limits"]
        assert lim["lines"][0] == (
            f"bottleneck {report['sizing']['bottleneck']} (sizing's slowest kernel; not simulated)"
        )
        hl = lim["highlight"]
        assert hl["label"] == "sizing's bottleneck"
        assert _page_data(html)["kernels"][hl["kernel"]]["name"] == report["sizing"]["bottleneck"]


def test_sram_map_of_the_wrong_shape_is_refused(compiled_outdir):
    with pytest.raises(ValueError, match=r"expected \(H, W\) = \(994, 750\)"):
        _render(compiled_outdir, sram_per_pe=np.zeros((10, 10)))


# --- in Chromium -----------------------------------------------------------------------------


class _Page:
    """A page opened from file:// that records JavaScript errors, console errors and
    warnings, and any request leaving the file."""

    def __init__(self, browser, html_path: Path, width: int = 1400, height: int = 900):
        self.problems: list[str] = []
        self.page = browser.new_page(viewport={"width": width, "height": height})
        self.page.on("pageerror", lambda e: self.problems.append(f"pageerror: {e}"))
        self.page.on(
            "console",
            lambda m: (
                self.problems.append(f"console {m.type}: {m.text}")
                if m.type in ("error", "warning")
                else None
            ),
        )
        self.page.on(
            "request",
            lambda r: None if r.url.startswith("file:") else self.problems.append(f"fetch {r.url}"),
        )
        t0 = time.perf_counter()
        self.page.goto(html_path.as_uri())
        self.page.wait_for_function("window.__wsecc && window.__wsecc.ready", timeout=60_000)
        self.load_s = time.perf_counter() - t0

    def js(self, expr: str, arg=None):
        return self.page.evaluate(expr, arg)

    def next_frame(self) -> None:
        self.js("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")

    def check(self) -> None:
        assert not self.problems, "\n".join(self.problems)

    def close(self) -> None:
        self.page.close()


def _limit_pixels(page: _Page, path: Path) -> int:
    """Pixels of the page's screenshot in the highlight's color."""
    page.page.screenshot(path=str(path))
    return limit_pixels(path)


def test_viewer_in_chromium(chromium, compiled_outdir, tmp_path):
    v = load_outdir(compiled_outdir)
    report = json.loads((compiled_outdir / "report.json").read_text())
    html_path = tmp_path / "viewer.html"
    html_path.write_text(_render(compiled_outdir))
    page = _Page(chromium, html_path)
    try:
        n = len(v.program.kg.kernels)
        assert page.js("window.__wsecc.kernels") == n
        assert page.js("window.__wsecc.kernelsDrawn") == n
        page.check()

        # the header says what the summary says; the on-wafer limit is highlighted
        assert page.page.inner_text("#limits") == " \u00b7 ".join(_summary_lines(report))
        on_wafer = report["performance"]["on_wafer_bottleneck"]
        assert page.js("window.__wsecc.limit.name") == on_wafer
        legend = page.page.inner_text("#limit-legend")
        assert legend.startswith("highlighted: on-wafer limit, ") and on_wafer in legend
        assert _limit_pixels(page, tmp_path / "limit.png") > 0
        page.page.click("#layer-limit")
        page.next_frame()
        assert _limit_pixels(page, tmp_path / "no-limit.png") == 0
        assert page.page.locator("#limit-legend").count() == 0
        page.page.click("#layer-limit")
        page.next_frame()
        fitted = page.js("window.__wsecc.view().s")
        page.page.click("#limit-legend")  # zooms to it
        page.next_frame()
        assert page.js("window.__wsecc.view().s") > 2 * fitted
        page.page.click("#fit")
        page.next_frame()
        page.check()

        # hover: every kernel, found by name (which zooms to it), shows its own details
        for k in v.program.kg.kernels:
            assert page.js("name => window.__wsecc.find(name)", k.name) >= 0
            page.next_frame()
            c = page.js("name => window.__wsecc.kernelCenter(name)", k.name)
            page.page.mouse.move(c["x"], c["y"])
            tip = page.page.locator("#tip")
            assert tip.is_visible(), k.name
            assert tip.locator(".name").inner_text().startswith(k.name)
            text = tip.inner_text()
            assert "SRAM per PE" in text and "cycles/sample" in text and "bound" in text
        page.check()

        # the search box finds by name and zooms there
        big = max(v.program.kg.kernels, key=lambda k: v.program.placement.rects[k.name].area)
        page.page.fill("#search", big.name)
        page.page.press("#search", "Enter")
        page.next_frame()
        assert f"found {big.name}" in page.page.inner_text("#status")

        # fit, then wheel zooms around the cursor and drag pans
        page.page.click("#fit")
        page.next_frame()
        assert page.js("window.__wsecc.kernelsDrawn") == n
        before = page.js("window.__wsecc.view()")
        box = page.page.locator("#view").bounding_box()
        cx, cy = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        page.page.mouse.move(cx, cy)
        for _ in range(4):
            page.page.mouse.wheel(0, -240)
            page.next_frame()
        zoomed = page.js("window.__wsecc.view()")
        assert zoomed["s"] > 2 * before["s"]
        page.page.mouse.down()
        page.page.mouse.move(cx + 120, cy + 60, steps=6)
        page.page.mouse.up()
        page.next_frame()
        panned = page.js("window.__wsecc.view()")
        assert panned["ox"] == pytest.approx(zoomed["ox"] + 120, abs=2)
        assert panned["oy"] == pytest.approx(zoomed["oy"] + 60, abs=2)

        # each layer on and off; heat maps are exclusive and get a legend
        page.page.click("#fit")
        for layer in LAYERS:
            for _ in range(2):
                page.page.click(f"#layer-{layer}")
                page.next_frame()
            assert page.page.is_checked(f"#layer-{layer}") == (layer not in HEAT_LAYERS)
        for layer in HEAT_LAYERS:
            page.page.click(f"#layer-{layer}")
            page.next_frame()
            checked = [h for h in HEAT_LAYERS if page.page.is_checked(f"#layer-{h}")]
            assert checked == [layer]
            assert page.page.locator("#legend canvas").count() == 1
            page.page.mouse.move(cx, cy)
        page.page.click("#layer-links")
        page.check()

        # a screenshot people can look at: the whole fabric with the largest kernel hovered
        page.page.click("#fit")
        page.next_frame()
        c = page.js("name => window.__wsecc.kernelCenter(name)", big.name)
        page.page.mouse.move(c["x"], c["y"])
        page.next_frame()
        shot = tmp_path / "viewer_gpt2.png"
        page.page.screenshot(path=str(shot))
        keep_artifact(shot)
        keep_artifact(html_path, "viewer_gpt2.html")
        page.check()
    finally:
        page.close()


def test_a_flow_limit_is_drawn_in_chromium(chromium, compiled_outdir, tmp_path):
    v = load_outdir(compiled_outdir)
    flow, lanes = _a_flow(v)
    limits = replace(v.limits, on_wafer=flow, on_wafer_kind="flow")
    html_path = tmp_path / "viewer.html"
    html_path.write_text(_render(compiled_outdir, limits=limits))
    page = _Page(chromium, html_path)
    try:
        limit = page.js("window.__wsecc.limit")
        assert (limit["name"], limit["kind"], limit["lanes"]) == (flow, "flow", lanes)
        assert f"flow {flow} ({lanes} lanes)" in page.page.inner_text("#limit-legend")
        assert _limit_pixels(page, tmp_path / "fit.png") > 0
        assert page.js("window.__wsecc.zoomToLimit()")
        page.next_frame()
        assert _limit_pixels(page, tmp_path / "zoomed.png") > 0
        shot = tmp_path / "viewer_gpt2_flow_limit.png"
        page.page.screenshot(path=str(shot))
        keep_artifact(shot)
        page.check()
    finally:
        page.close()


def _best_run(page: _Page, start: str = "window.__wsecc.fit()", tries: int = 3) -> dict:
    """The run of the page's zoom/pan sequence (from `start`) with the smallest worst frame."""
    best: dict = {}
    for _ in range(tries):
        page.js(start)
        run = page.js("window.__wsecc.measure()")
        if not best or max(run["render_ms"]) < max(best["render_ms"]):
            best = run
        if max(best["render_ms"]) < FRAME_BUDGET_MS / 2:
            break
    return best


@pytest.mark.slow  # frame times are wall-clock: a loaded machine, not the viewer, can fail them
def test_viewer_is_smooth_on_a_full_wse2(chromium, tmp_path, record_property):
    """300 kernels and 25,000 lanes (2 x 10^5 hops) on 750 x 994 PEs: zooming and panning one
    step per frame, every frame draws (raster included) within FRAME_BUDGET_MS, and 90% of
    frame intervals stay within it too. Each sequence runs up to three times and the best run
    counts, so a neighbour's burst of CPU on a shared machine does not fail the test."""
    t0 = time.perf_counter()
    kg, sizing, placement, routing, target = synthetic_wse2(300, lane_copies=3)
    t1 = time.perf_counter()
    html = render_viewer(Program(kg, sizing, placement, routing, target), title="synthetic WSE-2")
    t2 = time.perf_counter()
    html_path = tmp_path / "viewer.html"
    html_path.write_text(html)
    page = _Page(chromium, html_path, width=1600, height=1000)
    runs: dict[str, dict[str, list[float]]] = {}
    try:
        assert page.js("window.__wsecc.kernelsDrawn") == len(kg.kernels)
        runs["regions+lanes"] = _best_run(page)
        # around one kernel, where lanes are vectors with arrowheads
        middle = kg.kernels[len(kg.kernels) // 2].name
        runs["zoomed"] = _best_run(page, f"window.__wsecc.find({middle!r})")
        for layer in HEAT_LAYERS:
            page.page.click(f"#layer-{layer}")
            runs[layer] = _best_run(page)
        page.page.click("#layer-links")  # back to regions and lanes
        # real input, through the page's own handlers
        page.page.click("#fit")
        box = page.page.locator("#view").bounding_box()
        cx, cy = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        page.page.mouse.move(cx, cy)
        for dy in (-200, -200, -200, 200, 200, 200):
            page.page.mouse.wheel(0, dy)
            page.next_frame()
        page.page.mouse.down()
        page.page.mouse.move(cx + 200, cy + 100, steps=10)
        page.page.mouse.up()
        page.page.click("#fit")
        page.next_frame()
        shot = tmp_path / "viewer_wse2_synthetic.png"
        page.page.screenshot(path=str(shot))
        keep_artifact(shot)
        page.check()
    finally:
        page.close()
    render_ms = [t for r in runs.values() for t in r["render_ms"]]
    interval_ms = sorted(t for r in runs.values() for t in r["interval_ms"][1:])
    p90 = interval_ms[int(0.9 * (len(interval_ms) - 1))]
    figures = {
        "kernels": len(kg.kernels),
        "lanes": len(routing.lanes),
        "lane_hops": routing.total_length,
        "html_bytes": len(html),
        "synthetic_place_route_s": round(t1 - t0, 2),
        "render_viewer_s": round(t2 - t1, 2),
        "page_ready_s": round(page.load_s, 2),
        "render_ms_max": round(max(render_ms), 2),
        "render_ms_median": round(statistics.median(render_ms), 2),
        "interval_ms_median": round(statistics.median(interval_ms), 2),
        "interval_ms_p90": round(p90, 2),
        "runs": {
            name: {k: [round(t, 1) for t in v] for k, v in r.items()} for name, r in runs.items()
        },
    }
    (tmp_path / "frame_times.json").write_text(json.dumps(figures, indent=1))
    keep_artifact(tmp_path / "frame_times.json")
    for key in ("lanes", "lane_hops", "page_ready_s", "render_ms_max", "interval_ms_p90"):
        record_property(key, figures[key])
    print(json.dumps({k: v for k, v in figures.items() if k != "runs"}))
    assert max(render_ms) < FRAME_BUDGET_MS, figures
    assert p90 < FRAME_BUDGET_MS, figures


def test_link_load_planes_place_each_link_on_its_plane():
    """The link-load heat map: lanes on each router's outgoing link, on the plane of its
    direction (`LINK_DIRS`), rounded half to even, clipped to 0..255; links off the fabric and
    unknown directions dropped."""
    from wsecc.view.data import LINK_DIRS, link_load_planes

    loads = {((0, 0), "E"): 3, ((2, 1), "W"): 2.5, ((1, 1), "N"): 300, ((1, 0), "S"): 3.5,
             ((3, 0), "E"): 9, ((0, -1), "N"): 9, ((0, 1), "X"): 9, ((1, 1), "S"): -2}  # fmt: skip
    planes = link_load_planes(loads, 3, 2)
    want = np.zeros((4, 2, 3), np.uint8)
    e, n, s, w = (LINK_DIRS.index(d) for d in "ENSW")
    want[e, 0, 0], want[w, 1, 2], want[n, 1, 1], want[s, 0, 1] = 3, 2, 255, 4
    assert planes.dtype == np.uint8 and (planes == want).all()
    assert not link_load_planes({}, 3, 2).any()


def _odd_routing() -> Routing:
    """Lanes that are hard on vectorized forms: one point, two points, a straight run, turns,
    a repeated point (a zero step), a diagonal step, a step off the fabric, and lanes that
    end where the next begins."""
    from wsecc.route.problem import RoutedLane

    paths = [
        ((1, 1),),
        ((0, 0), (1, 0)),
        ((0, 0), (1, 0), (2, 0), (3, 0)),
        ((3, 0), (3, 1), (2, 1), (2, 2), (2, 2), (3, 3)),
        ((2, 2), (3, 2), (4, 2), (4, 1)),  # x = 4 is off a 4-wide fabric
        ((1, 0), (1, 1), (1, 2)),
        ((1, 2), (1, 1), (1, 0), (0, 0)),
        ((4, 1), (4, 2), (3, 2)),
        ((4, 1), (4, 2)),
    ]
    lanes = tuple(RoutedLane(f"f{k % 3}", k, p, k % 5) for k, p in enumerate(paths))
    return Routing(lanes, 24, 0, {}, 0, (0, 0), 0, sum(len(p) - 1 for p in paths), 1)


def _routings(compiled_outdir) -> list[tuple[Routing, int, int]]:
    v = load_outdir(compiled_outdir)
    fab = v.program.target.fabric
    return [(v.program.routing, fab.program_width, fab.program_height), (_odd_routing(), 4, 3)]


def test_routed_link_loads_are_the_lane_by_lane_counts(compiled_outdir):
    """The numpy count of every lane step gives the planes and the busiest link of
    `link_load_planes(routing.link_loads())`, links off the fabric in the busiest too."""
    from wsecc.view.data import link_load_planes, routed_link_loads

    for routing, w, h in _routings(compiled_outdir):
        loads = routing.link_loads()
        planes, busiest = routed_link_loads(routing, w, h)
        assert planes.dtype == np.uint8
        assert np.array_equal(planes, link_load_planes(loads, w, h))
        assert busiest == max(loads.values(), default=0)
    _, busiest = routed_link_loads(_odd_routing(), 4, 3)
    assert busiest == 2  # (4, 1) south, off the fabric, by two lanes


def test_router_colors_and_lane_corners_are_the_lane_by_lane_forms(compiled_outdir):
    """Colors per router (one table of (router, color) marks) and each lane's corners (one
    numpy pass) equal their definitions: distinct colors of the lanes through each router,
    and `corners(path)` lane after lane."""
    from wsecc.view.data import _corner_arrays, corners, router_colors_map

    for routing, w, h in _routings(compiled_outdir):
        want = np.zeros((h, w), np.uint32)
        seen: dict[tuple[int, int], set[int]] = {}
        for ln in routing.lanes:
            for x, y in ln.path:
                if 0 <= x < w and 0 <= y < h:
                    seen.setdefault((x, y), set()).add(ln.color)
        for (x, y), colors in seen.items():
            want[y, x] = len(colors)
        assert np.array_equal(router_colors_map(routing, w, h), want)

        start, pts = _corner_arrays(routing)
        k = [0]
        flat: list[int] = []
        for ln in routing.lanes:
            flat += [c for p in corners(ln.path) for c in p]
            k.append(len(flat) // 2)
        assert start.dtype == pts.dtype == np.uint32
        assert start.tolist() == k and pts.tolist() == flat
