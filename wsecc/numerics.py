"""Numerics against onnxruntime: reference runs, generated inputs, error metrics.

Metrics, per output: max_abs_err = max|y − r|; max_rel_err = max|y − r| / max|r| (relative to
the reference's largest magnitude, so near-zero entries do not make it meaningless); PCC, the
Pearson correlation of the flattened tensors.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wsecc.errors import WseccError
from wsecc.ir.core import DType, Graph, Op, Value

# Tolerances per precision (what `wsecc.sim.functional` emulates for each: its module doc). Where
# each bound comes from, as measured by the functional simulator against onnxruntime (the six
# samples at 2x16, the 33 tiny HF exports of tests/hf_exports.py (bench/bench_hf_numerics.py) at 2x16 and 1x7 with padded and
# all-ones masks, the corpus graphs that compile, GPT-2 small and BERT-base at 1x128):
#   fp32   max rel err 1e-5: the requirement. Measured <= 7.2e-7 on the small models, 1.6e-6 and
#          2.2e-6 on GPT-2 small and BERT-base. On attention_opt and bert_3d_attention_opt the
#          reference itself (onnxruntime's contrib SkipLayerNormalization) is 1.3e-5 off exact
#          math; tests/test_models.py allows 3e-5 there.
#   mixed  PCC 0.999 and max rel err 3e-2. Measured PCC >= 0.99999 and max rel err <= 3.5e-3
#          (BERT-base; GPT-2 small 1.5e-3, the small models <= 2.4e-3): ~9x of margin for
#          deeper models, where fp16 storage rounding (2^-11 per tensor) compounds.
#   fp16   PCC 0.99 and max rel err 1e-1. Measured PCC >= 0.99998 and max rel err <= 1.0e-2
#          (BERT-base; GPT-2 small 8.5e-3, the small models <= 2.5e-3). Fp16 running sums lose
#          more with depth and width, hence the wider bound. The integer-weight corpus graphs above reach 0.05-0.10
#          (PCC 0.992-0.998): their residual, 274 +- 1, has an fp16 step of 0.25.
#   structure  the tiled program in fp32 against the reference interpreter (same ops, untiled):
#          max rel err 2e-5. Clean programs measure <= 5.3e-7 on the samples and the tests/data
#          exports at 2x16 (seed 7) and up to 1.03e-5 on attention_opt, whose layernorm input
#          (274 +- 1) cancels, so the summation order shows; the injected faults measure
#          3.6e-5 (BERT, drop_partial) to 6.5e-3 (GPT-2): 2e-5 sits between.
TOLERANCE = {
    "structure": {"max_rel_err": 2e-5},
    "fp32": {"max_rel_err": 1e-5},
    "mixed": {"pcc": 0.999, "max_rel_err": 3e-2},
    "fp16": {"pcc": 0.99, "max_rel_err": 1e-1},
}


@dataclass(frozen=True)
class OutputError:
    name: str
    max_abs_err: float
    max_rel_err: float
    pcc: float
    passed: bool


def compare(name: str, got: np.ndarray, ref: np.ndarray, precision: str = "fp32") -> OutputError:
    g = np.asarray(got, np.float64).reshape(-1)
    r = np.asarray(ref, np.float64).reshape(-1)
    if g.shape != r.shape:
        return OutputError(name, float("inf"), float("inf"), 0.0, False)
    if g.size == 0:
        return OutputError(name, 0.0, 0.0, 1.0, True)
    finite = np.isfinite(r) & np.isfinite(g)
    same_nonfinite = bool(
        np.all(
            (np.isfinite(r) == np.isfinite(g)) & (finite | (g == r) | (np.isnan(g) & np.isnan(r)))
        )
    )
    diff = np.abs(g[finite] - r[finite]) if finite.any() else np.zeros(1)
    scale = float(np.max(np.abs(r[finite]))) if finite.any() else 1.0
    abs_err = float(diff.max())
    rel_err = abs_err / scale if scale > 0 else abs_err
    if finite.sum() > 1 and np.std(g[finite]) > 0 and np.std(r[finite]) > 0:
        pcc = float(np.corrcoef(g[finite], r[finite])[0, 1])
    else:
        pcc = 1.0 if abs_err == 0 else 0.0
    tol = TOLERANCE[precision]
    passed = same_nonfinite and rel_err <= tol["max_rel_err"] and pcc >= tol.get("pcc", -1.0)
    return OutputError(name, abs_err, rel_err, pcc, passed)


def vocab_sizes(graph: Graph) -> dict[str, int]:
    """For each integer graph input used as gather indices into a table, the table's rows."""
    out: dict[str, int] = {}
    inputs = {v for v in graph.inputs}
    for n in graph.nodes:
        pairs: list[tuple[Value, Value]] = []
        if n.op is Op.GATHER and n.attr("axis") == 0:
            pairs = [(n.inputs[1], n.inputs[0])]
        elif n.op is Op.EMBEDDING:
            pairs = list(zip(n.inputs[0::2], n.inputs[1::2], strict=True))
        for ids, table in pairs:
            src = _through_casts(graph, ids)
            if src in inputs and table.is_const:
                out[src.name] = min(out.get(src.name, 1 << 62), table.type.shape[0])
    return out


