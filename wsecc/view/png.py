"""Static pictures, the only module that imports matplotlib (Agg canvases, no pyplot, so they
are safe on any thread): the placement (`write_placement_png`), the roofline and the SRAM heat
map of a simulation (`write_roofline_png`, `write_sram_png`), and an ISPD 2020 solution
(`draw_contest_placement`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection, PatchCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from wsecc.core.replicas import Replicas
from wsecc.kernels import KernelGraph
from wsecc.limits import KERNEL, Limits
from wsecc.place.problem import Placement, Rect
from wsecc.route.problem import Routing
from wsecc.sim.roofline import BOUND_COLORS, roofline
from wsecc.targets import Target
from wsecc.view.data import LIMIT_COLOR, corners, kind_colors

if TYPE_CHECKING:
    from wsecc.ispd2020.kgraph import KGraph
    from wsecc.ispd2020.score import Score
    from wsecc.sim.perf import PerfResult
    from wsecc.sim.sram import SramMap

_LONG_SIDE_IN = 9.0  # figure size of the fabric's long side, inches
_DPI = 120


def write_placement_png(
    path: str | os.PathLike[str],
    kg: KernelGraph,
    placement: Placement,
    target: Target,
    title: str,
    *,
    limits: Limits | None = None,
    routing: Routing | None = None,
    replicas: Replicas | None = None,
) -> None:
    """Write a PNG of the program rectangle with each placed kernel's region filled by kind,
    a legend of kinds, and names on the regions big enough to hold them.

    replicas: the copies of a replicated program (`wsecc.core.replicas`): copy 0 drawn as above,
    the others' regions in the same colors, paler, and every tile dashed and labelled.

    limits: what limits the throughput (`wsecc.limits`), stated under the title as the
    summary states it; its on-wafer limit is highlighted in LIMIT_COLOR: a kernel's region
    outlined, or a flow's lanes drawn (from `routing`), with a ring around it that shows at any
    size, and a legend line naming it."""
    fab = target.fabric
    W, H = fab.program_width, fab.program_height
    kinds = {k.name: k.kind.value for k in kg.kernels}
    placed = [(n, r, kinds.get(n, "unknown")) for n, r in placement.rects.items()]
    colors = kind_colors([kind for _, _, kind in placed])
    scale = _LONG_SIDE_IN / max(W, H)
    fig = Figure(figsize=(W * scale + 2.6, H * scale + 0.8), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.add_collection(
        PatchCollection(
            [Rectangle((r.x, r.y), r.w, r.h) for _, r, _ in placed],
            facecolors=[colors[kind] for _, _, kind in placed],
            edgecolors="#202020",
            linewidths=0.3,
        )
    )
    ax.add_patch(Rectangle((0, 0), W, H, fill=False, edgecolor="black", linewidth=1.2))
    copies = replicas.k if replicas is not None else 1
    if replicas is not None and copies > 1:
        _draw_copies(ax, replicas, placed, colors, W)
    limit = _draw_limit(ax, limits, placement, routing)
    for name, r, _ in placed:
        if r.w >= 0.12 * W and r.h >= 0.02 * H:  # room for a label at this figure size
            ax.text(r.x + r.w / 2, r.y + r.h / 2, name, ha="center", va="center", fontsize=6)
    ax.set_xlim(-0.01 * W, 1.01 * W)
    ax.set_ylim(1.01 * H, -0.01 * H)  # y grows south, as on the fabric
    ax.set_aspect("equal")
    ax.set_xlabel("x (PE columns)")
    ax.set_ylabel("y (PE rows)")
    used = copies * sum(r.area for _, r, _ in placed)
    ax.set_title(
        f"{title}\n{target.name} {W}x{H} PEs, {len(placed)} kernels"
        + (f" x {copies} copies (stopped by {replicas.reason})" if replicas and copies > 1 else "")
        + f", {used:,} PEs ({used / (W * H):.1%})"
        + "".join(f"\n{line}" for line in (limits.lines() if limits else [])),
        fontsize=9,
    )
    counts = {kind: sum(1 for _, _, k in placed if k == kind) for kind in colors}
    handles: list[Patch | Line2D] = [
        Patch(facecolor=c, edgecolor="#202020", label=f"{k} ({counts[k]})")
        for k, c in colors.items()
    ]
    if limit is not None:
        handles.append(limit)
    ax.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        fontsize=8,
        title="kernel kind",
        title_fontsize=8,
        frameon=False,
    )
    _save(fig, path)


def _draw_copies(
    ax: Axes,
    replicas: Replicas,
    placed: list[tuple[str, Rect, str]],
    colors: dict[str, str],
    W: int,
) -> None:
    """Copies 1..k-1: copy 0's regions moved to their tiles, paler; every tile dashed, with its
    copy's number where the tile is wide enough to hold it."""
    moved = [
        (Rectangle((r.x + ox, r.y + oy), r.w, r.h), colors[kind])
        for ox, oy in replicas.origins[1:]
        for _, r, kind in placed
    ]
    ax.add_collection(
        PatchCollection(
            [p for p, _ in moved],
            facecolors=[c for _, c in moved],
            edgecolors="#202020",
            linewidths=0.2,
            alpha=0.45,
        )
    )
    tw, th = replicas.tile or (W, 0)
    for c, (ox, oy) in enumerate(replicas.origins):
        ax.add_patch(
            Rectangle((ox, oy), tw, th, fill=False, edgecolor="#505050", linewidth=0.6, ls="--")
        )
        if tw >= 0.08 * W:
            ax.text(ox + 3, oy + 3, f"copy {c}", ha="left", va="top", fontsize=5, color="#303030")


