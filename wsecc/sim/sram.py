"""The SRAM map: bytes on every PE of the program rectangle (weights, buffers, K/V, reserve).

Each kernel's cost model reports its region's *fullest* PE (`SramBreakdown`); the map spreads
that over the region the way the mapping tiles it. A kind's mapping splits one param over the
region's rows and one over its columns (its definition's `tile_split`, `wsecc.kernels.kinds`,
from which sizing's candidate shapes also come), the way the functional simulator tiles it: an
extent X over r PEs in contiguous blocks of cdiv(X, r), the last ones short (none at all when X
is small: those PEs hold only the reserve, the code every PE of a region loads); attention's keys
are dealt in turn, X mod r rows getting one more. A PE's bytes are the cost model evaluated with the split params narrowed to its share
(X' = share x r, so cdiv(X', r) = share), so the fullest PE is exactly the cost model's figure.
Params not split (None) leave every PE of that axis at the fullest figure: the row-wise kinds
deal whole chunks to rows, so their SRAM does not depend on the row; attention's columns hold
heads or query groups of equal size; generic spreads everything evenly.

`sram_map` checks, and raises SramError naming the kernels if not: every PE within
target.sram.bytes_per_pe, and each kernel's fullest PE equal to the sizing's figure (at an
alternative shape the placer took, equal to the cost model's figure at that shape, which is
what sizing checked when it offered the shape).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from wsecc.core.program import Program
from wsecc.errors import SimulationError
from wsecc.kernels import Kernel, SramBreakdown, kernel_cost
from wsecc.targets import Target
from wsecc.vocab import Precision

COMPONENTS: tuple[str, ...] = ("weights", "buffers", "kv", "reserve")

HISTOGRAM_BIN_BYTES = 1024  # 1 KiB bins: the reserve and buffers are KiB-sized


class SramError(SimulationError):
    """A PE over its SRAM, or the map disagreeing with sizing; names the kernels."""


def _shares(extent: int, parts: int, cyclic: bool = False) -> np.ndarray:
    """Items per part, as the functional simulator tiles them: contiguous blocks of
    cdiv(extent, parts), the last ones short or empty (a weight matrix's K over the rows, N over
    the columns; features over the columns); or, `cyclic`, dealt in turn (attention's keys,
    key j on row j mod h), so the first extent mod parts get one more."""
    if cyclic:
        q, r = divmod(extent, parts)
        return np.array([q + 1] * r + [q] * (parts - r), dtype=np.int64)
    q = -(-extent // parts)
    return np.clip(extent - q * np.arange(parts, dtype=np.int64), 0, q)


@dataclass(frozen=True, eq=False)
class SramMap:
    """Bytes per PE of the program rectangle, by component (uint32 arrays, H x W, row y = north
    to south, column x = west to east), and which kernel owns each PE (`owner`, -1: unused)."""

    target: str
    precision: Precision
    sram_bytes_per_pe: int
    weights: np.ndarray
    buffers: np.ndarray
    kv: np.ndarray
    reserve: np.ndarray
    owner: np.ndarray  # int32 index into `kernels`
    kernels: tuple[str, ...]
    kernel_max: Mapping[str, int] = field(default_factory=dict)  # fullest PE per kernel

    @property
    def total(self) -> np.ndarray:
        return self.weights + self.buffers + self.kv + self.reserve

    @property
    def used(self) -> np.ndarray:
        return self.owner >= 0

    @property
    def pes_used(self) -> int:
        return int(self.used.sum())

    @property
    def max_bytes(self) -> int:
        return int(self.total.max(initial=0))

    @property
    def mean_used_bytes(self) -> float:
        """Mean over the PEs of some kernel's region."""
        return float(self.total[self.used].mean()) if self.pes_used else 0.0

    @property
    def mean_fabric_bytes(self) -> float:
        """Mean over every PE of the program rectangle (unused PEs count as 0)."""
        return float(self.total.mean())

    def histogram(self, bin_bytes: int = HISTOGRAM_BIN_BYTES) -> tuple[np.ndarray, np.ndarray]:
        """(counts, bin edges) of bytes per PE over the used PEs, bins of `bin_bytes` from 0 to
        the target's SRAM per PE; the counts sum to `pes_used`."""
        edges = np.arange(0, self.sram_bytes_per_pe + bin_bytes, bin_bytes)
        counts, _ = np.histogram(self.total[self.used], bins=edges)
        return counts, edges

    def at(self, x: int, y: int) -> dict[str, Any]:
        """One PE: its kernel and bytes by component."""
        k = int(self.owner[y, x])
        return {
            "kernel": self.kernels[k] if k >= 0 else None,
            **{c: int(getattr(self, c)[y, x]) for c in COMPONENTS},
        }

    def to_json(self) -> dict[str, Any]:
        """The figures (not the grids)."""
        counts, edges = self.histogram()
        return {
            "target": self.target,
            "precision": self.precision,
            "width": int(self.owner.shape[1]),
            "height": int(self.owner.shape[0]),
            "pes_used": self.pes_used,
            "max_bytes": self.max_bytes,
            "mean_used_bytes": self.mean_used_bytes,
            "mean_fabric_bytes": self.mean_fabric_bytes,
            "sram_bytes_per_pe": self.sram_bytes_per_pe,
            "histogram": {"bin_bytes": int(edges[1] - edges[0]), "counts": counts.tolist()},
            "kernel_max": dict(self.kernel_max),
        }

    def summary(self) -> str:
        return (
            f"SRAM on {self.target} ({self.precision}): max {self.max_bytes:,} of "
            f"{self.sram_bytes_per_pe:,} B/PE, mean {self.mean_used_bytes:,.0f} B over "
            f"{self.pes_used:,} used PEs, {self.mean_fabric_bytes:,.0f} B over the fabric"
        )


