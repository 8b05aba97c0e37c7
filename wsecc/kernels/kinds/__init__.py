"""Every kernel kind, each defined once (`wsecc.kernels.kind.KindDef`).

    matmul.py     linear, gated_linear, lm_head
    attention.py  attention
    rowwise.py    layernorm, rmsnorm, softmax, elementwise
    embedding.py  embedding
    moe.py        moe (a mixture-of-experts block)
    generic.py    generic (lowering's fallback)
    contest.py    conv, dblock, cblock (the ISPD 2020 contest)

`KINDS` maps every `KernelKind` to its definition (registered in `wsecc.kernels.registry`,
where the IR and the cost machinery look kinds up; a kind without one fails at import);
`lower_node` gives the kind and params a fused node becomes.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from wsecc.ir.core import Node, Op
from wsecc.kernels.ir import KernelKind
from wsecc.kernels.kind import KindDef
from wsecc.kernels.kinds.attention import ATTENTION
from wsecc.kernels.kinds.contest import CBLOCK, CONV, DBLOCK
from wsecc.kernels.kinds.embedding import EMBEDDING
from wsecc.kernels.kinds.generic import GENERIC, lower_generic
from wsecc.kernels.kinds.matmul import GATED_LINEAR, LINEAR, LM_HEAD
from wsecc.kernels.kinds.moe import MOE
from wsecc.kernels.kinds.rowwise import ELEMENTWISE, LAYERNORM, RMSNORM, SOFTMAX
from wsecc.kernels.registry import KINDS, register

register(
    (
        LINEAR,
        GATED_LINEAR,
        LM_HEAD,
        MOE,
        ATTENTION,
        LAYERNORM,
        RMSNORM,
        SOFTMAX,
        ELEMENTWISE,
        EMBEDDING,
        GENERIC,
        CONV,
        DBLOCK,
        CBLOCK,
    )
)
if set(KINDS) != set(KernelKind):
    raise ImportError(f"kinds without a definition: {sorted(set(KernelKind) - set(KINDS))}")

_BY_OP: Mapping[Op, KindDef] = MappingProxyType({op: d for d in KINDS.values() for op in d.lowers})


def lower_node(n: Node, batch: int) -> tuple[KernelKind, dict[str, object]]:
    """The kernel kind and params a fused node becomes: the kind that lowers its op, else
    generic (also when that kind declines the node)."""
    d = _BY_OP.get(n.op)
    params = d.lower(n, batch) if d is not None and d.lower is not None else None
    if d is None or params is None:
        return KernelKind.GENERIC, lower_generic(n, batch)
    return d.kind, params


__all__ = ["KINDS", "KindDef", "lower_node"]
