"""Reverse-mode differentiation over a Graph: the gradient of a loss of the graph's outputs with
respect to its weights, from each op's `vjp` in `wsecc.ir.rules` (as JAX keeps one per primitive).

value_and_grad(graph, feeds, loss)  runs the forward with the reference rules, keeping every
                                    value, then walks the nodes backwards: each node whose outputs
                                    carry a cotangent and that has an operand depending on a
                                    weight gets its vjp; cotangents of a value used several times
                                    (fan-out, a tied weight read by the embedding and the LM head)
                                    add up.
choose_loss(graph, feeds)           the training loss, chosen from the graph (`Loss`).

Precisions: fp32 evaluates forward and backward in float32. mixed rounds the float operands of
every contraction (linear, lm_head, matmul, gemm, attention, moe) to float16 and accumulates in
float32, forward and backward: the backward also rounds the cotangent a contraction receives
(the other operand of its backward products). Everything else stays float32. (A moe's router
chooses from the rounded x and W_router, as the mixed program's does.)

An op on a differentiable path (an operand that depends on a weight, an output that reaches the
loss) without a vjp is an error naming it, never a silent zero.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from wsecc.interp import evaluate
from wsecc.ir.core import Graph, IRError, Node, Op, Value
from wsecc.ir.rules import RULES, Arrays, Attrs, Vjp, moe_bias_start
from wsecc.vocab import Precision

CONTRACTIONS = frozenset({Op.LINEAR, Op.LM_HEAD, Op.MATMUL, Op.GEMM, Op.ATTENTION, Op.MOE})


# ---------------------------------------------------------------- the loss


@dataclass(frozen=True, eq=False)
class LossTerm:
    """One output's part of the loss. kind "next_token": softmax cross-entropy of logits
    [B, S, V] against `target` [B, S] (the input ids shifted left; -1 = ignored); "class":
    softmax cross-entropy of [B, C] against `target` [B]; "regression": ½·Σ (y − target)²."""

    output: str
    kind: str
    target: np.ndarray


@dataclass(frozen=True)
class Loss:
    """A sum of per-output terms, each a *sum* over its positions (not a mean: a sum gives the
    finite differences of a checker bigger gradients to measure against their noise). Computed
    in float64 from whatever produced the outputs — our graph or onnxruntime."""

    terms: tuple[LossTerm, ...]

    @property
    def kind(self) -> str:
        """'next_token', 'class' or 'regression'; '+'-joined when the outputs differ."""
        return "+".join(dict.fromkeys(t.kind for t in self.terms))

    def __call__(self, outputs: Mapping[str, np.ndarray]) -> float:
        return self.value_and_cotangents(outputs)[0]

    def value_and_cotangents(
        self, outputs: Mapping[str, np.ndarray]
    ) -> tuple[float, dict[str, np.ndarray]]:
        """The loss and its gradient with respect to each output it reads (float64)."""
        total = 0.0
        cots: dict[str, np.ndarray] = {}
        for t in self.terms:
            y = np.asarray(outputs[t.output], np.float64)
            if t.kind == "regression":
                d = y - t.target
                total += 0.5 * float(np.sum(d * d))
                cots[t.output] = d
                continue
            logits = y.reshape(-1, y.shape[-1])
            labels = t.target.reshape(-1)
            used = labels >= 0
            shifted = logits - logits.max(axis=-1, keepdims=True)
            logp = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
            rows = np.flatnonzero(used)
            total -= float(logp[rows, labels[rows]].sum())
            d = np.exp(logp)
            d[rows, labels[rows]] -= 1.0
            d[~used] = 0.0
            cots[t.output] = d.reshape(y.shape)
        return total, cots


def choose_loss(graph: Graph, feeds: Mapping[str, np.ndarray], seed: int = 0) -> Loss:
    """The training loss of `graph`, one term per float output, chosen from the graph:

    - an output computed by an LM_HEAD (through reshapes), [B, S, V]: next-token cross-entropy;
      labels are the ids the embedding reads (the graph input feeding an EMBEDDING's first
      ids operand), shifted left by one, the last position ignored;
    - any other [B, C] output (a classification or QA head): cross-entropy against labels drawn
      with `seed`, uniform in [0, C);
    - anything else (hidden states of a model with no head): the fallback ½·Σ (y − t)² against a
      fixed target t ~ N(0, 1) drawn with `seed`.
    """
    rng = np.random.default_rng(seed)
    producers = graph.producers()
    terms = []
    for v in graph.outputs:
        if not v.type.dtype.is_float:
            continue
        shape = v.type.shape
        ids = _lm_ids(graph, producers, v)
        if ids is not None and len(shape) == 3 and ids.type.shape == shape[:2]:
            labels = np.full(shape[:2], -1, np.int64)
            labels[:, :-1] = np.asarray(feeds[ids.name])[:, 1:]
            terms.append(LossTerm(v.name, "next_token", labels))
        elif len(shape) == 2:
            terms.append(LossTerm(v.name, "class", rng.integers(0, shape[1], shape[0])))
        else:
            terms.append(LossTerm(v.name, "regression", rng.standard_normal(shape)))
    if not terms:
        raise IRError("the graph has no float output to define a loss on")
    return Loss(tuple(terms))


_PLUMBING = (Op.RESHAPE, Op.IDENTITY, Op.CAST)


def _lm_ids(graph: Graph, producers: Mapping[Value, Node], out: Value) -> Value | None:
    """The graph input holding the token ids, when `out` is an LM head's logits."""
    node = producers.get(out)
    while node is not None and node.op in _PLUMBING:
        node = producers.get(node.inputs[0])
    if node is None or node.op is not Op.LM_HEAD:
        return None
    for n in graph.nodes:
        if n.op is Op.EMBEDDING:
            ids = n.inputs[0]
            while ids in producers and producers[ids].op in _PLUMBING:
                ids = producers[ids].inputs[0]
            return ids if ids in graph.inputs else None
    return None


