"""Decode-step cost: the latency of one generated token through a kernel's region.

Generation (`wsecc.modes.generate`) decodes one token per sequence per step, B sequences together,
with every weight resident and each attention's K/V cache beside it. A step is not a stream of
token chunks: one token's vectors cross each region once, so what a throughput model hides in
the pipeline's fill — the hops of a multicast, the relays of a reduction chain — is now most of
the time. Each kind states its decode model next to its throughput model (`KindDef.decode`), on
the same mapping; this module holds the pieces they share.

Notation as `wsecc.kernels.costs` (sb, ab, f, v, L), and, from the target (docs/hardware.md):

    hop     link.hop_latency_cycles      one PE-to-PE hop: 1 cycle (§5.1, WP-SDK, Rocki20)
    ramp    link.ramp_latency_cycles     router <-> compute element: 2 cycles ⚠ (§5.1, Lucz24)
    relay   = 2 ramp + hop               one PE of a reduction chain: the partial comes off the
                                         fabric, is added to the PE's own (the add overlaps the
                                         ramp), and goes back on and one hop further: Lucz24's
                                         (2 T_R + 1) cycles per hop of distance (wafer-facts §8)
    R       memory.reads_per_cycle x memory.width_bits / 8    SRAM read bytes per cycle (§4)

    multicast(n, bytes) = (n - 1) hop + cdiv(bytes, L)      a vector to n PEs in a line: the
                                                            first wavelet's trip, then the rest
    chain(n, bytes)     = (n - 1) relay + cdiv(bytes, L)    a vector summed through n PEs
    matvec(macs, wb)    = max(cdiv(2 macs, f), cdiv(wb, R)) multiply-adds at the FMAC rate, or
                                                            the weight bytes through the read
                                                            ports, whichever is slower

A kernel's step latency is the sum of its phases, `DecodeCost.latency`: inputs multicast
(broadcast), local multiply-adds (compute) or scoring of the cached keys (cache), partials
reduced (reduction), results to the region's out edge (in broadcast). For one token the vectors
are short, so the phases barely overlap; summing them overstates the latency by at most the
shorter phases' streaming time, a few cycles per phase at decode's vector lengths.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from wsecc.kernels.conv import cdiv

COMPONENTS = ("compute", "cache", "reduction", "broadcast")
"""A kernel's decode phases, in `DecodeCost` field order."""


@dataclass(frozen=True)
class DecodeCost:
    """One decode step (B tokens, one per sequence) on a kernel's region, in cycles by phase,
    with what the busiest PE reads and the kernel's work, for the bound and the roofline."""

    compute: int = 0  # multiply-adds and vector ops on the busiest PE (weights read once each)
    cache: int = 0  # attention: scoring the cached keys and values
    reduction: int = 0  # partial sums and statistics combined across the region
    broadcast: int = 0  # inputs multicast across the region, results to its out edge
    bytes_read: int = 0  # weights and cache the busiest PE reads per step
    flops: int = 0  # the kernel's work per step (vector ops count as flops)

    @property
    def latency(self) -> int:
        return self.compute + self.cache + self.reduction + self.broadcast

    @property
    def bound(self) -> str:
        """The phase that takes longest."""
        return max(COMPONENTS, key=lambda c: getattr(self, c))

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "latency": self.latency, "bound": self.bound}


DecodeFn = Callable[..., DecodeCost]
"""(params, h, w, ctx: CostContext, sequences: int) -> DecodeCost: one step of `sequences`
tokens on an h x w region (`KindDef.decode`)."""


def relay(ctx: Any) -> int:
    """Cycles one PE of a reduction chain adds (module doc)."""
    link = ctx.target.link
    return 2 * link.ramp_latency_cycles + link.hop_latency_cycles


def multicast(ctx: Any, n: int, nbytes: int) -> int:
    """A vector of `nbytes` multicast along n PEs (module doc)."""
    return (n - 1) * ctx.target.link.hop_latency_cycles + cdiv(nbytes, ctx.L)


def chain(ctx: Any, n: int, nbytes: int) -> int:
    """A vector of `nbytes` reduced through n PEs (module doc); nothing when n is 1."""
    return (n - 1) * relay(ctx) + cdiv(nbytes, ctx.L) if n > 1 else 0


def sram_read_bytes_per_cycle(ctx: Any) -> int:
    """R: the PE's SRAM read bytes per cycle (module doc)."""
    m = ctx.target.memory
    return m.reads_per_cycle * m.width_bits // 8


def matvec(ctx: Any, macs: int, weight_bytes: int) -> int:
    """Multiply-adds at the FMAC rate or the weights through the read ports (module doc)."""
    return max(cdiv(2 * macs, ctx.f), cdiv(weight_bytes, sram_read_bytes_per_cycle(ctx)))
