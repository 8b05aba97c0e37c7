"""The target's roofline, kernels on it, and the SRAM heat map (the only module of `wsecc.sim`
that imports matplotlib, lazily, with the Agg backend).

Roofline per PE, so regions of any size share one plot:
    y  achieved flop/s per PE of the kernel's region (L0: flops/sample x samples/s / PEs)
    x  arithmetic intensity: flops per byte the region exchanges over the fabric (the cost
       model's in + out bytes per sample)
    roofs  compute: flops_per_cycle x clock (FMAC) and vector_ops_per_cycle x clock;
           fabric: one link direction per PE, link_bytes_per_cycle x clock x intensity (the
           most a PE can be fed if every PE of the region had a link of its own; edge-fed
           regions get less). SRAM ports (memory) are in the data but not a roof of this plot:
           their intensity is per SRAM byte, not per fabric byte.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from wsecc.sim.perf import PerfResult
from wsecc.sim.sram import SramMap
from wsecc.targets import Target, check_precision

BOUND_COLORS = {"compute": "tab:blue", "fabric": "tab:orange", "memory": "tab:red"}


@dataclass(frozen=True)
class Roofline:
    """Peak rates of one target at one precision, per PE and for the program rectangle."""

    target: str
    precision: str
    clock_hz: float
    pes: int  # program rectangle
    flops_per_pe_s: float  # FMAC path
    vector_ops_per_pe_s: float
    sram_bytes_per_pe_s: float  # all ports: reads + writes
    link_bytes_per_s: float  # one link direction
    peak_flops_per_s: float  # the program rectangle

    def region_peak_flops_per_s(self, pes: int) -> float:
        return pes * self.flops_per_pe_s

    def ridge_intensity(self) -> float:
        """Flops per fabric byte where the per-PE fabric roof meets the FMAC roof."""
        return self.flops_per_pe_s / self.link_bytes_per_s

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def roofline(target: Target, precision: str) -> Roofline:
    check_precision(precision)
    hz = target.clock.hz
    port = target.memory.width_bits / 8
    return Roofline(
        target=target.name,
        precision=precision,
        clock_hz=hz,
        pes=target.usable_pes,
        flops_per_pe_s=target.flops_per_cycle[precision] * hz,
        vector_ops_per_pe_s=target.vector_ops_per_cycle[precision] * hz,
        sram_bytes_per_pe_s=(target.memory.reads_per_cycle + target.memory.writes_per_cycle)
        * port
        * hz,
        link_bytes_per_s=target.link_bytes_per_cycle * hz,
        peak_flops_per_s=target.peak_flops_per_s(precision),
    )


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_roofline_png(path: str | os.PathLike[str], perf: PerfResult, target: Target) -> None:
    """Every kernel of `perf` on the per-PE roofline of `target` (module doc), colored by the
    bound L0 found for it; the slowest kernels labelled."""
    plt = _pyplot()
    roof = roofline(target, perf.precision)
    ks = [k for k in perf.kernels if np.isfinite(k.intensity) and k.intensity > 0]
    x = np.array([k.intensity for k in ks])
    y = np.array([k.achieved_flops_per_s / k.pes for k in ks])
    lo = min(x.min(initial=1.0), roof.ridge_intensity()) / 4
    hi = max(x.max(initial=1.0), roof.ridge_intensity()) * 4
    xs = np.geomspace(lo, hi, 200)
    fig, ax = plt.subplots(figsize=(8, 5.5))
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
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_sram_png(path: str | os.PathLike[str], sram: SramMap) -> None:
    """Heat map of bytes per PE (KiB) over the program rectangle; unused PEs blank."""
    plt = _pyplot()
    kib = np.ma.masked_where(~sram.used, sram.total / 1024.0)
    H, W = sram.owner.shape
    fig, ax = plt.subplots(figsize=(min(12, 3 + 8 * W / max(H, W)), min(10, 2 + 8 * H / max(H, W))))
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
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