# ---------------------------------------------------------------- reverse mode


def weights(graph: Graph) -> list[Value]:
    """The float constants of more than one element: the weights. Scalars are literals the
    exporters wrote (ε, ½, a mask's fill), not parameters; integer constants are shape data,
    indices and positions."""
    return [v for v in graph.constants() if v.type.dtype.is_float and v.type.size > 1]


def _drop_gamma_xhat(vjp: Vjp) -> Vjp:
    """LAYER_NORM's vjp with dγ = Σ g instead of Σ g·x̂ (a fault for the checks)."""

    def broken(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
        out = vjp(xs, ys, gs, a)
        out[-2] = gs[0].reshape(-1, xs[-2].shape[0]).sum(axis=0)
        return out

    return broken


def _drop_router(vjp: Vjp) -> Vjp:
    """MOE's vjp with no gradient for the router's weight and bias, as if the kept weights were
    constants (a fault for the checks: the x the router reads keeps its share)."""

    def broken(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
        out = vjp(xs, ys, gs, a)
        out[1] = np.zeros_like(xs[1])
        if a.get("bias", False):
            out[moe_bias_start(a)] = np.zeros_like(xs[moe_bias_start(a)])
        return out

    return broken


FAULTS: Mapping[str, tuple[Op, Callable[[Vjp], Vjp]]] = {
    "layernorm_gamma": (Op.LAYER_NORM, _drop_gamma_xhat),
    "moe_router": (Op.MOE, _drop_router),
}
"""Deliberately broken gradient rules, to show a check fails on exactly what they break."""


GRAD_SCALE = "grad_scale"
"""A fault with a factor, `grad_scale=F`: the weight gradient of the graph's last Linear (the
one nearest the loss, which finite differences resolve best) multiplied by F. A wrong scale is
what a check by correlation alone (PCC) cannot see."""


def grad_scale_factor(fault: str | None) -> float | None:
    """F of a `grad_scale=F` fault (a finite positive number); None for any other fault.
    Raises IRError on `grad_scale=` with no such number."""
    if fault is None or not fault.startswith(GRAD_SCALE + "="):
        return None
    text = fault.partition("=")[2]
    try:
        factor = float(text)
    except ValueError:
        factor = float("nan")
    if not np.isfinite(factor) or factor <= 0:
        raise IRError(
            f"fault {fault!r}: the factor must be a positive number, e.g. grad_scale=1.05"
        )
    return factor


def _scaled_weight(graph: Graph, fault: str | None) -> tuple[Value, float] | None:
    """The weight a `grad_scale=F` fault scales (the last Linear's), and F."""
    factor = grad_scale_factor(fault)
    if factor is None:
        return None
    linears = [
        n.inputs[1] for n in graph.nodes if n.op is Op.LINEAR and n.inputs[1].const is not None
    ]
    if not linears:
        raise IRError(
            f"fault {fault!r} needs a Linear with a constant weight; {graph.name!r} has none"
        )
    return linears[-1], factor


def _vjp(op: Op, fault: str | None) -> Vjp | None:
    vjp = RULES[op].vjp
    if fault is not None and grad_scale_factor(fault) is None:
        if fault not in FAULTS:
            raise IRError(
                f"unknown gradient fault {fault!r}: choose one of {', '.join(FAULTS)}, "
                f"{GRAD_SCALE}=F"
            )
        target, breaker = FAULTS[fault]
        if op is target and vjp is not None:
            return breaker(vjp)
    return vjp


def _to_f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).astype(x.dtype) if x.dtype == np.float32 else x


def _rounding(precision: Precision) -> Callable[[Node, list[np.ndarray]], list[np.ndarray]]:
    """The operands a node computes on: a contraction's rounded to float16 in mixed."""

    def operands(node: Node, args: list[np.ndarray]) -> list[np.ndarray]:
        if precision is Precision.MIXED and node.op in CONTRACTIONS:
            return [_to_f16(a) for a in args]
        return args

    return operands


def value_and_grad(
    graph: Graph,
    feeds: Mapping[str, np.ndarray],
    loss: Loss,
    wrt: Iterable[Value] | None = None,
    precision: Precision = Precision.FP32,
    fault: str | None = None,
) -> tuple[float, dict[Value, np.ndarray]]:
    """The loss of `graph` on `feeds`, and its gradient with respect to each of `wrt` (default:
    `weights(graph)`), shaped and typed like it. `fault` names a broken rule of FAULTS, or is
    `grad_scale=F` (`GRAD_SCALE`)."""
    prec = Precision(precision)
    if prec is Precision.FP16:
        raise IRError("gradients are computed in fp32 or mixed, not fp16")
    targets = list(weights(graph) if wrt is None else wrt)
    scaled = _scaled_weight(graph, fault)
    operands = _rounding(prec)
    env = evaluate(graph, feeds, keep_all=True, operands=operands)

    def value(v: Value) -> np.ndarray:
        return v.const if v.const is not None else env[v]

    active = set(targets)  # values that depend on a target
    for n in graph.nodes:
        if any(v in active for v in n.inputs):
            active.update(o for o in n.outputs if o.type.dtype.is_float)
    loss_value, seeds = loss.value_and_cotangents({v.name: value(v) for v in graph.outputs})
    cots: dict[Value, np.ndarray] = {}

    def add(v: Value, d: np.ndarray) -> None:
        d = np.asarray(d, v.type.dtype.numpy).reshape(v.type.shape)
        cots[v] = cots[v] + d if v in cots else d

    for v in graph.outputs:
        if v in active and v.name in seeds:
            add(v, seeds[v.name])
    for n in reversed(graph.nodes):
        if not any(o in cots for o in n.outputs) or not any(v in active for v in n.inputs):
            continue
        vjp = _vjp(n.op, fault)
        if vjp is None:
            raise IRError(
                f"{n.op.name} {n.name!r} has no gradient rule (vjp) and lies on a "
                "differentiable path from the weights to the loss"
            )
        gs = [cots.get(o, np.zeros(o.type.shape, o.type.dtype.numpy)) for o in n.outputs]
        if prec is Precision.MIXED and n.op in CONTRACTIONS:
            gs = [_to_f16(g) for g in gs]
        args = operands(n, [value(v) for v in n.inputs])
        with np.errstate(all="ignore"):
            ds = vjp(args, [value(o) for o in n.outputs], gs, n.attr_dict)
        for v, d in zip(n.inputs, ds, strict=True):
            if v not in active:
                continue
            if d is None:
                raise IRError(f"{n.op.name} {n.name!r} gives no gradient for its operand %{v.name}")
            add(v, d)
    grads = {w: cots.get(w, np.zeros(w.type.shape, w.type.dtype.numpy)) for w in targets}
    if scaled is not None and scaled[0] in grads:  # the grad_scale fault
        w, factor = scaled
        grads[w] = (grads[w] * factor).astype(grads[w].dtype)
    return loss_value, grads
