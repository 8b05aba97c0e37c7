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
    tree(n, g, bytes)   = (g - 1) relay                     groups of g PEs chain-reduce in
                        + (G - 1) (2 ramp + g hop)          parallel to their last PE, then the
                        + 2 cdiv(bytes, L)                  G = cdiv(n, g) group leaders chain,
                                                            g hops apart; each leader takes two
                                                            streams in through its one ramp
    reduce(n, bytes)    = the faster of the chain and the best two-level tree (`reduce`)
    matvec(macs, wb)    = max(cdiv(2 macs, f), cdiv(wb, R)) multiply-adds at the FMAC rate, or
                                                            the weight bytes through the read
                                                            ports, whichever is slower

A reduction is mapped as a compiler would choose (`reduce`): a chain (the naive mapping, the
Cerebras SDK's checkerboard GEMV) or a two-level tree, the K = 2 case of WaferLLM's MeshGEMV
K-tree allreduce (OSDI'25 §6; its code, `Decode/WSE-2/src/comm_lib/comm_pe.csl`
`two_tree_allreduce_add_*`: groups of P / group_num PEs reduce to a group root, the roots reduce
over the longer hops, the routers between them only forwarding). The tree cuts the relays from
n - 1 to about 2 sqrt(n); the hops stay about n at 1 cycle each, as Rocki20's AllReduce "in a
cycle count only about 10% greater than the diameter" (wafer-facts "Collective latency"). What
it costs beyond the chain: a second stream into each leader (its ramp ejects one wavelet a cycle,
wafer-facts §8, so the vector's streaming is paid twice), the longer hops between leaders, and
two more colors (`TREE_COLORS`).

A kernel's step latency is the sum of its phases, `DecodeCost.latency`: inputs multicast
(broadcast), local multiply-adds (compute) or scoring of the cached keys (cache), partials
reduced (reduction), results to the region's out edge (in broadcast). For one token the vectors
are short, so the phases barely overlap; summing them overstates the latency by at most the
shorter phases' streaming time, a few cycles per phase at decode's vector lengths.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

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


TREE_COLORS = 4
"""Colors a two-level tree takes: a chain's two within the groups (alternating PE by PE, for a
PE cannot send and receive on one color with a fixed routing: docs/hardware.md §5.3,
csl-examples tutorials/gemv-08-routes-3) and two more between the leaders, whose routes pass
the other PEs' routers (WaferLLM `Decode/WSE-2/src/layout.csl`: C_Y_up_reduce_0/1 beside the
first phase's pair, one pair a direction). The chain's two fit any budget; a target whose
budget is short of these four keeps the chain (`reductions`)."""


@dataclass(frozen=True)
class Reduction:
    """A reduction of a vector over n PEs in a line as mapped: `mapping` "chain" or "tree",
    `groups` G (1 for the chain) of `group_size` g PEs, its latency in `cycles`, and `ends`,
    the PEs a reduce-scatter leaves the sums on (the chain's n, the tree's G leaders: the last
    level's chain scatters over its PEs)."""

    mapping: Literal["chain", "tree"]
    groups: int
    group_size: int
    cycles: int

    @property
    def ends(self) -> int:
        return self.groups if self.mapping == "tree" else self.group_size


@functools.lru_cache(maxsize=4096)
def _best_group(n: int, hop: int, ramp: int) -> tuple[int, int]:
    """The group size g of the fastest two-level tree over n PEs (n >= 3), and its cycles
    without the streaming: (g - 1) relay + (G - 1) (2 ramp + g hop), G = cdiv(n, g) >= 2. The
    streaming (2 cdiv(bytes, L)) does not depend on g, so neither does the choice."""
    relay_ = 2 * ramp + hop
    cycles, g = min(
        ((g - 1) * relay_ + (cdiv(n, g) - 1) * (2 * ramp + g * hop), g) for g in range(2, n)
    )
    return g, cycles


def reductions(ctx: Any, n: int, nbytes: int) -> tuple[Reduction, ...]:
    """The mappings a compiler can choose for reducing `nbytes` over n PEs in a line, chain
    first: the chain, and the fastest two-level tree where n >= 3 (two groups at least) and
    the target's color budget holds its `TREE_COLORS` (module doc)."""
    link = ctx.target.link
    s = cdiv(nbytes, ctx.L)
    out = [Reduction("chain", 1, n, chain(ctx, n, nbytes))]
    if n >= 3 and ctx.target.color_budget >= TREE_COLORS:
        g, cycles = _best_group(n, link.hop_latency_cycles, link.ramp_latency_cycles)
        out.append(Reduction("tree", cdiv(n, g), g, cycles + 2 * s))
    return tuple(out)


def reduce(ctx: Any, n: int, nbytes: int) -> Reduction:
    """The fastest mapping of a reduction of `nbytes` over n PEs (`reductions`), the chain on
    a tie (fewer colors). The chain wins on short lines or long vectors (the tree pays the
    streaming twice), the tree on tall regions: on 900 PEs of wse3, 4,495 cycles of relays
    become 1,131."""
    return min(reductions(ctx, n, nbytes), key=lambda r: r.cycles)


def sram_read_bytes_per_cycle(ctx: Any) -> int:
    """R: the PE's SRAM read bytes per cycle (module doc)."""
    m = ctx.target.memory
    return m.reads_per_cycle * m.width_bits // 8


def matvec(ctx: Any, macs: int, weight_bytes: int) -> int:
    """Multiply-adds at the FMAC rate or the weights through the read ports (module doc)."""
    return max(cdiv(2 * macs, ctx.f), cdiv(weight_bytes, sram_read_bytes_per_cycle(ctx)))
