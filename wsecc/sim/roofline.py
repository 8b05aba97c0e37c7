"""The target's roofline and where kernels sit on it (drawn by `wsecc.view.png`, with the SRAM
heat map: matplotlib is imported there only).

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

from dataclasses import asdict, dataclass
from typing import Any

from wsecc.targets import Target, check_precision
from wsecc.vocab import Precision

BOUND_COLORS = {"compute": "tab:blue", "fabric": "tab:orange", "memory": "tab:red"}


@dataclass(frozen=True)
class Roofline:
    """Peak rates of one target at one precision, per PE and for the program rectangle."""

    target: str
    precision: Precision
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


def roofline(target: Target, precision: Precision) -> Roofline:
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