def _draw_limit(
    ax: Axes, limits: Limits | None, placement: Placement, routing: Routing | None
) -> Line2D | None:
    """Highlight the limit's kernel region or flow lanes on `ax`; the legend handle naming it
    (None when there is nothing on the fabric to point at)."""
    if limits is None or limits.highlight is None:
        return None
    name, kind = limits.highlight
    rect = placement.rects.get(name) if kind == KERNEL else None
    lanes = [ln for ln in (routing.lanes if routing else ()) if ln.flow == name]
    box: tuple[float, float, float, float]
    if rect is not None:
        box = (rect.x, rect.y, rect.x + rect.w, rect.y + rect.h)
        ax.add_patch(
            Rectangle((rect.x, rect.y), rect.w, rect.h, fill=False, ec=LIMIT_COLOR, lw=2.2)
        )
    elif lanes:
        paths = [[(x + 0.5, y + 0.5) for x, y in corners(ln.path)] for ln in lanes]
        ax.add_collection(LineCollection(paths, colors=LIMIT_COLOR, linewidths=1.6))
        xs = [x for p in paths for x, _ in p]
        ys = [y for p in paths for _, y in p]
        box = (min(xs) - 0.5, min(ys) - 0.5, max(xs) + 0.5, max(ys) + 0.5)
    else:
        return None
    # a ring around it: a layernorm's region or a two-PE lane is a few pixels at this size
    centre = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
    ax.plot(*centre, "o", ms=22, mfc="none", mec=LIMIT_COLOR, mew=1.5)
    what = f"flow {name} ({len(lanes)} lanes)" if rect is None else f"{kind} {name}"
    return Line2D([], [], color=LIMIT_COLOR, lw=2.2, label=f"{limits.highlight_label}:\n{what}")


def _figure(size: tuple[float, float]) -> tuple[Figure, Axes]:
    """A figure at the PNGs' dpi (laid out at the dpi it is drawn at, the text measured once)
    whose layout `_save` fits to its text."""
    fig = Figure(figsize=size, dpi=_DPI, layout="tight")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _save(fig: Figure, path: str | os.PathLike[str]) -> None:
    """Lay `fig` out once, then draw it once into a PNG. (With a layout engine set, savefig
    draws the whole figure an extra time without output before drawing it: the text, the ticks
    and the SRAM map's resampling twice.)"""
    engine = fig.get_layout_engine()
    if engine is not None:
        engine.execute(fig)
        fig.set_layout_engine(None)  # the layout stays as computed
    fig.savefig(os.fspath(path), format="png")


