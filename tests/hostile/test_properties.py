"""Property tests for the validators that guard wsecc's products.

- IR verifier: random well-formed graphs verify; one random mutation — a dangling operand, a
  wrong output type, a cycle, a value defined twice — is rejected with a message that names
  the problem and quotes the offending node.
- Placement validator: random legal placements pass; one random corruption — an overlap, a
  rectangle off the fabric, a shape the kernel does not allow, a missing kernel — is reported.
- Routing validator: routings from the router on random placements pass; a broken path, a color
  beyond the budget or a router with more colors than the budget is reported.

Shapes of the random graphs are worked out here by hand, not with wsecc's rule table, so a
wrong rule cannot make a wrong graph look right.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from wsecc.ir import DType, Graph, Node, Op, TensorType, Value, VerificationError, verify
from wsecc.ir.core import make_attrs
from wsecc.place.problem import (
    PlaceFlow,
    PlaceKernel,
    Placement,
    PlacementProblem,
    Rect,
    validate_placement,
)
from wsecc.route.problem import Routing, RoutingError, make_routing_problem, validate_routing
from wsecc.route.router import route

FAST = settings(max_examples=60, deadline=None)
F32 = DType.FLOAT32


# ================================================================ IR verifier


@st.composite
def graphs(draw: st.DrawFn) -> Graph:
    """A random DAG of elementwise, matmul, transpose and reduce ops over f32 matrices."""
    dims = st.integers(1, 5)
    x = Value("x", TensorType(F32, (draw(dims), draw(dims))))
    live = [x]
    nodes: list[Node] = []
    for k in range(draw(st.integers(1, 12))):
        a = draw(st.sampled_from(live))
        r, c = a.type.shape
        kind = draw(st.sampled_from(["unary", "binary", "bias", "matmul", "transpose", "reduce"]))
        attrs: dict = {}
        if kind == "unary":
            op, ins, shape = draw(st.sampled_from([Op.NEG, Op.ABS, Op.RELU, Op.TANH])), [a], (r, c)
        elif kind == "binary":
            same = [v for v in live if v.type.shape == (r, c)]
            op, shape = draw(st.sampled_from([Op.ADD, Op.SUB, Op.MUL])), (r, c)
            ins = [a, draw(st.sampled_from(same))]
        elif kind == "bias":  # (r, c) + (c,) broadcasts
            b = Value.constant(f"b{k}", np.ones(c, np.float32))
            op, ins, shape = Op.ADD, [a, b], (r, c)
        elif kind == "matmul":
            n = draw(dims)
            w = Value.constant(f"w{k}", np.ones((c, n), np.float32))
            op, ins, shape = Op.MATMUL, [a, w], (r, n)
        elif kind == "transpose":
            op, ins, shape, attrs = Op.TRANSPOSE, [a], (c, r), {"perm": (1, 0)}
        else:
            op, ins, shape, attrs = Op.REDUCE_SUM, [a], (r, 1), {"axes": (1,), "keepdims": True}
        y = Value(f"v{k}", TensorType(F32, shape))
        nodes.append(Node(op, tuple(ins), (y,), make_attrs(attrs), f"n{k}"))
        live.append(y)
    return Graph((x,), (live[-1],), tuple(nodes))


def _replace_value(g: Graph, old: Value, new: Value, start: int) -> Graph:
    """Use `new` instead of `old` in every node from index `start` on, and in the outputs."""
    nodes = list(g.nodes)
    for i in range(start, len(nodes)):
        n = nodes[i]
        nodes[i] = replace(
            n,
            inputs=tuple(new if v is old else v for v in n.inputs),
            outputs=tuple(new if v is old else v for v in n.outputs),
        )
    return g.replace(nodes, tuple(new if v is old else v for v in g.outputs))


def _fails(g: Graph, message: str, node: Node) -> None:
    try:
        verify(g)
    except VerificationError as e:
        text = str(e)
        assert re.search(message, text), text
        assert f"\n  at: %{node.outputs[0].name}:" in text, text  # quotes the offending node
        return
    raise AssertionError(f"verify accepted a graph that should fail with {message!r}")


@FAST
@given(graphs())
def test_random_well_formed_graphs_verify(g):
    verify(g)


@FAST
@given(graphs(), st.data())
def test_a_dangling_operand_is_rejected(g, data):
    i = data.draw(st.integers(0, len(g.nodes) - 1))
    n = g.nodes[i]
    j = data.draw(st.integers(0, len(n.inputs) - 1))
    ghost = Value("ghost", n.inputs[j].type)  # a value nothing defines
    bad = g.replace([*g.nodes[:i], replace(n, inputs=tuple(ghost if k == j else v for k, v in enumerate(n.inputs))), *g.nodes[i + 1 :]])  # fmt: skip
    _fails(bad, r"operand %ghost is used before it is defined", n)


@FAST
@given(graphs(), st.data())
def test_a_wrong_output_type_is_rejected(g, data):
    i = data.draw(st.integers(0, len(g.nodes) - 1))
    n = g.nodes[i]
    old = n.outputs[0]
    r, c = old.type.shape
    wrong = data.draw(
        st.sampled_from(
            [
                TensorType(DType.FLOAT16, (r, c)),
                TensorType(F32, (r, c + 1)),
                TensorType(F32, (r * c,)),
            ]
        )
    )
    bad = _replace_value(g, old, Value(old.name, wrong), i)
    message = f"{n.op.name} output types ['{wrong}'] differ from inferred ['{old.type}']"
    _fails(bad, re.escape(message), bad.nodes[i])


@FAST
@given(graphs(), st.data())
def test_a_cycle_is_rejected(g, data):
    # node i reads the output of node j >= i, which (in a DAG kept in topological order)
    # closes a cycle through every node between them
    i = data.draw(st.integers(0, len(g.nodes) - 1))
    j = data.draw(st.integers(i, len(g.nodes) - 1))
    n, later = g.nodes[i], g.nodes[j].outputs[0]
    if n.inputs[0].type != later.type:
        n = replace(n, op=Op.IDENTITY, inputs=(later,), outputs=(Value(n.outputs[0].name, later.type),), attrs=())  # fmt: skip
        g = _replace_value(g, g.nodes[i].outputs[0], n.outputs[0], i + 1)
    else:
        n = replace(n, inputs=(later, *n.inputs[1:]))
    bad = g.replace([*g.nodes[:i], n, *g.nodes[i + 1 :]])
    _fails(bad, rf"operand %{re.escape(later.name)} is used before it is defined", n)


@FAST
@given(graphs(), st.data())
def test_a_value_defined_twice_is_rejected(g, data):
    if len(g.nodes) < 2:
        return
    i = data.draw(st.integers(1, len(g.nodes) - 1))
    first = data.draw(st.integers(0, i - 1))
    twice = g.nodes[first].outputs[0]
    dup = Node(Op.IDENTITY, (twice,), (twice,), (), "dup")
    bad = g.replace([*g.nodes[:i], dup, *g.nodes[i:]])
    _fails(bad, rf"value %{re.escape(twice.name)} is defined twice", dup)


# ================================================================ placement validator

W, H = 48, 36


@st.composite
def placements(draw: st.DrawFn) -> tuple[PlacementProblem, Placement]:
    """Kernels in the cells of a random grid over the fabric, each somewhere inside its cell,
    so they are disjoint by construction; a chain of flows between them."""
    cols, rows = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    cw, ch = W // cols, H // rows
    rects: dict[str, Rect] = {}
    for k in range(draw(st.integers(1, cols * rows))):
        cx, cy = k % cols, k // cols
        w, h = draw(st.integers(1, cw)), draw(st.integers(1, ch))
        x = cx * cw + draw(st.integers(0, cw - w))
        y = cy * ch + draw(st.integers(0, ch - h))
        rects[f"k{k}"] = Rect(x, y, w, h)
    kernels = tuple(
        PlaceKernel(n, ((r.w, r.h), (r.h, r.w)) if r.w != r.h else ((r.w, r.h),))
        for n, r in rects.items()
    )
    names = list(rects)
    flows = tuple(
        PlaceFlow(a, b, float(draw(st.integers(1, 9))))
        for a, b in zip(names, names[1:], strict=False)
    )
    problem = PlacementProblem(W, H, kernels, flows)
    return problem, _placed(problem, rects)


def _placed(problem: PlacementProblem, rects: dict[str, Rect]) -> Placement:
    return Placement.of(problem, rects, placer="test", bound=0.0, status="", seconds=0.0, seed=0)


@FAST
@given(placements())
def test_random_legal_placements_pass(pp):
    problem, placement = pp
    assert validate_placement(problem, placement) == []


@FAST
@given(placements(), st.data())
def test_a_corrupted_placement_is_reported(pp, data):
    problem, placement = pp
    rects = dict(placement.rects)
    names = sorted(rects)
    victim = data.draw(st.sampled_from(names))
    r = rects[victim]
    corruption = data.draw(
        st.sampled_from(["overlap", "off-fabric", "negative", "shape", "missing"])
    )
    if corruption == "overlap" and len(names) < 2:
        corruption = "off-fabric"
    if corruption == "overlap":
        other = rects[data.draw(st.sampled_from([n for n in names if n != victim]))]
        rects[victim] = replace(r, x=other.x, y=other.y)  # same corner: the PE (x, y) is shared
        if rects[victim].x + r.w > W or rects[victim].y + r.h > H:
            rects[victim] = replace(rects[victim], x=min(other.x, W - r.w), y=min(other.y, H - r.h))
        expected = r"kernels '\w+' at .* and '\w+' at .* overlap"
    elif corruption == "off-fabric":
        rects[victim] = replace(r, x=W - r.w + data.draw(st.integers(1, 5)))
        expected = rf"kernel '{victim}' at .* leaves the {W}x{H} fabric"
    elif corruption == "negative":
        rects[victim] = replace(r, y=-data.draw(st.integers(1, 5)))
        expected = rf"kernel '{victim}' at .* leaves the {W}x{H} fabric"
    elif corruption == "shape":
        rects[victim] = replace(r, w=r.w + 1, h=r.h + 2) if r.w + 1 <= W else replace(r, h=r.h + 2)
        expected = rf"kernel '{victim}' has shape \d+x\d+, allowed: .+"
    else:
        del rects[victim]
        expected = rf"kernel '{victim}' is not placed"
    bad = replace(placement, rects=rects)
    violations = validate_placement(problem, bad)
    assert any(re.fullmatch(expected, v) for v in violations), (corruption, violations)


# ================================================================ routing validator


@st.composite
def routings(draw: st.DrawFn):
    problem, placement = draw(placements())
    rp = make_routing_problem(
        problem, placement, bytes_per_lane=1.0, max_lanes=draw(st.integers(1, 3))
    )
    try:
        routing = route(rp, placement)
    except RoutingError:  # a legal outcome on a crowded instance; nothing to validate
        routing = None
    return rp, placement, routing


@FAST
@given(routings())
def test_routings_from_the_router_pass(rpr):
    rp, placement, routing = rpr
    if routing is not None:
        assert validate_routing(rp, placement, routing) == []


def _with_lane(routing: Routing, index: int, **changes) -> Routing:
    lanes = list(routing.lanes)
    lanes[index] = replace(lanes[index], **changes)
    return replace(routing, lanes=tuple(lanes))


@FAST
@given(routings(), st.data())
def test_a_broken_path_is_reported(rpr, data):
    rp, placement, routing = rpr
    long = [i for i, ln in enumerate(routing.lanes if routing else ()) if len(ln.path) >= 3]
    if not long:
        return
    i = data.draw(st.sampled_from(long))
    lane = routing.lanes[i]
    k = data.draw(st.integers(1, len(lane.path) - 2))
    broken = lane.path[:k] + lane.path[k + 1 :]  # drop one interior PE: a diagonal or a jump
    out = validate_routing(rp, placement, _with_lane(routing, i, path=broken))
    tag = f"flow '{lane.flow}' lane {lane.index}"
    assert f"{tag} is broken: {lane.path[k - 1]} -> {lane.path[k + 1]} is not a unit step" in out


@FAST
@given(routings(), st.data())
def test_too_many_colors_are_reported(rpr, data):
    rp, placement, routing = rpr
    if not routing or not routing.lanes:
        return
    i = data.draw(st.integers(0, len(routing.lanes) - 1))
    lane = routing.lanes[i]
    color = rp.color_budget + data.draw(st.integers(0, 5))
    out = validate_routing(rp, placement, _with_lane(routing, i, color=color))
    budget = f"0..{rp.color_budget - 1}"
    assert (
        f"flow '{lane.flow}' lane {lane.index} has color {color}, outside the budget {budget}"
        in out
    )
    if routing.colors_used_max >= 2:  # a budget below what a router uses is reported there
        tight = replace(rp, color_budget=routing.colors_used_max - 1)
        assert any(
            re.fullmatch(rf"router \(\d+, \d+\) uses \d+ colors, budget {tight.color_budget}", m)
            for m in validate_routing(tight, placement, routing)
        )
