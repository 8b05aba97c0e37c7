"""The graph-level verifier: raises `VerificationError` quoting the offending IR."""

from __future__ import annotations

from wsecc.ir.core import FUSED_OPS, Graph, IRError, Node, Value
from wsecc.ir.printer import format_node
from wsecc.ir.rules import RULES, infer_types


class VerificationError(IRError):
    """The message quotes the offending node's IR on a second line; `reason` is the first line
    and `node` the node (None for graph-level faults)."""

    def __init__(self, reason: str, node: Node | None = None, where: str = "") -> None:
        super().__init__(reason + where)
        self.reason = reason
        self.node = node


def _fail(node: Node | None, msg: str) -> VerificationError:
    where = f"\n  at: {format_node(node)}" if node is not None else ""
    return VerificationError(msg, node, where)


def verify(graph: Graph, *, allow_unfused: bool = True) -> None:
    """Check SSA, topological order, unique names, and every node's types against its rule.

    With `allow_unfused=False` (the level after fusion, before lowering) it also checks that no
    Softmax/Erf/Tanh/Pow/ReduceMean/Sqrt remains outside a fused op.
    """
    defined: set[Value] = set()
    names: dict[str, Value] = {}

    def define(v: Value, node: Node | None) -> None:
        if v in defined:
            raise _fail(node, f"value %{v.name} is defined twice")
        other = names.get(v.name)
        if other is not None and other is not v:
            raise _fail(node, f"two different values are named %{v.name}")
        names[v.name] = v
        defined.add(v)

    for v in graph.inputs:
        if v.is_const:
            raise _fail(None, f"graph input %{v.name} must not be a constant")
        define(v, None)
    for n in graph.nodes:
        rule = RULES.get(n.op)
        if rule is None:
            raise _fail(n, f"op {n.op.name} has no rule")
        for v in n.inputs:
            if v.is_const:
                if v not in defined:
                    define(v, n)
            elif v not in defined:
                raise _fail(n, f"operand %{v.name} is used before it is defined")
        for v in n.outputs:
            if v.is_const:
                raise _fail(n, f"output %{v.name} is a constant")
            define(v, n)
        try:
            expected = infer_types(n.op, [v.type for v in n.inputs], n.attr_dict)
        except (IRError, KeyError, TypeError, ValueError) as e:
            raise _fail(n, f"{n.op.name}: {e}") from None
        got = [v.type for v in n.outputs]
        if expected != got:
            raise _fail(
                n,
                f"{n.op.name} output types {[str(t) for t in got]} "
                f"differ from inferred {[str(t) for t in expected]}",
            )
        if not allow_unfused and n.op in UNFUSED_MATH:
            raise _fail(n, f"{n.op.name} is left outside a fused op")
    for v in graph.outputs:
        if v not in defined and not v.is_const:
            raise _fail(None, f"graph output %{v.name} is never defined")


# Ops that must have been absorbed into a fused op (Attention, LayerNorm, GELU) by fusion.
UNFUSED_MATH = frozenset(
    {
        op
        for op in RULES
        if op.name in {"SOFTMAX", "ERF", "TANH", "POW", "REDUCE_MEAN", "SQRT"}
        and op not in FUSED_OPS
    }
)
