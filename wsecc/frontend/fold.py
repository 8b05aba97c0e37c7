"""Folding: constants and shape subgraphs folded by onnxscript's optimizer (`fold`); the weights
are taken out of the model and returned beside it."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
import onnx_ir.passes as ir_passes_base
from onnx import TensorProto, helper

from wsecc.errors import FrontendError


def fold(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[TensorProto]]:
    """Fold constants and shape subgraphs with onnxscript's optimizer (shapes must be static).

    Returns the folded model without its weights, and the weights it still reads (pass both
    to `to_graph`). Weights take no part in shape arithmetic, so the optimizer sees them as
    typed graph inputs: it never copies gigabytes of parameters, and a lookup into a weight
    table (the position embedding at constant positions) stays a lookup rather than becoming
    a new constant. The weights are *taken out* of `model` (moving them is free; copying them
    back into a protobuf costs about a second per 500 MB).
    """
    m, big = _without_weights(model)
    weights = {t.name: t for t in big}
    try:
        with _quiet_libraries():
            folded = _fold_constants(m)
    except Exception as e:  # the optimizer raises a variety of errors on hostile graphs
        raise FrontendError(
            f"constant folding failed ({_causes(e)}); the graph is malformed or uses ONNX "
            "features wsecc does not support"
        ) from None
    keep = [i for i in folded.graph.input if i.name not in weights]
    inputs = {i.name for i in model.graph.input} - set(weights)
    extra = [i.name for i in keep if i.name not in inputs]
    if extra:  # the optimizer renames a weight or input that a graph output passes through
        raise FrontendError(
            f"a graph output passes {extra[0].removesuffix('_orig')!r} through unchanged; "
            "wsecc compiles outputs computed by the graph only"
        )
    used = {x for n in folded.graph.node for x in n.input} | {o.name for o in folded.graph.output}
    del folded.graph.input[:]
    folded.graph.input.extend(keep)
    return folded, [t for name, t in weights.items() if name in used]


_WEIGHT_ELEMS = 1024  # initializers larger than this are weights, not shape data
_FOLD_INPUT_ELEMS = 1 << 20
"""Operands the folder evaluates. The weights are typed inputs while it runs, never operands,
so what this admits is computed data: rotary tables, cos(positions · inv_freq) over
[1, S, head_dim] (Llama at S 2048, head dim 128: 262,144 elements), which at the weights'
1,024 stayed as Cos and Sin of a computed tensor."""


def _causes(e: BaseException) -> str:
    """The optimizer wraps the real error in pass errors: name the node it was folding (if
    any) and the innermost cause."""
    chain: list[BaseException] = []
    while e is not None and len(chain) < 20:
        chain.append(e)
        e = e.__cause__ or e.__context__  # type: ignore[assignment]
    node = next((str(x) for x in chain if "for node" in str(x)), "")
    root = chain[-1]
    text = f"{type(root).__name__}: {str(root).splitlines()[0] if str(root) else ''}"
    return f"{node.splitlines()[0]}: {text}" if node else text


@contextlib.contextmanager
def _quiet_libraries() -> Iterator[None]:
    """onnxscript and onnx_ir log (and warn) about the graphs they fold, on stderr; wsecc turns
    what matters into its own one-line errors, so their records are dropped while they run."""
    loggers = [logging.getLogger(name) for name in ("onnxscript", "onnx_ir")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _fold_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxscript's `optimize` without its pattern rewriter: inline, fold constants (with node
    shape inference) and drop dead nodes to a fixed point, then lift and deduplicate constants.

    The rewriter's rules are left out: our passes match semantics themselves, and its matcher
    walks the whole graph per candidate (quadratic: 50 s of the 55 s of folding GPT-2 large).
    """
    import onnx_ir as ir
    import onnx_ir.passes.common as common
    from onnxscript.optimizer._constant_folding import FoldConstantsPass  # not in its __all__

    m = ir.serde.deserialize_model(model)
    ir.passes.Sequential(
        common.InlinePass(),
        ir.passes.PassManager(
            [
                FoldConstantsPass(
                    shape_inference=True,
                    input_size_limit=_FOLD_INPUT_ELEMS,
                    output_size_limit=1 << 20,
                    should_fold=_should_fold,
                ),
                _ScatterOverEverything(),
                common.RemoveUnusedNodesPass(),
            ],
            steps=3,
            early_stop=True,
        ),
        common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common.LiftSubgraphInitializersToMainGraphPass(),
        common.DeduplicateInitializersPass(),
        common.CommonSubexpressionEliminationPass(),
        common.OutputFixPass(),
        common.NameFixPass(),
    )(m)
    return ir.serde.serialize_model(m)


