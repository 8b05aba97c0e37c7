"""Rewrite machinery shared by the passes.

`GraphView` answers def-use questions about one graph; `apply` builds the rewritten graph from
a list of replacements (new nodes + a value substitution), removes dead nodes and restores a
topological order. `NoMatch` carries the reason a pattern's check failed, so a pass can say
why a rule did not fire. `eval_nodes` runs a handful of nodes on probe arrays — the passes use
it to match *semantics* (a GELU computes gelu, a layout chain splits heads) instead of one
exporter's node order.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from wsecc.ir.core import Graph, Node, Op, Value, make_attrs
from wsecc.ir.rules import evaluate_op, infer_types


class NoMatch(Exception):
    """A pattern's check failed; the message says why."""


@dataclass
class Replacement:
    new_nodes: list[Node]
    mapping: dict[Value, Value]


ELEMENTWISE = frozenset(
    {
        Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW, Op.MAX, Op.MIN, Op.NEG, Op.ABS, Op.SQRT,
        Op.RECIPROCAL, Op.EXP, Op.LOG, Op.ERF, Op.TANH, Op.SIGMOID, Op.RELU, Op.CAST,
    }
)  # fmt: skip
POINTWISE = ELEMENTWISE | {
    Op.AND, Op.OR, Op.XOR, Op.NOT, Op.EQUAL, Op.LESS, Op.LESS_EQUAL, Op.GREATER,
    Op.GREATER_EQUAL, Op.WHERE, Op.ISNAN, Op.ISINF, Op.IDENTITY, Op.MOD,
}  # fmt: skip
"""ELEMENTWISE and the logic, comparison, selection and identity ops: each output element is
computed from its operands' elements at the same (broadcast) index alone."""
LAYOUT = frozenset({Op.RESHAPE, Op.TRANSPOSE, Op.SPLIT, Op.SLICE, Op.EXPAND})
COMMUTATIVE = frozenset({Op.ADD, Op.MUL, Op.MAX, Op.MIN, Op.AND, Op.OR, Op.XOR, Op.EQUAL})


@dataclass
class GraphView:
    graph: Graph
    producer: dict[Value, Node] = field(init=False)
    users: dict[Value, list[Node]] = field(init=False)
    index: dict[Node, int] = field(init=False)

    def __post_init__(self) -> None:
        self.producer = self.graph.producers()
        self.users = self.graph.users()
        self.index = {n: i for i, n in enumerate(self.graph.nodes)}
        self.outputs = set(self.graph.outputs)

    def prod(self, v: Value, *ops: Op) -> Node | None:
        n = self.producer.get(v)
        if n is None or (ops and n.op not in ops):
            return None
        return n

    def sole_user(self, v: Value) -> Node | None:
        us = self.users.get(v, [])
        return us[0] if len(us) == 1 and v not in self.outputs else None

    def escapes(self, values: Iterable[Value], inside: set[Node]) -> Value | None:
        """The first of `values` used outside `inside` (or returned by the graph), if any."""
        for v in values:
            if v in self.outputs or any(u not in inside for u in self.users.get(v, [])):
                return v
        return None

    def ancestors(self, v: Value) -> list[Node]:
        """Nodes `v` depends on, in topological order."""
        seen: set[Node] = set()
        stack = [v]
        while stack:
            n = self.producer.get(stack.pop())
            if n is None or n in seen:
                continue
            seen.add(n)
            stack.extend(n.inputs)
        return sorted(seen, key=self.index.__getitem__)

    def input_ancestors(self, v: Value) -> set[Value]:
        ins = set(self.graph.inputs)
        out = {x for n in self.ancestors(v) for x in n.inputs if x in ins}
        return out | ({v} if v in ins else set())


def scalar(v: Value) -> float | None:
    """The value of a one-element constant, else None."""
    if v.const is None or v.const.size != 1:
        return None
    return float(v.const.reshape(-1)[0])


def eval_nodes(nodes: Sequence[Node], env: Mapping[Value, np.ndarray]) -> dict[Value, np.ndarray]:
    """Evaluate `nodes` (topologically ordered) on arrays, with shapes taken from the arrays."""
    vals: dict[Value, np.ndarray] = dict(env)
    for n in nodes:
        args = [v.const if v.is_const else vals[v] for v in n.inputs]
        for v, r in zip(n.outputs, evaluate_op(n.op, args, n.attr_dict), strict=True):  # type: ignore[arg-type]
            vals[v] = np.asarray(r)
    return vals


def probe_function(region: Sequence[Node], x: Value, probe: np.ndarray) -> np.ndarray | None:
    """What `region` computes of `x` alone, evaluated on `probe` (a 1-D array of values): its
    last node's output, or None when the region reads a non-scalar constant (then it is not an
    elementwise function of x), fails to evaluate, or changes the probe's shape. Passes that
    recognise an activation by what it computes (GELU, SiLU) compare this with a reference."""
    if any(v.is_const and v.type.size != 1 for n in region for v in n.inputs):
        return None
    try:
        y = eval_nodes(region, {x: probe})[region[-1].outputs[0]]
    except Exception:
        return None
    return y if y.shape == probe.shape else None