def _through_casts(graph: Graph, v: Value) -> Value:
    prod = graph.producers()
    while v in prod and prod[v].op in (Op.CAST, Op.RESHAPE, Op.IDENTITY):
        v = prod[v].inputs[0]
    return v


def make_inputs(graph: Graph, *, seed: int = 0, padded: bool = True) -> dict[str, np.ndarray]:
    """Inputs for a numerics run: token ids within the vocabulary; masks 1 with, when `padded`,
    the last row right-padded by a quarter of the sequence; float inputs N(0, 1)."""
    rng = np.random.default_rng(seed)
    vocab = vocab_sizes(graph)
    feeds: dict[str, np.ndarray] = {}
    for v in graph.inputs:
        shape, dt = v.type.shape, v.type.dtype
        lname = v.name.lower()
        if dt.is_float:
            feeds[v.name] = rng.standard_normal(shape).astype(dt.numpy)
        elif "mask" in lname:
            m = np.ones(shape, dt.numpy)
            if padded and len(shape) == 2 and shape[1] > 1:
                m[-1, shape[1] - max(1, shape[1] // 4) :] = 0
            feeds[v.name] = m
        elif "type" in lname or "segment" in lname:
            hi = vocab.get(v.name, 2)
            feeds[v.name] = rng.integers(0, hi, shape).astype(dt.numpy)
        elif "position" in lname and len(shape) == 2:
            feeds[v.name] = np.broadcast_to(np.arange(shape[1]), shape).astype(dt.numpy)
        elif dt is DType.BOOL:
            feeds[v.name] = np.ones(shape, bool)
        else:
            hi = vocab.get(v.name, 100)
            feeds[v.name] = rng.integers(0, hi, shape).astype(dt.numpy)
    return feeds


def ort_run(path: str | os.PathLike[str], feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the ORIGINAL file in onnxruntime (graph optimizations off) — the reference.

    Raises WseccError (one line) when onnxruntime cannot load or run it: the file may be one
    wsecc compiles but onnxruntime does not support, so there is no reference to check against.
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    try:
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        wanted = {i.name for i in sess.get_inputs()}
        outs = sess.run(names, {k: v for k, v in feeds.items() if k in wanted})
    except MemoryError:
        raise
    except Exception as e:  # onnxruntime's own error types (Fail, InvalidGraph, ...)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise WseccError(
            f"onnxruntime cannot run {Path(path).name} for the numerics reference ({first}); "
            "compile with --no-validate to skip the check"
        ) from e
    return dict(zip(names, outs, strict=True))


def _sinusoid_frequencies(graph: Any) -> frozenset[str]:
    """Initializers whose every path to an output passes through Cos or Sin: the frequencies of
    a position encoding (a rotary embedding's inv_freq, a non-persistent buffer nobody trains),
    whose values the fused graph holds only as the tables they produce."""
    users: dict[str, list[Any]] = {}
    for n in graph.node:
        for x in n.input:
            users.setdefault(x, []).append(n)
    outputs = {o.name for o in graph.output}

    def only_through_sinusoids(name: str) -> bool:
        stack, seen, reached = [name], set(), False
        while stack:
            v = stack.pop()
            if v in outputs:
                return False
            for n in users.get(v, []):
                if n.op_type in ("Cos", "Sin"):
                    reached = True
                elif id(n) not in seen:
                    seen.add(id(n))
                    stack.extend(n.output)
        return reached

    return frozenset(
        t.name
        for t in graph.initializer
        if t.data_type in (1, 10, 11) and only_through_sinusoids(t.name)
    )


class OrtWithWeights:
    """The ORIGINAL file in onnxruntime (graph optimizations off, one thread: runs repeat
    bit for bit) with its float initializers listed as graph inputs, so that one session runs the
    model at any weights: `run(feeds, weights)` overrides the initializers named in `weights`.

    onnxruntime lets a feed override an initializer that is also a graph input, and does not
    constant-fold such an initializer (tests/test_gradcheck.py checks that an override
    changes the outputs). Weights stored as external data are refused: the gradient check is
    for small models.

    `float64=True` runs the file widened to double (`_widen_to_float64`): `weights` are then
    float64, float feeds are cast to float64 when fed, and the outputs are float64. Raises
    WseccError when onnxruntime cannot load the file (widened or not)."""

    def __init__(self, path: str | os.PathLike[str], *, float64: bool = False) -> None:
        import onnx
        import onnxruntime as ort
        from onnx import numpy_helper

        model = onnx.load(str(path), load_external_data=False)
        if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
            raise WseccError(
                f"{Path(path).name}: the gradient check needs weights stored in the file "
                "(this one keeps them as external data)"
            )
        if float64:
            model = _widen_to_float64(model)
        g = model.graph
        self.frequencies = _sinusoid_frequencies(g)
        listed = {i.name for i in g.input}
        self.weights: dict[str, np.ndarray] = {}
        for t in g.initializer:
            arr = numpy_helper.to_array(t)
            if arr.dtype.kind != "f":
                continue
            self.weights[t.name] = arr
            if t.name not in listed:
                g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, arr.shape))
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.log_severity_level = 3
        so.intra_op_num_threads = 1
        try:
            self._session = ort.InferenceSession(
                model.SerializeToString(), so, providers=["CPUExecutionProvider"]
            )
        except Exception as e:  # onnxruntime's own error types
            raise WseccError(
                f"onnxruntime cannot load {Path(path).name}"
                f"{' in float64' if float64 else ''} with its weights as inputs ({e})"
            ) from e
        # the feeds' float arrays are cast to the input's type (float64 when widened)
        self._inputs = {
            i.name: np.float64 if i.type == "tensor(double)" else None
            for i in self._session.get_inputs()
        }
        self.output_names = [o.name for o in self._session.get_outputs()]

    def run(
        self, feeds: Mapping[str, np.ndarray], weights: Mapping[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        args = {
            k: v.astype(wide) if (wide := self._inputs[k]) and v.dtype.kind == "f" else v
            for k, v in feeds.items()
            if k in self._inputs
        }
        args.update(weights or {})
        outs = self._session.run(self.output_names, args)
        return dict(zip(self.output_names, outs, strict=True))


def _widen_to_float64(model: Any) -> Any:
    """`model` (an onnx.ModelProto) with its float32 computation in float64: local functions
    inlined, then float initializers, float tensor attributes (Constant, ConstantOfShape),
    Cast(to=FLOAT) and float graph inputs and outputs made DOUBLE, in subgraphs too; value_info
    dropped (onnxruntime infers it again). Other types (integers, float16) are left alone. No op
    is rewritten: one onnxruntime has no double kernel for (Erf, Gelu) makes the session fail."""
    import onnx
    import onnx.inliner
    from onnx import TensorProto, numpy_helper

    def wide(t: onnx.TensorProto) -> onnx.TensorProto:
        return numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name)

    def widen(g: onnx.GraphProto) -> None:
        for vi in [*g.input, *g.output]:
            if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
                vi.type.tensor_type.elem_type = TensorProto.DOUBLE
        del g.value_info[:]
        for t in g.initializer:
            if t.data_type == TensorProto.FLOAT:
                t.CopyFrom(wide(t))
        for n in g.node:
            for a in n.attribute:
                if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                    a.i = TensorProto.DOUBLE
                elif a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                    a.t.CopyFrom(wide(a.t))
                elif a.type == onnx.AttributeProto.GRAPH:
                    widen(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for sub in a.graphs:
                        widen(sub)
            if n.op_type == "Constant" and n.attribute[0].name in ("value_float", "value_floats"):
                a = n.attribute[0]
                value = a.f if a.name == "value_float" else list(a.floats)
                n.ClearField("attribute")
                n.attribute.append(
                    onnx.helper.make_attribute("value", numpy_helper.from_array(np.array(value)))
                )

    model = onnx.inliner.inline_local_functions(model)
    widen(model.graph)
    return model


def float64_session(
    path: str | os.PathLike[str], feeds: Mapping[str, np.ndarray]
) -> OrtWithWeights | str:
    """`OrtWithWeights(path, float64=True)`, run once on `feeds` to be sure onnxruntime can;
    or, when it cannot load or run the widened file, why not in a short string (onnxruntime has
    no double Erf, say: BERT's GELU)."""
    try:
        session = OrtWithWeights(path, float64=True)
        session.run(feeds)
    except MemoryError:
        raise
    except Exception as e:  # WseccError from loading, onnxruntime's own types from running
        cause = e.__cause__ or e
        text = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        return re.sub(r"^\[ONNXRuntimeError\] : \d+ : ", "", text)[:160]
    return session


def verdict_line(n: Mapping[str, Any]) -> str:
    """A numerics verdict (`NumericsResult.to_json()`, the report's `numerics`) in one line:
    'FAIL: mixed PASS (worst logits: ...) vs onnxruntime X; structure fp32 FAIL (...) vs the
    reference interpreter'."""

    def part(label: str, outputs: list[dict[str, Any]], passed: bool) -> str:
        text = f"{label} {'PASS' if passed else 'FAIL'}"
        if outputs:
            w = max(outputs, key=lambda o: o["max_rel_err"])
            text += f" (worst {w['name']}: max rel err {w['max_rel_err']:.2e}, PCC {w['pcc']:.6f})"
        return text

    line = f"{'PASS' if n['passed'] else 'FAIL'}: " + part(
        n["precision"], n["outputs"], n.get("precision_passed", n["passed"])
    )
    line += f" vs {n['reference']}"
    s = n.get("structure")
    if s:
        line += "; " + part("structure fp32", s["outputs"], s["passed"])
        line += " vs the reference interpreter"
    return line + (f"; fault {n['fault']} injected" if n.get("fault") else "")