def _should_fold(node: Any) -> bool | None:
    """Fold a ConstantOfShape of a constant shape of at most _FOLD_INPUT_ELEMS elements; leave
    every other node to onnxscript's rules (None).

    onnxscript keeps ConstantOfShape unfolded by default (a file stays small); wsecc needs its
    values: the Expand shapes `Where(Equal(shape, -1 * ConstantOfShape(...)), ...)` that decide
    whether a with-past Llama export's rotary positions fold, and OPT's causal mask,
    `Trilu(ConstantOfShape([S, S], min))`. Past _FOLD_INPUT_ELEMS (OPT beyond 1,024 tokens) the
    Trilu stays and is named as unsupported."""
    if node.op_type != "ConstantOfShape" or node.domain not in ("", "ai.onnx"):
        return None
    shape = node.inputs[0].const_value if node.inputs and node.inputs[0] is not None else None
    if shape is None:
        return None
    return int(np.prod(shape.numpy(), dtype=np.int64)) <= _FOLD_INPUT_ELEMS or None


def _scatter_over_everything(node: Any) -> list[int] | None:
    """The output shape of a ScatterND (no reduction) whose constant indices write every element
    of its data once, in row-major order, so that its output is its updates reshaped; else None.

    Such a scatter is how a sliced assignment over the whole tensor exports (OPT's
    `mask[..., :key_length] = mask[..., :key_length].masked_fill(...)`): with the sequence bound
    and an empty past, the slice is everything."""
    if node.op_type != "ScatterND" or node.domain not in ("", "ai.onnx") or len(node.inputs) < 3:
        return None
    data, indices = node.inputs[0], node.inputs[1]
    if node.attributes.get_string("reduction", "none") != "none" or indices is None:
        return None
    if indices.const_value is None or data is None or data.shape is None:
        return None
    if not data.shape.is_static():
        return None
    shape = [int(d) for d in data.shape.numpy()]
    idx = indices.const_value.numpy()
    k = idx.shape[-1] if idx.ndim else 0
    if not 1 <= k <= len(shape):
        return None
    lead = shape[:k]
    flat = idx.reshape(-1, k).astype(np.int64)
    if flat.shape[0] != int(np.prod(lead)) or np.any(flat < 0) or np.any(flat >= lead):
        return None
    starts = np.ravel_multi_index(tuple(flat.T), lead)
    return shape if np.array_equal(starts, np.arange(flat.shape[0])) else None


class _ScatterOverEverything(ir_passes_base.InPlacePass):
    """ScatterND(data, indices, updates) -> Reshape(updates, shape(data)) where the constant
    indices write every element once, in order (`_scatter_over_everything`)."""

    def call(self, model: Any) -> Any:
        import onnx_ir as ir

        modified = False
        for node in list(model.graph):
            shape = _scatter_over_everything(node)
            if shape is None:
                continue
            const = ir.node("Constant", [], {"value": ir.tensor(np.array(shape, np.int64))})
            reshape = ir.node("Reshape", [node.inputs[2], const.outputs[0]])
            reshape.outputs[0].name = node.outputs[0].name
            ir.convenience.replace_nodes_and_values(
                model.graph, node, [node], [const, reshape], node.outputs, reshape.outputs
            )
            modified = True
        return ir_passes_base.PassResult(model, modified)


def _elems(t: TensorProto) -> int:
    n = 1
    for d in t.dims:
        n *= d
    return n


def _without_weights(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[TensorProto]]:
    """A copy whose large initializers are typed graph inputs instead, and those initializers,
    taken out of `model` (which keeps its small ones; no tensor data is copied)."""
    graph = model.graph
    small = [t for t in graph.initializer if _elems(t) <= _WEIGHT_ELEMS]
    big = [t for t in graph.initializer if _elems(t) > _WEIGHT_ELEMS]
    del graph.initializer[:]
    graph.initializer.extend(small)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.input.extend(
        helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in big
    )
    return m, big


# ================================================================ conversion