def apply(graph: Graph, replacements: Sequence[Replacement]) -> Graph:
    """Add the new nodes, substitute values everywhere, drop dead nodes, re-sort topologically."""
    if not replacements:
        return graph
    mapping: dict[Value, Value] = {}
    for r in replacements:
        mapping.update(r.mapping)

    def resolve(v: Value) -> Value:
        seen = 0
        while v in mapping and seen < 64:
            v, seen = mapping[v], seen + 1
        return v

    nodes = list(graph.nodes) + [n for r in replacements for n in r.new_nodes]
    nodes = [
        n
        if not any(v in mapping for v in n.inputs)
        else Node(n.op, tuple(resolve(v) for v in n.inputs), n.outputs, n.attrs, n.name, n.origin)
        for n in nodes
    ]
    outputs = tuple(resolve(v) for v in graph.outputs)
    return Graph(graph.inputs, outputs, tuple(_toposort(dce(nodes, outputs))), graph.name)


def dce(nodes: Sequence[Node], outputs: Iterable[Value]) -> list[Node]:
    """Nodes some output depends on, in their given order."""
    producer = {v: n for n in nodes for v in n.outputs}
    live: set[Node] = set()
    stack = list(outputs)
    while stack:
        n = producer.get(stack.pop())
        if n is not None and n not in live:
            live.add(n)
            stack.extend(n.inputs)
    return [n for n in nodes if n in live]


def _toposort(nodes: list[Node]) -> list[Node]:
    """Stable topological order: among ready nodes, the earliest in `nodes` goes first."""
    producer = {v: i for i, n in enumerate(nodes) for v in n.outputs}
    deps = [{producer[v] for v in n.inputs if v in producer} for n in nodes]
    users: list[list[int]] = [[] for _ in nodes]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    pending = [len(d) for d in deps]
    ready = [i for i, p in enumerate(pending) if p == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        i = heapq.heappop(ready)
        out.append(nodes[i])
        for u in users[i]:
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(ready, u)
    if len(out) != len(nodes):
        raise NoMatch("rewrite produced a cycle")
    return out


def rewrite_nodes(graph: Graph, rule, *, anchor_ops: frozenset[Op]) -> tuple[Graph, list[str]]:  # type: ignore[no-untyped-def]
    """Try `rule(view, node) -> Replacement` on every node whose op is in `anchor_ops`.

    Matches may not overlap: a node consumed by one replacement is not offered to another in
    the same sweep. Returns the new graph and the reasons rules did not fire (for --explain).
    """
    view = GraphView(graph)
    taken: set[Node] = set()
    reps: list[Replacement] = []
    misses: list[str] = []
    for n in graph.nodes:
        if n.op not in anchor_ops or n in taken:
            continue
        try:
            rep, consumed = rule(view, n)
        except NoMatch as e:
            misses.append(f"{n.op.name} {n.name!r}: {e}")
            continue
        if consumed & taken:
            continue
        taken |= consumed
        reps.append(rep)
    return apply(graph, reps), misses


def make_node(
    op: Op,
    ins: Sequence[Value],
    name: str,
    origin: Sequence[str],
    out_names: Sequence[str] = (),
    /,
    **attrs: object,
) -> Node:
    """A node with inferred output types; outputs are named `out_names` (default: `name`;
    positional, so that any `**attrs` may be unpacked here)."""
    a = make_attrs(attrs)  # type: ignore[arg-type]
    types = infer_types(op, [v.type for v in ins], dict(a))
    names = list(out_names) or [name] + [f"{name}:{i}" for i in range(1, len(types))]
    outs = tuple(Value(nm, t) for nm, t in zip(names, types, strict=True))
    return Node(op, tuple(ins), outs, a, name, tuple(dict.fromkeys(origin)))


def origin_of(nodes: Iterable[Node]) -> tuple[str, ...]:
    """The ONNX provenance of a set of nodes, without duplicates, in order."""
    return tuple(dict.fromkeys(o for n in nodes for o in n.origin))


def region_between(
    view: GraphView,
    x: Value,
    y: Node,
    allowed: frozenset[Op],
    max_nodes: int = 32,
    leaves: frozenset[Value] = frozenset(),
) -> list[Node] | None:
    """The nodes on paths from `x` to `y` (inclusive), if every other operand is a constant
    (or one of `leaves`, values the caller evaluates itself).

    None when an ancestor of `y` (short of `x`) is a graph input, an op outside `allowed`, or
    the region grows past `max_nodes`."""
    seen: set[Node] = set()
    stack = [y]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        if n.op not in allowed or len(seen) >= max_nodes:
            return None
        seen.add(n)
        for v in n.inputs:
            if v is x or v.is_const or v in leaves:
                continue
            p = view.producer.get(v)
            if p is None:
                return None
            stack.append(p)
    if not any(x in n.inputs for n in seen):
        return None
    return sorted(seen, key=view.index.__getitem__)


def forward_candidates(
    view: GraphView, start: Node, allowed: frozenset[Op], depth: int
) -> list[Node]:
    """Nodes reachable from `start` through `allowed` ops within `depth` steps, nearest first."""
    out: list[Node] = []
    frontier = [start]
    seen = {start}
    for _ in range(depth):
        nxt = []
        for n in frontier:
            for v in n.outputs:
                for u in view.users.get(v, []):
                    if u not in seen and u.op in allowed:
                        seen.add(u)
                        nxt.append(u)
        out += nxt
        frontier = nxt
    return out