def _pe_breakdowns(
    kernel: Kernel,
    h: int,
    w: int,
    precision: Precision,
    target: Target,
    chunk_tokens: int,
    single_buffered: bool = False,
) -> tuple[dict[tuple[int, int], SramBreakdown], np.ndarray, np.ndarray]:
    """({(row share, col share): bytes}, row shares, col shares) of a kernel on h x w."""
    row_param, col_param = kernel.spec.tile_split
    rows = (
        _shares(kernel.params[row_param], h, kernel.spec.cyclic_rows)
        if row_param
        else np.ones(h, np.int64)
    )
    cols = _shares(kernel.params[col_param], w) if col_param else np.ones(w, np.int64)
    full = (int(rows.max()), int(cols.max()))
    out: dict[tuple[int, int], SramBreakdown] = {}
    for r in sorted(set(rows.tolist())):
        for c in sorted(set(cols.tolist())):
            if r == 0 or c == 0:
                out[(r, c)] = SramBreakdown(0, 0, 0, target.sram.reserved_bytes)
                continue
            params = dict(kernel.params)
            for param, share, fullest, parts in (
                (row_param, r, full[0], h),
                (col_param, c, full[1], w),
            ):
                if param and share != fullest:
                    params[param] = share * parts
            k = Kernel(kernel.name, kernel.kind, params, kernel.provenance)
            out[(r, c)] = kernel_cost(
                k, h, w, precision, target, chunk_tokens=chunk_tokens,
                single_buffered=single_buffered,
            ).sram  # fmt: skip
    return out, rows, cols


def sram_map(program: Program, *, extra_buffers: Mapping[str, int] | None = None) -> SramMap:
    """The per-PE map (module doc), checked against the target and the sizing.

    `extra_buffers`: kernel name -> bytes more on each PE of its region, buffers the cost models
    do not budget (L1's skew buffers: `wsecc.sim.events.buffer_bytes_per_pe`); they count
    against the target's SRAM like the rest, so a buffer that does not fit fails the map."""
    kg, sizing, placement, target = program.kg, program.sizing, program.placement, program.target
    precision = program.precision
    extra = dict(extra_buffers or {})
    H, W = target.fabric.program_height, target.fabric.program_width
    grids = {c: np.zeros((H, W), np.uint32) for c in COMPONENTS}
    owner = np.full((H, W), -1, np.int32)
    names = tuple(k.name for k in kg.kernels)
    kernel_max: dict[str, int] = {}
    mismatched = []
    for i, k in enumerate(kg.kernels):
        rect = placement.rects.get(k.name)
        if rect is None:
            raise SramError(f"kernel {k.name!r} has no rectangle in the placement")
        ks = sizing.kernel(k.name)
        per_pe, rows, cols = _pe_breakdowns(
            k, rect.h, rect.w, precision, target, sizing.chunk_tokens, sizing.single_buffered
        )
        for (r, c), b in per_pe.items():
            ys = rect.y + np.flatnonzero(rows == r)
            xs = rect.x + np.flatnonzero(cols == c)
            for comp in COMPONENTS:
                grids[comp][np.ix_(ys, xs)] = getattr(b, comp)
        owner[rect.y : rect.y + rect.h, rect.x : rect.x + rect.w] = i
        fullest = max(b.total for b in per_pe.values())
        kernel_max[k.name] = fullest + extra.get(k.name, 0)
        grids["buffers"][rect.y : rect.y + rect.h, rect.x : rect.x + rect.w] += extra.get(k.name, 0)
        if (rect.h, rect.w) == (ks.h, ks.w):
            expected, source = ks.sram.total, "sizing"
        else:  # another shape from sizing's alternatives
            cost = kernel_cost(
                k, rect.h, rect.w, precision, target, chunk_tokens=sizing.chunk_tokens,
                single_buffered=sizing.single_buffered,
            )  # fmt: skip
            expected, source = (
                cost.sram.total,
                f"the cost model at the placed {rect.h}x{rect.w} in {precision}",
            )
        if fullest != expected:
            mismatched.append(f"{k.name!r}: map {fullest:,} B, {source} {expected:,} B")
    if mismatched:
        raise SramError(
            f"SRAM map disagrees with the sizing on {len(mismatched)} kernels: "
            + "; ".join(mismatched[:4])
        )
    m = SramMap(
        target=target.name,
        precision=precision,
        sram_bytes_per_pe=target.sram.bytes_per_pe,
        owner=owner,
        kernels=names,
        kernel_max=MappingProxyType(kernel_max),
        **grids,
    )
    total = m.total
    over = total > target.sram.bytes_per_pe
    if over.any():
        worst: dict[str, tuple[int, int, int]] = {}
        for y, x in zip(*np.nonzero(over), strict=True):
            name = names[owner[y, x]] if owner[y, x] >= 0 else "(no kernel)"
            if name not in worst or total[y, x] > worst[name][2]:
                worst[name] = (int(x), int(y), int(total[y, x]))
        skew = [n for n in worst if extra.get(n)]
        raise SramError(
            f"{int(over.sum()):,} PEs exceed {target.sram.bytes_per_pe:,} B: "
            + "; ".join(f"{n!r} at ({x}, {y}) {b:,} B" for n, (x, y, b) in list(worst.items())[:4])
            + (
                f" (with L1's skew buffers: {', '.join(f'{n!r} {extra[n]:,} B/PE' for n in skew[:4])};"
                " fewer --chunk-tokens or a bigger target)"
                if skew
                else ""
            )
        )
    return m
