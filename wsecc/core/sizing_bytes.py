"""Where a program's SRAM goes at its kernels' smallest shapes: the bytes that decide how many
systems a model needs (`wsecc.core.partition`).

Every kernel's smallest fitting region (sizing's menu, `wsecc.kernels.sizing.smallest_costs`)
takes `area x sram.bytes_per_pe` bytes of SRAM. The cost model reports its fullest PE, so those
bytes split exactly into

    resident  the weights and K/V cache the kernel really holds (`partition.resident_bytes`)
    reserve   area x R, the per-PE code and runtime reserve (the target's `sram.reserved_bytes`)
    buffers   area x the fullest PE's buffers (chunks in flight, partial sums, statistics)
    tables    area x the fullest PE's weights, for a kind with no weight elements: constants
              folded into the kernel and kept per PE (attention's rotary cos and sin rows of
              its cached keys, a bias operand), counted once per copy
    rounding  area x the fullest PE's weights and K/V, less what the kernel really holds: tiles
              that do not divide their dimension (cdiv), so the fullest PE holds more than the
              mean, and the menu's shapes being thinned to ~3% steps above 64
              (`wsecc.kernels.kind.breakpoints`)
    unused    area x the bytes the fullest PE leaves free (no shape of the menu fills it exactly)

so that `resident + reserve + buffers + tables + rounding + unused = area x bytes_per_pe`, per
kind and in total. Against N systems' `N x usable_pes x bytes_per_pe` this says which bytes a
count lacks (`SramBytes.line`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from wsecc.core.flow import FILL_STEPS
from wsecc.kernels import KernelGraph
from wsecc.kernels.costs import KernelCost
from wsecc.kernels.sizing import KernelSizing
from wsecc.targets import Target
from wsecc.vocab import Precision

PARTS = ("resident", "reserve", "buffers", "tables", "rounding", "unused")
"""The parts a region's SRAM splits into (module doc), in the order the line names them."""


@dataclass(frozen=True)
class KindBytes:
    """One kind's kernels at their smallest shapes: PEs, and their SRAM split into `PARTS`."""

    kind: str
    kernels: int
    pes: int
    resident: int
    reserve: int
    buffers: int
    tables: int
    rounding: int
    unused: int

    @property
    def total(self) -> int:
        return sum(getattr(self, p) for p in PARTS)


@dataclass(frozen=True)
class SramBytes:
    """A kernel graph's SRAM at its kernels' smallest shapes, by kind (`sram_bytes`)."""

    kinds: tuple[KindBytes, ...]  # the largest total first
    bytes_per_pe: int
    usable_pes: int
    chunk_tokens: int
    single_buffered: bool = False

    @property
    def pes(self) -> int:
        return sum(k.pes for k in self.kinds)

    def part(self, name: str) -> int:
        """The bytes of one of `PARTS`, over every kind."""
        return sum(getattr(k, name) for k in self.kinds)

    @property
    def total(self) -> int:
        """What the regions take: their PEs times a PE's SRAM."""
        return self.pes * self.bytes_per_pe

    def capacity(self, systems: int) -> int:
        """The SRAM of `systems` systems' usable PEs."""
        return systems * self.usable_pes * self.bytes_per_pe

    def line(self, systems: int, fill: float = FILL_STEPS[0]) -> str:
        """`systems` systems' SRAM against these bytes, every part named (buffers and rounding by
        kind), in one clause; what is short or to spare at 100% and at `fill` of their PEs."""
        cap, need = self.capacity(systems), self.total
        buffers, tables, rounding = (self._by_kind(p) for p in ("buffers", "tables", "rounding"))
        at = fill * cap
        if need > cap:
            verdict = f"short by {_gb(need - cap)} even at 100% fill"
        elif need > at:
            verdict = (
                f"{_gb(cap - need)} to spare only at 100% fill: short by {_gb(need - at)} at "
                f"{fill:.0%}"
            )
        else:
            verdict = f"{_gb(at - need)} to spare at {fill:.0%} fill"
        return (
            f"{systems} systems' {systems} x {self.usable_pes:,} PEs x {self.bytes_per_pe:,} B = "
            f"{_gb(cap)} of SRAM against the {_gb(need)} the kernels' smallest shapes take at "
            f"{self.chunk_tokens} token(s) per chunk"
            + (", single-buffered" if self.single_buffered else "")
            + f" ({self.pes:,} PEs, "
            f"{self.pes / (systems * self.usable_pes):.1%} of their PEs): "
            f"{_gb(self.part('resident'))} weights and K/V cache, "
            f"{_gb(self.part('reserve'))} per-PE reserve, "
            f"{_gb(self.part('buffers'))} buffers ({buffers}), "
            f"{_gb(self.part('tables'))} tables held per PE ({tables}), "
            f"{_gb(self.part('rounding'))} tile rounding ({rounding}), "
            f"{_gb(self.part('unused'))} free on the fullest PEs; {verdict}"
        )

    def _by_kind(self, part: str) -> str:
        """The kinds holding `part`'s bytes, the most first."""
        held = sorted(((getattr(k, part), k.kind) for k in self.kinds), reverse=True)
        return ", ".join(f"{kind} {_gb(n)}" for n, kind in held if n) or "none"


def sram_bytes(
    kg: KernelGraph,
    regions: Sequence[KernelCost | KernelSizing],
    resident: Sequence[int],
    target: Target,
    precision: Precision,
    chunk_tokens: int,
    single_buffered: bool = False,
) -> SramBytes:
    """`kg`'s kernels on `regions` (one shape and its fullest PE's SRAM per kernel, in order:
    their smallest shapes, `smallest_costs`, or a sizing's), their SRAM split into `PARTS` by
    kind; `resident`: each kernel's weights and K/V cache in bytes."""
    per_pe = target.sram.bytes_per_pe
    acc: dict[str, list[int]] = {}
    for k, c, held in zip(kg.kernels, regions, resident, strict=True):
        s, area = c.sram, c.h * c.w
        tables = area * s.weights if k.weight_bytes(precision) == 0 else 0
        row = acc.setdefault(k.kind.value, [0] * 8)
        for i, v in enumerate(
            (
                1,
                area,
                held,
                area * s.reserve,
                area * s.buffers,
                tables,
                area * (s.weights + s.kv) - tables - held,
                area * (per_pe - s.total),
            )
        ):
            row[i] += v
    kinds = tuple(
        sorted(
            (KindBytes(kind, *row) for kind, row in acc.items()),
            key=lambda k: (-k.total, k.kind),
        )
    )
    return SramBytes(kinds, per_pe, target.usable_pes, chunk_tokens, single_buffered)


def bytes_text(n: float, fine: bool = False) -> str:
    """Bytes as a reader takes them in: GB from 1 GB, MB from 1 MB, else B. `fine`, for the
    parts and margins of a wafer's SRAM (`SramBytes.line`), where tenths of a GB matter: GB
    from 0.1 GB, with two decimals below 10 GB, and MB from 0.1 MB."""
    least = 0.1 if fine else 1.0
    if abs(n) >= least * 1e9:
        return f"{n / 1e9:,.{2 if fine and abs(n) < 1e10 else 1}f} GB"
    return f"{n / 1e6:,.1f} MB" if abs(n) >= least * 1e6 else f"{n:,.0f} B"


_gb = partial(bytes_text, fine=True)


__all__ = ["PARTS", "KindBytes", "SramBytes", "bytes_text", "sram_bytes"]