def write_roofline_png(path: str | os.PathLike[str], perf: PerfResult, target: Target) -> None:
    """Every kernel of `perf` on the per-PE roofline of `target` (module doc), colored by the
    bound L0 found for it; the slowest kernels labelled."""
    roof = roofline(target, perf.precision)
    ks = [k for k in perf.kernels if np.isfinite(k.intensity) and k.intensity > 0]
    x = np.array([k.intensity for k in ks])
    y = np.array([k.achieved_flops_per_s / k.pes for k in ks])
    lo = min(x.min(initial=1.0), roof.ridge_intensity()) / 4
    hi = max(x.max(initial=1.0), roof.ridge_intensity()) * 4
    xs = np.geomspace(lo, hi, 200)
    fig, ax = _figure((8, 5.5))
    ax.loglog(
        xs,
        np.minimum(roof.flops_per_pe_s, roof.link_bytes_per_s * xs),
        "k-",
        lw=2,
        label=f"FMAC {roof.flops_per_pe_s / 1e9:.1f} GFLOP/s, link "
        f"{roof.link_bytes_per_s / 1e9:.1f} GB/s per PE",
    )
    ax.loglog(
        xs,
        np.minimum(roof.vector_ops_per_pe_s, roof.link_bytes_per_s * xs),
        "k--",
        lw=1,
        label=f"vector {roof.vector_ops_per_pe_s / 1e9:.2f} Gop/s per PE",
    )
    for bound, color in BOUND_COLORS.items():
        sel = [i for i, k in enumerate(ks) if k.bound == bound]
        if sel:
            ax.scatter(x[sel], y[sel], s=18, c=color, label=f"{bound}-bound kernels", zorder=3)
    for k in sorted(ks, key=lambda k: -k.cycles_per_sample)[:5]:
        ax.annotate(
            k.name,
            (k.intensity, k.achieved_flops_per_s / k.pes),
            fontsize=7,
            xytext=(4, 4),
            textcoords="offset points",
        )
    ax.set_xlabel("arithmetic intensity (flop per fabric byte)")
    ax.set_ylabel("achieved flop/s per PE")
    ax.set_title(
        f"{perf.graph} on {perf.target} ({perf.precision}): {perf.samples_per_s:,.0f} samples/s, "
        f"bottleneck {perf.bottleneck}",
        fontsize=9,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    _save(fig, path)


DECODE_COLORS = {
    "compute": "tab:blue",
    "cache": "tab:green",
    "reduction": "tab:orange",
    "broadcast": "tab:purple",
}
"""Decode phases (`wsecc.kernels.decode.COMPONENTS`) as the decode roofline colors them."""


def write_decode_roofline_png(
    path: str | os.PathLike[str], roofline: Mapping[str, Any], title: str
) -> None:
    """Generate mode's decode roofline (`wsecc.modes.generate.GenerationPerf.roofline`): each kernel's
    flops per SRAM byte its busiest PE reads in a step against the flop/s per PE its step
    reaches, under the FMAC roof and the SRAM read ports' slope; colored by the phase that
    takes most of its step; the five slowest labelled."""
    points = [p for p in roofline["points"] if p["intensity"] > 0 and p["flops_per_pe_s"] > 0]
    peak, read = roofline["flops_per_pe_s"], roofline["sram_read_bytes_per_pe_s"]
    x = np.array([p["intensity"] for p in points])
    y = np.array([p["flops_per_pe_s"] for p in points])
    ridge = peak / read
    xs = np.geomspace(min(x.min(initial=1.0), ridge) / 4, max(x.max(initial=1.0), ridge) * 4, 200)
    fig, ax = _figure((8, 5.5))
    ax.loglog(
        xs,
        np.minimum(peak, read * xs),
        "k-",
        lw=2,
        label=f"FMAC {peak / 1e9:.1f} GFLOP/s, SRAM reads {read / 1e9:.1f} GB/s per PE",
    )
    for phase, color in DECODE_COLORS.items():
        sel = [i for i, p in enumerate(points) if p["bound"] == phase]
        if sel:
            ax.scatter(x[sel], y[sel], s=18, c=color, label=f"{phase}-bound", zorder=3)
    for p in sorted(points, key=lambda p: p["flops_per_pe_s"])[:5]:
        ax.annotate(
            p["name"], (p["intensity"], p["flops_per_pe_s"]), fontsize=7, xytext=(4, 4),
            textcoords="offset points",
        )  # fmt: skip
    ax.set_xlabel("decode intensity (flop per SRAM byte read)")
    ax.set_ylabel("flop/s per PE over its decode step")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    _save(fig, path)


def write_sram_png(path: str | os.PathLike[str], sram: SramMap) -> None:
    """Heat map of bytes per PE (KiB) over the program rectangle; unused PEs blank."""
    kib = np.ma.masked_where(~sram.used, sram.total / 1024.0)
    H, W = sram.owner.shape
    fig, ax = _figure((min(12, 3 + 8 * W / max(H, W)), min(10, 2 + 8 * H / max(H, W))))
    im = ax.imshow(
        kib,
        origin="upper",
        interpolation="nearest",
        cmap="viridis",
        vmin=0,
        vmax=sram.sram_bytes_per_pe / 1024,
    )
    fig.colorbar(im, ax=ax, label="KiB per PE")
    ax.set_xlabel("x (columns, east)")
    ax.set_ylabel("y (rows, south)")
    ax.set_title(
        f"SRAM per PE on {sram.target} ({sram.precision}): max {sram.max_bytes / 1024:.1f} KiB, "
        f"mean {sram.mean_used_bytes / 1024:.1f} KiB over {sram.pes_used:,} used PEs",
        fontsize=9,
    )
    _save(fig, path)


def draw_contest_placement(graph: KGraph, score: Score, path: str | Path, title: str = "") -> None:
    """Write an ISPD 2020 solution's placement (`score.rects` on the `graph`'s fabric) to
    `path` (PNG): rectangles labelled by kernel name, edges centre to centre."""
    fig, ax = _figure((8, 8))
    ax.add_patch(Rectangle((0, 0), graph.width, graph.height, fill=False, lw=1.5, ec="black"))
    cmap = colormaps["tab20"]
    for i, (name, r) in enumerate(sorted(score.rects.items())):
        ax.add_patch(
            Rectangle((r.x, r.y), r.w, r.h, fc=cmap(i % 20), ec="black", lw=0.5, alpha=0.7)
        )
        size = max(4.0, min(9.0, 0.05 * min(r.w, r.h) + 3))
        ax.text(r.x + r.w / 2, r.y + r.h / 2, name, ha="center", va="center", fontsize=size)
    for e in graph.kernel_edges:
        u, v = score.rects.get(graph.node(e.src).name), score.rects.get(graph.node(e.dst).name)
        if u is not None and v is not None:
            (ux, uy), (vx, vy) = u.center2(), v.center2()
            ax.plot([ux / 2, vx / 2], [uy / 2, vy / 2], color="black", lw=0.7, alpha=0.6)
    ax.set_xlim(-5, graph.width + 5)
    ax.set_ylim(-5, graph.height + 5)
    ax.set_aspect("equal")
    ax.set_title(title or f"{graph.source}: Δt={score.delta_t} WL={score.wirelength:g}")
    _save(fig, path)


def write_series_png(
    path: str | os.PathLike[str],
    series: dict[str, list[tuple[float, float]]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    measured: dict[str, list[tuple[float, float]]] | None = None,
) -> None:
    """Lines of (x, y) points, one per label, on log-log axes (a sweep's figures against an
    axis); `measured` series drawn dashed with hollow markers in the color of the line of the
    same label, when there is one."""
    fig, ax = _figure((8, 5))
    colors: dict[str, Any] = {}
    for label, pts in series.items():
        pts = sorted(pts)
        (line,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", ms=4, label=label)
        colors[label] = line.get_color()
    for label, pts in (measured or {}).items():
        pts = sorted(pts)
        ax.plot(
            [p[0] for p in pts], [p[1] for p in pts], "s--", ms=6, mfc="none",
            color=colors.get(label), label=f"{label} (published)",
        )  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    _save(fig, path)
