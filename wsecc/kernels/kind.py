"""What defines a kernel kind: `KindDef`, the one record per kind.

Every fact about a kind lives in its `KindDef`, written once in `wsecc.kernels.kinds.<family>`:

    params        the typed parameters (name -> check tag of `PARAM_CHECKS`), and `check` for
                  constraints between them; `defaults` for params a kernel may leave out (added
                  later than the kind: kernels saved before them still load)
    flops         work per sample (vector ops count as flops): sizing's ceiling, utilization and
                  the report's FLOPs all read this one formula
    weight_elems  resident weight elements
    in_edge, out_edge   the region edges its activations enter and leave by (`wsecc.kernels.ir`)
    cost          SRAM per PE and cycles per sample on an h x w region (`wsecc.kernels.costs`)
    shapes / frontier   sizing's menu: candidate row and column counts, or a frontier of shapes
                  per stage time (the contest's convolutions)
    tile_split    the param its mapping splits over region rows and over columns, in contiguous
                  blocks as the functional simulator tiles them (or dealt in turn over the rows:
                  `cyclic_rows`): the SRAM map spreads the kernel over the region by it, and,
                  when `shapes` is not given, sizing's candidates are its breakpoints, so map,
                  simulator and sizing agree by construction
    lowers, lower which fused ops become this kind, and their params (`wsecc.passes.lower`)
    grad          its gradient rule for training (`GradRule`): the backward pass's work and the
                  activations its forward keeps for it (`wsecc.modes.train`); None: not trainable
    tokens        the param that counts a sample's tokens ("" when none): generation re-costs a
                  kernel at the prompt's length (prefill) this way (`with_tokens`)
    decode        its decode-step model (`wsecc.kernels.decode`): one token per sequence on the
                  same mapping, in cycles by phase; None: it cannot run in generate mode

A new kind is one new `KindDef` added to `KINDS` (`wsecc.kernels.kinds`); a new fact about every
kind (a gradient rule, a cache) is one new field here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from wsecc.kernels.conv import cdiv

if TYPE_CHECKING:
    from wsecc.ir.core import Node, Op
    from wsecc.kernels.costs import CostFn, FrontierFn
    from wsecc.kernels.decode import DecodeFn
    from wsecc.kernels.ir import KernelKind

Params = Mapping[str, Any]  # values are Scalars, checked per kind by the verifier

ShapesFn = Callable[[Params, int, int], tuple[list[int], list[int]]]

_DENSE_BELOW = 64
_THIN_RATIO = 1.03


def breakpoints(extent: int, cap: int) -> list[int]:
    """Region sizes worth trying for a dimension of `extent` split over up to `cap` PEs.

    Only v with v == cdiv(extent, cdiv(extent, v)) matter: any other v gives the same tile size
    cdiv(extent, v) as a smaller one. Above 64 the list is thinned to one value per 3% step.
    """
    out: list[int] = []
    for v in range(1, min(extent, cap) + 1):
        if v != cdiv(extent, cdiv(extent, v)):
            continue
        if v <= _DENSE_BELOW or v >= out[-1] * _THIN_RATIO:
            out.append(v)
    return out


def split_shapes(rows_param: str, cols_param: str) -> ShapesFn:
    """Candidates for a mapping that splits param `rows_param` over rows, `cols_param` over
    columns."""

    def shapes(p: Params, hmax: int, wmax: int) -> tuple[list[int], list[int]]:
        return breakpoints(p[rows_param], hmax), breakpoints(p[cols_param], wmax)

    return shapes


PARAM_CHECKS: Mapping[str, tuple[Callable[[Any], bool], str]] = MappingProxyType(
    {
        "int+": (lambda v: type(v) is int and v > 0, "a positive int"),
        "int0": (lambda v: type(v) is int and v >= 0, "an int >= 0"),
        "bool": (lambda v: type(v) is bool, "a bool"),
        "str": (lambda v: type(v) is str, "a str"),
    }
)
"""Check tags for `KindDef.params`: a predicate and the words an error uses."""


def no_check(p: Params) -> str:
    return ""


def no_defaults(p: Params) -> Params:
    return {}


def one_of(param: str, table: Mapping[str, int]) -> Callable[[Params], str]:
    """A `KindDef.check`: `param` must be a key of `table`."""

    def check(p: Params) -> str:
        if p[param] in table:
            return ""
        return f"{param} {p[param]!r} is not one of {', '.join(repr(k) for k in table)}"

    return check


# --- per-element operation counts shared by several kinds ----------------------------------------
# Vector ops per element, the unit the cost models charge at `vector_ops_per_cycle`. Add, mul,
# max and moves are 1. No transcendental or divide appears in the WSE-2 SIMD table
# (docs/hardware.md §3.1), so TRANSCENDENTAL_OPS is our estimate: range reduction (2) + a degree-5
# polynomial in Horner form (5) + scaling (1) = 8.

TRANSCENDENTAL_OPS = 8

LoweringFn = Callable[["Node", int], "dict[str, object] | None"]
"""A fused node and the batch size -> the kernel's params, or None when the node is not this
kind after all (an elementwise op on a scalar is generic)."""


@dataclass(frozen=True)
class GradRule:
    """What a kind adds to a training step (`wsecc.modes.train`), per sample.

    `flops`: the backward pass's work (vector ops count as flops, as in `KindDef.flops`): the
    gradient of its inputs and of its weights. `saved_elems`: activation elements its forward
    keeps for the backward pass, stored in the precision's storage type. The tensor-level
    gradient of each fused op, which these count, is its `vjp` in `wsecc.ir.rules`."""

    flops: Callable[[Params], int]
    saved_elems: Callable[[Params], int]


@dataclass(frozen=True)
class KindDef:
    """One kernel kind, every fact about it (module doc)."""

    kind: KernelKind
    params: Mapping[str, str]
    flops: Callable[[Params], int]
    weight_elems: Callable[[Params], int]
    in_edge: str
    out_edge: str
    cost: CostFn
    tile_split: tuple[str | None, str | None]
    cyclic_rows: bool = False  # rows take the row param in turn (item i on row i mod h)
    chunks_over_rows: bool = False  # whole token chunks are dealt to region rows in turn
    shapes: ShapesFn | None = None
    frontier: FrontierFn | None = None
    check: Callable[[Params], str] = no_check
    defaults: Callable[[Params], Params] = no_defaults
    lowers: frozenset[Op] = frozenset()
    lower: LoweringFn | None = None
    grad: GradRule | None = None
    tokens: str = ""
    decode: DecodeFn | None = None

    def __post_init__(self) -> None:
        if self.shapes is None and self.frontier is None:
            rows, cols = self.tile_split
            if rows is None or cols is None:
                raise ValueError(f"kind {self.kind}: give shapes when tile_split is not full")
            object.__setattr__(self, "shapes", split_shapes(rows, cols))

    def with_tokens(self, p: Params, tokens: int) -> Params:
        """`p` at `tokens` tokens per sample (its `tokens` param; unchanged without one)."""
        return {**p, self.tokens: tokens} if self.tokens else p
