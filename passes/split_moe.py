"""split-moe: a `moe` op whose experts do not fit one system becomes S shards, E/S experts each.

    Moe(x, W_router[H, E], W_gate[E], W_up[E], W_down[E], shared..., biases...)
    -> y_0 = Moe(x, W_router, W_gate[0:E/S], ..., shared..., first=0)
       y_i = Moe(x, W_router, W_gate[i E/S:(i+1) E/S], ..., y_{i-1}, first=i E/S, accumulate)

Each shard keeps a copy of the router (H x E: small beside the experts, 5120 x 128 x 2 B =
1.3 MB for Llama 4 Maverick against 16 GB of experts in each of two shards), computes the same
top k over all E logits and applies only the choices among its own experts (`wsecc.ir.rules.moe`).
The shards' contributions are summed by a running sum: shard i reads the sum of the shards
before it and adds its own (`accumulate`). Why a running sum rather than a final add: over a
pipeline of systems the token passes every shard in turn anyway, so the sum travels with it
(one H-vector a token beside x, what a cut between two shards carries); a final add would keep
every shard's partial alive until the last and cost another kernel. The shared expert (and its
gate) goes to shard 0, which starts the sum; the router's bias stays whole on every shard, the
experts' biases are sliced with their experts.

The shard counts come in `ctx.options["expert_shards"]`: one count for every moe op (the
user's `--expert-shards N`) or a mapping from a moe node's name to its count
(`wsecc.core.experts.expert_shards`, the fewest that fit one system). A count of 1, or none
given, leaves the op as it is. Requires fused `moe` ops; guarantees every shard's experts lie
within its router's and that the last shard's output is the block's.
"""

from __future__ import annotations

from collections.abc import Mapping

from wsecc.ir.core import Graph, Node, Op, Value
from wsecc.ir.rewrite import Replacement, apply, make_node
from wsecc.ir.rules import moe_bias_start
from wsecc.passdef import Level, Pass, PassContext, PassError


def shard_counts(graph: Graph, asked: object) -> dict[Node, int]:
    """Each moe node's shard count from `asked` (an int for all, or node name -> count);
    raises PassError when a count does not divide the node's experts."""
    out: dict[Node, int] = {}
    for n in graph.nodes:
        if n.op is not Op.MOE:
            continue
        if isinstance(asked, Mapping):
            s = int(asked.get(n.name, 1))
        else:
            s = int(asked) if isinstance(asked, int) else 1
        experts = n.inputs[2].type.shape[0]
        if s < 1 or experts % s:
            raise PassError(
                f"moe {n.name!r} has {experts} experts: {s} shards do not split them evenly; "
                f"give --expert-shards a divisor of {experts}"
            )
        if s > 1:
            out[n] = s
    return out


def _sliced(v: Value, a: int, b: int, name: str) -> Value:
    """Rows a..b-1 of constant `v` (the experts' stacks), a view of its data."""
    assert v.const is not None  # fuse-moe's weights are constants
    return Value.constant(name, v.const[a:b])


def shards(n: Node, s: int) -> list[Node]:
    """Moe node `n` as `s` shards of E/s experts each, in sum order (module doc)."""
    a = n.attr_dict
    experts = n.inputs[2].type.shape[0]
    each = experts // s
    shared = str(a.get("shared", "none"))
    bias = bool(a.get("bias", False))
    start = moe_bias_start(a)
    out: list[Node] = []
    for i in range(s):
        lo, hi = i * each, (i + 1) * each
        name = f"{n.name}.e{lo}-{hi - 1}"
        ins = [n.inputs[0], n.inputs[1]]
        ins += [_sliced(v, lo, hi, f"{v.name}[{lo}:{hi}]") for v in n.inputs[2:5]]
        attrs = {**a, "first": lo, "shared": shared if i == 0 else "none"}
        if i == 0:
            ins += n.inputs[5:start]
        if bias:
            br, *per_expert = n.inputs[start : start + 4]
            ins += [br, *(_sliced(v, lo, hi, f"{v.name}[{lo}:{hi}]") for v in per_expert)]
        if i > 0:
            ins.append(out[-1].outputs[0])
            attrs["accumulate"] = True
        out_names = [n.outputs[0].name] if i == s - 1 else [name]
        out.append(make_node(Op.MOE, ins, name, n.origin, out_names, **attrs))
    return out


def split_moe(graph: Graph, ctx: PassContext) -> Graph:
    """Every moe op with a shard count above 1 (module doc) split into its shards."""
    counts = shard_counts(graph, ctx.options.get("expert_shards", 1))
    reps = []
    for n, s in counts.items():
        new = shards(n, s)
        reps.append(Replacement(new, {n.outputs[0]: new[-1].outputs[0]}))
    return apply(graph, reps)


PASS = Pass("split-moe", split_moe, requires=Level.FUSED, produces=Level.FUSED)
