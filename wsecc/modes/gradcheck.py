"""The training gradient checked against a reference nobody here wrote: central finite
differences of onnxruntime running the original ONNX file.

check_gradients(model_path, graph, feeds, precision)  -> GradCheck

1. The loss is `wsecc.ir.grad.choose_loss(graph, feeds, seed)`, one definition applied to our
   outputs and to onnxruntime's (in float64).
2. Our gradient: `value_and_grad` on the fused graph, with respect to its weights.
3. Tracing: each weight constant of the graph is matched to the ONNX initializer it came from by
   its data — equal bytes (the same tensor, or a reshape of it) or, for a 2-D constant, equal to
   the initializer transposed (folding turns a `Transpose(W)` or a Gemm's `transB` into a new
   constant). Several constants from one initializer (GPT-2's wte, read by the embedding and, as
   wte.T, by the LM head) add their gradients into its row; one constant equal to several
   initializers (the folder deduplicates identical ones) makes one row of all of them, perturbed
   together. An initializer whose every path to an output passes through Cos or Sin is a
   position encoding's frequencies (a rotary embedding's inv_freq: a buffer, not trained), held
   by the fused graph only as the tables it makes; it is listed as positional. A float
   initializer of more than one element that no constant traces to is skipped and listed when
   perturbing it leaves onnxruntime's loss unchanged (it is not on a path to the loss).
   Otherwise, when every weight the compiled program trains (the constants in a weight slot,
   `_WEIGHT_SLOTS`: a Linear's, a norm's, the token table) traces to an initializer, the
   program holds that initializer only as a constant outside its weights (a rotary table, an
   attention's bias operand or ALiBi slopes, a folded lookup): it does not train it. Such an
   initializer read by a Gather as its table (nn.Embedding's form: T5's relative position
   bias, ALBERT's token types looked up at constant ids) is a learned table, listed as not
   trained and unchecked; any other is a buffer (CodeGen's sin/cos table, BLOOM's ALiBi slopes),
   listed as one. Neither fails the check nor counts as passed. When some weight the program
   trains does not trace, the initializers left over may be its: all of them are untraced,
   and fail the check. Integer and scalar initializers are shape data, indices, positions or
   literals, not weights.
4. Finite differences: for each row, `samples` coordinates (all when the tensor is smaller):
   half uniform at random, half drawn in proportion to |our gradient| (the uniform half catches
   a gradient that is wrongly zero; the other half measures where the gradient is large, which
   uniform sampling of a sparse gradient — an embedding table's unused rows — would miss).
   Central differences (L(w + h·e) − L(w − h·e)) / 2h at several steps h (`_differences`: three
   steps for every coordinate, a ladder of five where those three disagree), giving each
   coordinate a derivative and its noise (the steps' disagreement).
5. The rows that fail or are unchecked under step 4 are judged again by a float64
   reference when there is one (`wsecc.check.numerics.float64_session`: the file widened to double,
   if onnxruntime can run it) — central differences at the same coordinates, one step
   h = 1e-5, the loss from float64 outputs. Rows that pass cleanly keep the fp32 verdict (the
   float64 pass costs time).

Figures per row: max_rel_err = max|g − fd| / max|fd| over the sampled coordinates — relative to
the tensor's largest reference gradient rather than each coordinate's own, so that coordinates
whose gradient is near zero (where a finite difference is all noise) do not make the figure
meaningless (the definition of `wsecc.check.numerics.compare`); PCC of g and fd; noise = the largest
coordinate noise / max|fd|, on max_rel_err's scale; beyond_noise = max(|g − fd| − 2·noise) per
coordinate / max|fd|, the error the differences' own uncertainty does not explain. Whole-tensor
figures, which see a wrong scale (PCC does not: 2·g correlates perfectly with g): norm_ratio =
‖g‖/‖fd‖, rel_err = ‖g − fd‖/‖fd‖, resolution = ‖noise‖/‖fd‖ (what the differences resolve of
this tensor), and in mixed arithmetic = ‖g_mixed − g_fp32‖/‖fd‖ (our own fp32 gradient at the
same coordinates: how far the precision's roundings move this gradient, measured, not guessed).

Verdict per row: passed, failed or unchecked (`GradRow.status`).
- Resolved rows (noise and resolution ≤ RESOLUTION = 1e-2) are judged against a bound of
  max(SCALE_FLOOR, 2·resolution + 2·arithmetic) (`GradRow.bound`). fp32 passes when
  beyond_noise ≤ 1e-2 and rel_err ≤ bound; mixed when PCC ≥ 0.99 and |norm_ratio − 1| ≤ bound.
  Measured at 200 coordinates per tensor in fp32: GPT-2 (gpt2_legacy_op17) 1.4e-5 (the LM
  head) to 4.2e-3, median 1.6e-3; Llama (llama_dynamo) 1.4e-5 to 9.4e-3, median 2.0e-3; BERT
  (bert_dynamo, no float64 reference) 2.1e-5 to 5.1, median 1.0e-2, 23 of its 41 rows
  unresolved. So a gradient scaled by 1.01 fails wherever 2·resolution < 1e-2, and by 2.0
  everywhere resolved.
- Unresolved rows (fp32 onnxruntime's loss is rounded to ~1e-7 relative, ReLU kinks bend the
  differences, some gradients are tiny: a key bias, which softmax ignores) fail when the miss
  is clear of the noise (max_rel_err > 1e-2 + 3·noise, or |norm_ratio − 1| > 3·resolution: a
  spread of three steps understates tiny gradients' error, hence 3) and are otherwise
  unchecked: not passed, and counted apart in the verdict and the summary.
- A row whose differences are all zero passes when our gradient is too small for the largest
  step to move fp32's loss by one rounding unit.
The check passes when no row failed, no initializer is untraced and at least one row passed;
the report lists every row's figures and status, the buffers and the learned tables not
trained.

The float64 reference settles what fp32 cannot (every row not passed under fp32 differences
goes to it, in either precision): its loss is exact to ~1e-16, so h = 1e-5 is far from both
rounding and most ReLU kinks, and on the tiny HF exports it agrees with our fp32 gradients to
~1e-6. A row it judges passes in fp32 when max_rel_err and rel_err are ≤ FLOAT64_TOLERANCE =
1e-3, with no noise allowance; in mixed when PCC ≥ 0.99 and rel_err ≤ FLOAT64_TOLERANCE +
2·arithmetic (the precision's measured share, as above: issue 33's rows that fp32 differences
cannot resolve, checked, not passed as noise). Its figures (and `reference`: "float64 FD") are
against those differences; a wrong gradient fails there as it did in fp32. A row whose float64
gradient is below fp32's resolution (too small for the largest step to move fp32's loss) keeps
its fp32 verdict. Without a float64 reference (onnxruntime has no double Erf: BERT's GELU) the
fp32 rules above stand (unresolved rows stay unchecked), and `GradCheck.float64` says why.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from wsecc.check.numerics import OrtWithWeights, compare, float64_session
from wsecc.ir.core import Graph, Op, Value
from wsecc.ir.grad import Loss, choose_loss, value_and_grad, weights
from wsecc.vocab import Precision

TOLERANCE: Mapping[Precision, Mapping[str, float]] = {
    Precision.FP32: {"max_rel_err": 1e-2},
    Precision.MIXED: {"pcc": 0.99},
}
RESOLUTION = 1e-2  # what the finite differences must resolve: a row noisier is unresolved
SCALE_FLOOR = 1e-4
"""The least whole-tensor error a verdict allows (`GradRow.bound`): the best fp32 differences
measured on the samples agree with our fp32 gradient to 2e-6 (GPT-2's LM head, 20 coordinates),
their typical resolution is 3e-4 to 5e-3; a floor 1e-4 keeps a pass from resting on three steps
that agreed by chance, and is still 100 times below a 1% error."""
FLOAT64_TOLERANCE = 1e-3
"""float64 differences (h = 1e-5) are exact to ~1e-9 and agree with our fp32 gradients to ~1e-6
on the samples: 1e-3 leaves our float32 arithmetic's rounding room and fails a 1% error."""
_F32_EPS = float(np.finfo(np.float32).eps)


@dataclass(frozen=True)
class GradRow:
    """One ONNX initializer (or several identical ones, perturbed together)."""

    initializers: tuple[str, ...]
    shape: tuple[int, ...]
    traced_from: tuple[
        str, ...
    ]  # the graph's constants, each with how it relates: "%c (transpose)"
    sampled: int
    max_rel_err: float
    pcc: float
    noise: float
    beyond_noise: float
    max_grad: float  # max |fd_h| over the sampled coordinates
    passed: bool
    reference: str = "fp32 FD"  # the differences the figures and the verdict are against
    norm_ratio: float = 1.0  # ||g|| / ||fd|| over the sampled coordinates: the scale
    rel_err: float = 0.0  # ||g - fd|| / ||fd||: the whole tensor's relative error
    resolution: float = 0.0  # ||spread of the steps|| / ||fd||: what the differences resolve
    arithmetic: float = 0.0  # mixed: ||g_mixed - g_fp32|| / ||fd||, the precision's own share
    status: str = ""  # "passed", "failed" or "unchecked" ("" before the verdict)
    # sampled coordinates left out because every step that could measure them changed some
    # token's top-k choice (a mixture-of-experts router's): `sampled` counts the rest
    routing_excluded: int = 0

    @property
    def unchecked(self) -> bool:
        """The finite differences cannot resolve the row and no other reference settled it:
        neither passed nor failed (the verdict counts it apart)."""
        return self.status == "unchecked"

    @property
    def bound(self) -> float:
        """The whole-tensor error a resolved row may show (`rel_err` in fp32, |norm_ratio - 1|
        in mixed): twice what the differences resolve, plus, in mixed, twice the error the
        precision's roundings make in this gradient, and never below SCALE_FLOOR; against
        float64 differences, FLOAT64_TOLERANCE."""
        if self.reference == "float64 FD":
            return FLOAT64_TOLERANCE + 2 * self.arithmetic
        return max(SCALE_FLOOR, 2 * self.resolution + 2 * self.arithmetic)

    @property
    def name(self) -> str:
        return " = ".join(self.initializers)

    @property
    def noisy(self) -> bool:
        """The finite differences disagree with themselves by more than RESOLUTION: the row
        passed (or failed) on the weaker test of the module docstring."""
        return self.noise > RESOLUTION


@dataclass(frozen=True)
class GradCheck:
    passed: bool
    precision: Precision
    loss_kind: str
    loss: float  # ours
    loss_onnxruntime: float
    rows: tuple[GradRow, ...]
    untraced: tuple[str, ...]  # weight initializers no constant of the graph traces to: failures
    off_path: tuple[str, ...]  # untraced float initializers the loss does not depend on
    samples: int
    seed: int
    seconds: float
    fault: str | None = None
    # untraced initializers that reach the loss only through Cos/Sin: position frequencies
    # (rotary inv_freq), which the fused graph holds as the tables they make
    positional: tuple[str, ...] = ()
    # "available", or why onnxruntime cannot run the file in float64
    float64: str = ""
    # untraced initializers the loss depends on, held by the compiled program only as
    # constants outside its weights (every weight it trains traced): not trained by it.
    # buffers: computed once and never trained (CodeGen's sin/cos table, BLOOM's ALiBi slopes)
    buffers: tuple[str, ...] = ()
    # learned tables (read by a Gather, as nn.Embedding) looked up at constant positions, the
    # lookup folded into a constant (ALBERT's token types, T5's and MPNet's relative position
    # bias): the file trains them, the compiled program does not; neither passed nor failed
    not_trained: tuple[str, ...] = ()
    # the routers whose choices each finite difference watches (the file's TopK outputs)
    routers: int = 0

    @property
    def routing_excluded(self) -> int:
        """Sampled coordinates left out: every step changed some token's top-k choice."""
        return sum(r.routing_excluded for r in self.rows)

    @property
    def measured(self) -> int:
        """Coordinates the verdicts rest on, over every row."""
        return sum(r.sampled for r in self.rows)

    @property
    def unchecked(self) -> tuple[str, ...]:
        """The rows the finite differences cannot resolve: not counted as passed."""
        return tuple(r.name for r in self.rows if r.unchecked)

    def to_json(self) -> dict[str, Any]:
        """For report.json (`numerics.gradients`)."""
        d = asdict(self)
        d["rows"] = [
            {"name": r.name, **asdict(r), "noisy": r.noisy, "bound": r.bound} for r in self.rows
        ]  # fmt: skip
        d["unchecked"] = list(self.unchecked)
        d["routing_excluded"] = self.routing_excluded
        d["measured"] = self.measured
        return d

    def summary(self) -> str:
        failed = [r for r in self.rows if r.status == "failed"]
        checked = failed or [r for r in self.rows if not r.unchecked]
        worst = max(checked, key=lambda r: r.max_rel_err, default=None)
        text = (
            f"gradients {'PASS' if self.passed else 'FAIL'} ({self.precision}, loss "
            f"{self.loss_kind}): {sum(r.passed for r in self.rows)}/{len(self.rows)} tensors "
            "passed"
        )
        if self.unchecked:
            text += f", {len(self.unchecked)} unchecked (finite differences cannot resolve them)"
        if worst is not None:
            text += (
                f", worst {worst.name}: max rel err {worst.max_rel_err:.2e}, |g|/|fd| "
                f"{worst.norm_ratio:.4f}, PCC {worst.pcc:.5f}, "
                + (
                    "against float64 FD"
                    if worst.reference == "float64 FD"
                    else f"FD resolution {worst.resolution:.1e}"
                )
            )
        if n64 := sum(r.reference == "float64 FD" for r in self.rows):
            text += f"; {n64} judged by float64 FD"
        elif self.float64 not in ("", "available"):
            text += f"; no float64 FD ({self.float64})"
        if self.not_trained:
            text += (
                f"; not trained (a learned table the compiled program looks up at constant "
                f"positions and holds as a constant, unchecked): {', '.join(self.not_trained)}"
            )
        if self.buffers:
            text += f"; not trained (buffer): {', '.join(self.buffers)}"
        if self.routers:
            text += (
                f"; top-k choices of {self.routers} router{'s' if self.routers > 1 else ''} "
                f"held: {self.measured} coordinates measured, "
                f"{self.routing_excluded} left out (their steps change a token's top-k choice)"
            )
        if self.untraced:
            text += f"; untraced: {', '.join(self.untraced)}"
        return text + (f"; fault {self.fault} injected" if self.fault else "")


# ---------------------------------------------------------------- tracing


@dataclass(frozen=True)
class _Trace:
    constant: Value
    initializer: str
    transform: str  # "identity", "reshape", "transpose", "columns" or "transpose, columns"
    columns: tuple[int, ...] = ()  # "columns": the initializer's column each constant column is


def _key(a: np.ndarray) -> tuple[str, int, bytes]:
    data = np.ascontiguousarray(a)
    return data.dtype.str, data.size, hashlib.blake2b(data.tobytes(), digest_size=16).digest()


def trace_weights(
    consts: list[Value], inits: Mapping[str, np.ndarray], graph: Graph | None = None
) -> list[_Trace]:
    """Every (constant, initializer) pair whose data are equal under identity, reshape or a
    2-D transpose (see the module docstring); with `graph`, also a Linear's weight whose
    columns are the initializer's (or its transpose's) in another order, and that Linear's
    bias in the same order (fuse-attention reorders q, k and v heads so)."""
    index: dict[tuple[str, int, bytes], list[str]] = {}
    for name, arr in inits.items():
        index.setdefault(_key(arr), []).append(name)
    plain: dict[Value, list[_Trace]] = {}  # traced as they are, reshaped or transposed
    for c in consts:
        assert c.const is not None
        names = index.get(_key(c.const), [])
        traces = [
            _Trace(c, n, "identity" if inits[n].shape == c.const.shape else "reshape")
            for n in names
        ]
        if not names and c.const.ndim == 2:
            traces = [_Trace(c, n, "transpose") for n in index.get(_key(c.const.T), [])]
        if traces:
            plain[c] = traces
    reordered = _reordered_linears(set(plain), inits, index, graph) if graph is not None else {}
    out = [t for traces in reordered.values() for t in traces]
    return out + [t for c, traces in plain.items() if c not in reordered for t in traces]


_WEIGHT_PAIRS = {Op.LINEAR: ((1, 2),), Op.GATED_LINEAR: ((1, 3), (2, 4))}
"""(weight, bias) operand positions of the ops whose weights a fusion may cut or reorder."""


def _reordered_linears(
    plain: set[Value],
    inits: Mapping[str, np.ndarray],
    index: Mapping[tuple[str, int, bytes], list[str]],
    graph: Graph,
) -> dict[Value, list[_Trace]]:
    """Traces of the Linears' weights (and biases) that are initializers with their columns
    permuted, the weights not in `plain` (traced as they are): found by the weight's columns,
    which real weights have all distinct; the bias is then the initializer of its size equal
    under the same permutation (a zero bias too, which equal bytes alone would trace
    unpermuted)."""
    out: dict[Value, list[_Trace]] = {}
    pairs = [
        (n.inputs[i], n.inputs[j] if len(n.inputs) > j and n.attr("has_bias") else None)
        for n in graph.nodes
        if n.op in _WEIGHT_PAIRS
        for i, j in _WEIGHT_PAIRS[n.op]
    ]
    # a moe's expert stacks and their biases: each its own columns (a fused gate_up stack cut
    # in halves, or interleaved as gpt-oss's, with each expert's matrix transposed or not)
    pairs += [(v, None) for n in graph.nodes if n.op is Op.MOE for v in n.inputs[1:]]
    for w, b in pairs:
        if w.const is None or w in plain or w.const.ndim < 2 or w in out:
            continue
        found = _permuted_columns(w.const, inits)
        if found is None:
            continue
        name, transposed, perm = found
        kind = "transpose, columns" if transposed else "columns"
        out[w] = [_Trace(w, name, kind, perm)]
        if b is not None and b.const is not None:
            cols = list(perm)  # the bias entry j is the initializer's entry perm[j]
            out[b] = [
                _Trace(b, m, "columns", perm)
                for m, arr in inits.items()
                if arr.ndim == 1
                and arr.dtype == b.const.dtype
                and arr.size > max(cols)
                and np.array_equal(arr[cols], b.const)
            ]
    return out


def _permuted_columns(
    w: np.ndarray, inits: Mapping[str, np.ndarray]
) -> tuple[str, bool, tuple[int, ...]] | None:
    """(initializer, transposed, columns) with w == init[..., columns] (or, transposed, the
    initializer with its last two axes swapped): its columns in another order (fuse-attention's
    q, k, v heads), or some of them (fuse-swiglu cuts a fused gate_up projection into one
    Linear per piece; fuse-moe cuts an expert stack [E, H, 2F] or [E, 2F, H] into its gate and
    up halves, or, gpt-oss's, into its even and odd columns). A column is w[..., j], every
    leading axis of it (each expert's column j of a stack)."""
    mine = [w[..., j].tobytes() for j in range(w.shape[-1])]
    for name, arr in inits.items():
        if arr.ndim != w.ndim or arr.dtype != w.dtype:
            continue
        for transposed, a in ((False, arr), (True, np.swapaxes(arr, -1, -2))):
            if a.shape[:-1] != w.shape[:-1] or a.shape[-1] < w.shape[-1]:
                continue
            where = {a[..., j].tobytes(): j for j in range(a.shape[-1])}
            perm = [where.get(col, -1) for col in mine]
            if -1 not in perm and len(set(perm)) == len(perm) and len(where) == a.shape[-1]:
                return name, transposed, tuple(perm)
    return None


def _to_initializer(g: np.ndarray, t: _Trace, shape: tuple[int, ...]) -> np.ndarray:
    transposed = t.transform.startswith("transpose")  # the last two axes swapped
    if t.columns:  # the constant's column j is the initializer's column t.columns[j]
        width = shape[-2] if transposed else shape[-1]
        back = np.zeros((*g.shape[:-1], width), g.dtype)
        back[..., list(t.columns)] = g
        g = back
    return (np.swapaxes(g, -1, -2) if transposed else g).reshape(shape)


def _rows(traces: list[_Trace]) -> list[list[_Trace]]:
    """Traces grouped by initializer; initializers sharing a constant grouped together."""
    group: dict[str, int] = {}
    by_const: dict[Value, list[str]] = {}
    for t in traces:
        by_const.setdefault(t.constant, []).append(t.initializer)
    parent: dict[str, str] = {}

    def root(n: str) -> str:
        while parent.get(n, n) != n:
            n = parent[n]
        return n

    for names in by_const.values():
        for n in names[1:]:
            parent[root(n)] = root(names[0])
    for t in traces:
        group.setdefault(root(t.initializer), len(group))
    rows: list[list[_Trace]] = [[] for _ in group]
    for t in traces:
        rows[group[root(t.initializer)]].append(t)
    return rows


# ---------------------------------------------------------------- finite differences


def _sample(size: int, n: int, g: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if size <= n:
        return np.arange(size)
    uniform = rng.choice(size, n - n // 2, replace=False)
    weight = np.abs(g.reshape(-1)).astype(np.float64)
    weight[uniform] = 0.0
    k = min(n // 2, int(np.count_nonzero(weight)))
    big = rng.choice(size, k, replace=False, p=weight / weight.sum()) if k else uniform[:0]
    return np.sort(np.concatenate([uniform, big]))


def _central(
    ort: OrtWithWeights,
    feeds: Mapping[str, np.ndarray],
    loss: Loss,
    members: tuple[str, ...],
    coords: np.ndarray,
    step: float,
    chosen: tuple[np.ndarray, ...] = (),
) -> np.ndarray:
    """d loss / d w[coord] for each coord, perturbing every member at once; NaN where w ± h
    changes any token's top-k choice from `chosen` (the routers' choices at the unperturbed
    weights, `OrtWithWeights.choices`): there the loss is another branch's, not the smooth one
    whose derivative the gradient (the router's choice held) is."""
    work = {m: ort.weights[m].copy() for m in members}
    flat = {m: w.reshape(-1) for m, w in work.items()}
    out = np.empty(len(coords))
    first = flat[members[0]]
    for i, j in enumerate(coords):
        base = {m: f[j] for m, f in flat.items()}
        sides = []
        crossed = False
        for sign in (1.0, -1.0):
            for m, f in flat.items():
                f[j] = base[m] + f.dtype.type(sign * step)
            outputs, choices = ort.run_with_choices(feeds, work)
            crossed = crossed or _changed(choices, chosen)
            sides.append((loss(outputs), float(first[j])))
        for m, f in flat.items():
            f[j] = base[m]
        # divided by the step taken, as the weight's dtype rounded w ± h
        out[i] = np.nan if crossed else (sides[0][0] - sides[1][0]) / (sides[0][1] - sides[1][1])
    return out


def _changed(choices: tuple[np.ndarray, ...], chosen: tuple[np.ndarray, ...]) -> bool:
    """Whether any router chose other experts (as a set per token: the order of the k does
    not change the loss's branch) than `chosen` (none watched: False)."""
    return bool(chosen) and any(
        not np.array_equal(np.sort(a, axis=-1), np.sort(b, axis=-1))
        for a, b in zip(choices, chosen, strict=True)
    )


STEPS = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2)  # h, absolute; the first pair tried is (1e-3, 3e-3)


def _differences(
    ort: OrtWithWeights,
    feeds: Mapping[str, np.ndarray],
    loss: Loss,
    members: tuple[str, ...],
    coords: np.ndarray,
    tol: float,
    chosen: tuple[np.ndarray, ...] = (),
) -> tuple[np.ndarray, np.ndarray]:
    """Each coordinate's derivative and its noise (both absolute). Every coordinate gets
    h = 3e-4, 1e-3 and 3e-3 first: where the three agree to within tol/10 of the tensor's largest
    derivative, their median and their spread (three steps, because two steps that both cross a
    ReLU's kink agree with each other and not with the derivative: OPT's fc1 and v_proj rows). The others get the whole ladder — smaller
    steps where ReLU kinks or curvature spoil 1e-3, larger ones where the rounding of fp32
    onnxruntime's loss (~1e-7 of it) swamps a small gradient — and take the three consecutive
    steps that agree best: their median, and their spread as the noise (three, not two, so that
    one lucky agreement does not pass for a clean estimate).

    A step whose w ± h changes a router's top-k choice (`_central` with `chosen`) is left out:
    a coordinate whose first three include one takes the ladder's best three consecutive steps
    that change none, and one with no such three is NaN (left out of the row, counted)."""
    fds = np.full((len(STEPS), len(coords)), np.nan)
    first = [STEPS.index(3e-4), STEPS.index(1e-3), STEPS.index(3e-3)]
    for k in first:
        fds[k] = _central(ort, feeds, loss, members, coords, STEPS[k], chosen)
    est = np.median(fds[first], axis=0)
    noise = fds[first].max(axis=0) - fds[first].min(axis=0)
    middle = np.abs(fds[first[1]])
    scale = float(np.max(middle, initial=0.0, where=~np.isnan(middle)))
    unsure = ~(noise <= 0.1 * tol * scale)  # a NaN (a step that changed a choice) too
    if unsure.any():
        for k in range(len(STEPS)):
            if k not in first:
                fds[k, unsure] = _central(
                    ort, feeds, loss, members, coords[unsure], STEPS[k], chosen
                )
        triples = np.stack([fds[k : k + 3, unsure] for k in range(len(STEPS) - 2)])
        spread = triples.max(axis=1) - triples.min(axis=1)
        spread[np.isnan(spread)] = np.inf
        best = np.argmin(spread, axis=0)
        cols = np.arange(int(unsure.sum()))
        est[unsure] = np.median(triples[best, :, cols], axis=1)
        noise[unsure] = spread[best, cols]
        none = np.isinf(noise)
        est[none], noise[none] = np.nan, np.nan
    return est, noise


def check_gradients(
    model_path: str | os.PathLike[str],
    graph: Graph,
    feeds: Mapping[str, np.ndarray],
    precision: Precision = Precision.FP32,
    *,
    samples: int = 200,
    seed: int = 0,
    fault: str | None = None,
) -> GradCheck:
    """Check the gradient of `graph` (the fused graph, with its weights) on `feeds` against
    central finite differences of onnxruntime on `model_path` (the file `graph` came from),
    `samples` coordinates per initializer; see the module docstring."""
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    loss = choose_loss(graph, feeds, seed)
    consts = weights(graph)
    ours, grads = value_and_grad(graph, feeds, loss, consts, precision, fault)
    # mixed: the same gradient in fp32 (the same fault), to measure the precision's own error
    exact = None
    if precision == Precision.MIXED:
        exact = value_and_grad(graph, feeds, loss, consts, Precision.FP32, fault)[1]
    ort = OrtWithWeights(model_path)
    outputs, chosen = ort.run_with_choices(feeds)  # the routers' choices, if any
    theirs = loss(outputs)
    ort64 = float64_session(model_path, feeds)
    if isinstance(ort64, OrtWithWeights) and _changed(ort64.run_with_choices(feeds)[1], chosen):
        # its differences would be another branch's than the gradient's (float32's choice)
        ort64 = "its routers choose other experts than float32's at these weights"
    traces = trace_weights(consts, ort.weights, graph)
    rows = []
    for group in _rows(traces):
        members = tuple(dict.fromkeys(t.initializer for t in group))
        shape = ort.weights[members[0]].shape
        if any(ort.weights[m].shape != shape for m in members):
            continue  # not a deduplicated copy: left untraced below
        g = _row_gradient(grads, group, shape)
        coords = _sample(g.size, samples, g, rng)
        fd, gaps = _differences(ort, feeds, loss, members, coords, RESOLUTION, chosen)
        mine = g.reshape(-1)[coords]
        # mixed: the same coordinates of the fp32 gradient, to measure the precision's share
        g32 = None if exact is None else _row_gradient(exact, group, shape).reshape(-1)[coords]
        traced = tuple(
            f"%{t.constant.name}" + ("" if t.transform == "identity" else f" ({t.transform})")
            for t in group
            if t.initializer == members[0]
        )
        m = ~np.isnan(fd)  # the rest: every step changed some token's top-k choice
        if m.any():
            row = _judge(
                members, tuple(shape), traced, mine[m], fd[m], gaps[m],
                None if g32 is None else g32[m], abs(theirs),
            )  # fmt: skip
            row = _enough_measured(replace(row, routing_excluded=int(np.count_nonzero(~m))))
        else:
            row = _unmeasured(members, tuple(shape), traced, len(coords))
        if isinstance(ort64, OrtWithWeights) and row.status != "passed":
            # every sampled coordinate: float64's step is 300 times smaller than fp32's least
            row = _judge_in_float64(row, ort64, feeds, loss, coords, mine, theirs, g32, chosen)
            row = _enough_measured(row)
        rows.append(row)
    in_rows = {m for r in rows for m in r.initializers}
    candidates = [
        n
        for n, w in ort.weights.items()
        if n not in in_rows and w.size > 1 and n not in ort.frequencies
    ]
    positional = tuple(n for n in ort.weights if n not in in_rows and n in ort.frequencies)
    untraced: list[str] = []
    off_path: list[str] = []
    for n in candidates:
        (untraced if _moves_loss(ort, feeds, loss, n, theirs) else off_path).append(n)
    missed = untraced_weight_slots(graph, {t.constant for t in traces})
    buffers: tuple[str, ...] = ()
    not_trained: tuple[str, ...] = ()
    if not missed:  # every weight the program trains is traced: the rest it holds as constants
        not_trained = tuple(n for n in untraced if n in ort.tables)
        buffers = tuple(n for n in untraced if n not in ort.tables)
        untraced = []
    return GradCheck(
        passed=not any(r.status == "failed" for r in rows)
        and not untraced
        and any(r.passed for r in rows),
        precision=precision, loss_kind=loss.kind, loss=ours, loss_onnxruntime=theirs,
        rows=tuple(rows), untraced=tuple(untraced), off_path=tuple(off_path),
        positional=positional, buffers=buffers, not_trained=not_trained, samples=samples,
        seed=seed, seconds=time.perf_counter() - start, fault=fault,
        float64=ort64 if isinstance(ort64, str) else "available", routers=len(ort.choices),
    )  # fmt: skip


_WEIGHT_SLOTS: Mapping[Op, tuple[int, ...] | None] = {
    Op.LINEAR: None, Op.GATED_LINEAR: None, Op.LM_HEAD: None, Op.LAYER_NORM: None,
    Op.RMS_NORM: None, Op.MOE: None, Op.MATMUL: None, Op.GEMM: None, Op.EMBEDDING: (1,),
}  # fmt: skip
"""The operands the compiled program trains as weights (None: every float constant operand;
EMBEDDING: its first table, the one read at the token ids — a further table may be a lookup
at constant positions that the frontend folded, held as a constant like the others below).
A float constant anywhere else (a rotary table, an attention's bias operand or ALiBi slopes, a
folded lookup) is data the program holds, not a weight it trains."""


def untraced_weight_slots(graph: Graph, traced: set[Value]) -> tuple[str, ...]:
    """The float constants in a weight slot (`_WEIGHT_SLOTS`) of `graph` that trace to no
    initializer: a weight the program trains whose gradient the check cannot map back."""
    out: dict[str, None] = {}
    for n in graph.nodes:
        slots = _WEIGHT_SLOTS.get(n.op, ())
        for i, v in enumerate(n.inputs):
            if slots is not None and i not in slots:
                continue
            if v.const is not None and v.type.dtype.is_float and v.type.size > 1:
                if v not in traced:
                    out[v.name] = None
    return tuple(out)


def _row_gradient(
    grads: Mapping[Value, np.ndarray], group: list[_Trace], shape: tuple[int, ...]
) -> np.ndarray:
    """A row's gradient, shaped as its initializer: the sum over the constants traced to it."""
    g = np.zeros(shape, np.float64)
    for c in dict.fromkeys(t.constant for t in group):
        t = next(t for t in group if t.constant is c)
        g += _to_initializer(grads[c], t, shape)
    return g


def _norm_rel(d: np.ndarray, ref: np.ndarray) -> float:
    """||d|| / ||ref|| (0 when both are zero, inf when only ref is)."""
    n = float(np.linalg.norm(ref))
    m = float(np.linalg.norm(d))
    return m / n if n > 0 else (0.0 if m == 0 else float("inf"))


def _judge(
    members: tuple[str, ...],
    shape: tuple[int, ...],
    traced: tuple[str, ...],
    mine: np.ndarray,
    fd: np.ndarray,
    gaps: np.ndarray,
    fp32: np.ndarray | None,
    loss_magnitude: float,
) -> GradRow:
    """One row's figures and verdict against fp32 finite differences (the module docstring's
    rules): passed, failed, or unchecked where the differences cannot resolve it. `fp32`: in
    mixed, our fp32 gradient at the same coordinates (None in fp32)."""
    err = compare(members[0], mine, fd)
    scale = float(np.max(np.abs(fd))) if fd.size else 0.0
    noise = float(np.max(gaps)) / scale if scale > 0 else 0.0
    # beyond: by how much each coordinate misses its finite difference's own uncertainty
    # (twice the spread of the steps it came from), the worst relative to the tensor's scale
    miss = np.abs(mine - fd) - 2 * gaps
    beyond = float(np.max(miss, initial=0.0)) / scale if scale > 0 else 0.0
    ratio = _norm_rel(mine, fd) if scale > 0 else 1.0
    arithmetic = 0.0 if fp32 is None or scale == 0 else _norm_rel(mine - fp32, fd)
    row = GradRow(
        members, shape, traced, len(mine), err.max_rel_err, err.pcc, noise, beyond, scale,
        passed=False, norm_ratio=ratio, rel_err=_norm_rel(mine - fd, fd) if scale > 0 else 0.0,
        resolution=_norm_rel(gaps, fd) if scale > 0 else 0.0, arithmetic=arithmetic,
    )  # fmt: skip
    if scale == 0:  # no step moved fp32's loss: ours must be too small to move it either
        ok = float(np.max(np.abs(mine), initial=0.0)) * STEPS[-1] <= _F32_EPS * loss_magnitude
        status = "passed" if ok else "failed"
    elif row.noisy or row.resolution > RESOLUTION:
        # unresolved: a miss beyond the differences' own spread still fails; anything else is
        # not seen, so not passed (a spread of three steps understates tiny gradients' error)
        clear = err.max_rel_err > RESOLUTION + 3 * noise or abs(ratio - 1) > 3 * row.resolution
        status = "failed" if clear else "unchecked"
    elif fp32 is None:  # fp32
        ok = beyond <= TOLERANCE[Precision.FP32]["max_rel_err"] and row.rel_err <= row.bound
        status = "passed" if ok else "failed"
    else:
        ok = err.pcc >= TOLERANCE[Precision.MIXED]["pcc"] and abs(ratio - 1) <= row.bound
        status = "passed" if ok else "failed"
    return replace(row, passed=status == "passed", status=status)


H_FLOAT64 = 1e-5  # float64's loss is exact to ~1e-16: one small step, no ladder


def _judge_in_float64(
    row: GradRow,
    ort64: OrtWithWeights,
    feeds: Mapping[str, np.ndarray],
    loss: Loss,
    coords: np.ndarray,
    mine: np.ndarray,
    fp32_loss: float,
    fp32: np.ndarray | None = None,
    chosen: tuple[np.ndarray, ...] = (),
) -> GradRow:
    """`row` judged again by central differences of the float64 session at the same
    coordinates: passes when max_rel_err and the whole tensor's relative error are both at most
    FLOAT64_TOLERANCE, with no allowance for noise; in mixed (`fp32`: our fp32 gradient at the
    same coordinates), when the PCC is at least TOLERANCE's and the whole tensor's relative
    error at most FLOAT64_TOLERANCE + 2 x arithmetic (||g_mixed - g_fp32|| / ||fd||: the
    precision's own share, measured). A row whose
    float64 gradient is too small for the largest fp32 step to move fp32's loss (OPT's key bias,
    truly zero) keeps its fp32 verdict: our fp32 gradient's rounding is all max_rel_err would
    measure there. It measures every sampled coordinate, the fp32 steps' left out too; one
    whose step changes a router's choice (`chosen`) is left out and counted in
    `routing_excluded`; when every one does, the row keeps its fp32 verdict."""
    fd = _central(ort64, feeds, loss, row.initializers, coords, H_FLOAT64, chosen)
    measured = ~np.isnan(fd)
    if not measured.any():
        return row
    left_out = int(np.count_nonzero(~measured))
    fd, mine = fd[measured], mine[measured]
    fp32 = None if fp32 is None else fp32[measured]
    scale = float(np.max(np.abs(fd))) if fd.size else 0.0
    if scale * STEPS[-1] <= _F32_EPS * abs(fp32_loss):
        return row
    err = compare(row.name, mine, fd)
    rel = _norm_rel(mine - fd, fd)
    arithmetic = 0.0 if fp32 is None else _norm_rel(mine - fp32, fd)
    if fp32 is None:
        passed = max(err.max_rel_err, rel) <= FLOAT64_TOLERANCE
    else:
        ok = rel <= FLOAT64_TOLERANCE + 2 * arithmetic
        passed = err.pcc >= TOLERANCE[Precision.MIXED]["pcc"] and ok
    return replace(
        row, max_rel_err=err.max_rel_err, pcc=err.pcc, noise=0.0, beyond_noise=err.max_rel_err,
        max_grad=scale, passed=passed, reference="float64 FD", norm_ratio=_norm_rel(mine, fd),
        rel_err=rel, resolution=0.0, arithmetic=arithmetic, sampled=int(fd.size),
        routing_excluded=left_out, status="passed" if passed else "failed",
    )  # fmt: skip


def _unmeasured(
    members: tuple[str, ...], shape: tuple[int, ...], traced: tuple[str, ...], left_out: int
) -> GradRow:
    """A row none of whose sampled coordinates could be measured (every step changed some
    token's top-k choice): unchecked."""
    return GradRow(
        members, shape, traced, 0, 0.0, 0.0, 0.0, 0.0, 0.0, passed=False,
        routing_excluded=left_out, status="unchecked",
    )  # fmt: skip


def _enough_measured(row: GradRow) -> GradRow:
    """A row that passed on fewer coordinates than the routers' choices left out of it is
    unchecked, not passed: what remains is not the sample drawn, but its part far from every
    router's decision. (A failure on the measured ones stands.)"""
    if row.status == "passed" and row.routing_excluded > row.sampled:
        return replace(row, passed=False, status="unchecked")
    return row


def _moves_loss(
    ort: OrtWithWeights, feeds: Mapping[str, np.ndarray], loss: Loss, name: str, base: float
) -> bool:
    """Whether scaling initializer `name` by 1.01 and shifting it by 0.01 changes the loss."""
    w = ort.weights[name]
    moved = (w * 1.01 + 0.01).astype(w.dtype)
    return bool(loss(ort.run(feeds, {name: moved})) != base)


__all__ = ["TOLERANCE", "GradCheck", "GradRow", "check_gradients", "trace_weights"]
