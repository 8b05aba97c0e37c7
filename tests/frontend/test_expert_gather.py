"""The frontend's size guard and a mixture-of-experts expert gather (`_expert_gather`): the
gathered expert weights, which no pass materializes, pass the guard on a computed tensor's
logical size; anything else over it, and any bound input over the process's memory share,
is still refused in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import wsecc.frontend.bind as bind
import wsecc.frontend.convert as convert
from wsecc.cli import main
from wsecc.frontend.onnx import import_model
from wsecc.ir.core import Op

HIDDEN, FFN, EXPERTS, TOP_K = 8, 16, 4, 2
SEQ = 2048
GATHERED = SEQ * TOP_K * FFN * HIDDEN * 4  # bytes of f32[4096, 16, 8]: 2 MiB
GUARD = 1 << 20  # the lowered guard: under GATHERED, over every other computed tensor


def _moe_model(
    path: Path, *, stack_as_input: bool, read_by: str = "MatMul", gather: str = "GatherND"
) -> str:
    """x[1, seq, H] routed to its top-2 of 4 experts; each kept expert's weight [F, H] is
    gathered by the ids (GatherND, as the dynamo exporter writes Mixtral's batched experts, or
    Gather on a flat id vector) and multiplies the token: the gathered weights are
    f32[seq * 2, F, H]."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq", HIDDEN])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    rng = np.random.default_rng(0)
    router = numpy_helper.from_array(rng.standard_normal((HIDDEN, EXPERTS), np.float32), "wr")
    stack = numpy_helper.from_array(
        rng.standard_normal((EXPERTS, FFN, HIDDEN), np.float32), "experts"
    )
    consts = [
        numpy_helper.from_array(np.array([-1, HIDDEN], np.int64), "flat"),
        numpy_helper.from_array(
            np.array([-1, 1] if gather == "GatherND" else [-1], np.int64), "column"
        ),
        numpy_helper.from_array(np.array([TOP_K], np.int64), "k"),
        numpy_helper.from_array(np.array([1, TOP_K, 1], np.int64), "pairs"),
        numpy_helper.from_array(np.array([-1, HIDDEN, 1], np.int64), "token_column"),
    ]
    nodes = [
        helper.make_node("Reshape", ["x", "flat"], ["tokens"], name="flatten"),
        helper.make_node("MatMul", ["tokens", "wr"], ["logits"], name="router"),
        helper.make_node("TopK", ["logits", "k"], ["top", "ids"], name="topk", axis=-1),
        helper.make_node("Reshape", ["ids", "column"], ["ids1"], name="ids_column"),
        helper.make_node(gather, ["experts", "ids1"], ["w"], name="gather_experts"),
        helper.make_node("Unsqueeze", ["tokens", "one"], ["t1"], name="unsq"),
        helper.make_node("Expand", ["t1", "pairs"], ["t2"], name="expand"),
        helper.make_node("Reshape", ["t2", "token_column"], ["t3"], name="token_col"),
    ]
    consts.append(numpy_helper.from_array(np.array([1], np.int64), "one"))
    if read_by == "MatMul":
        nodes.append(helper.make_node("MatMul", ["w", "t3"], ["y"], name="bmm"))
    else:
        nodes.append(helper.make_node(read_by, ["w", "w"], ["y"], name="not_a_matmul"))
    inputs, inits = [x], [router, *consts]
    if stack_as_input:
        inputs.append(
            helper.make_tensor_value_info("experts", TensorProto.FLOAT, [EXPERTS, FFN, HIDDEN])
        )
    else:
        inits.append(stack)
    graph = helper.make_graph(nodes, "moe", inputs, [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    out = path / "moe.onnx"
    onnx.save_model(model, str(out))
    return str(out)


@pytest.mark.parametrize("gather", ["GatherND", "Gather"])
@pytest.mark.parametrize("stack_as_input", [False, True], ids=["constants", "weight-inputs"])
def test_the_expert_gather_passes_the_guard_without_being_allocated(
    tmp_path, monkeypatch, stack_as_input, gather
):
    monkeypatch.setattr(convert, "MAX_ACTIVATION_BYTES", GUARD)
    path = _moe_model(tmp_path, stack_as_input=stack_as_input, gather=gather)
    weights = "inputs" if stack_as_input else "constants"
    graph, _ = import_model(path, seq=SEQ, weights=weights)
    op = Op.GATHER_ND if gather == "GatherND" else Op.GATHER
    (gather_node,) = [n for n in graph.nodes if n.op is op]
    (out,) = gather_node.outputs
    assert out.type.shape == (SEQ * TOP_K, FFN, HIDDEN)
    assert out.type.size * 4 == GATHERED > GUARD
    assert not out.is_const  # typed, never computed


def test_the_same_gather_read_by_anything_else_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(convert, "MAX_ACTIVATION_BYTES", GUARD)
    path = _moe_model(tmp_path, stack_as_input=False, read_by="Add")
    code = main(["check", path, "--seq", str(SEQ)])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "'gather_experts' (GATHER_ND) would make a f32[4096, 16, 8] tensor" in lines[0]


def test_a_bound_input_over_the_memory_share_is_still_refused(tmp_path, monkeypatch, capsys):
    """x at 2,048 tokens is 64 KiB: with one tensor's share of memory at 32 KiB, the input
    that would really be allocated is refused before anything is, the gather or not."""
    monkeypatch.setattr(convert, "MAX_ACTIVATION_BYTES", GUARD)
    monkeypatch.setattr(bind, "tensor_budget_bytes", lambda: 32 << 10)
    path = _moe_model(tmp_path, stack_as_input=True)
    code = main(["check", path, "--seq", str(SEQ), "--weights", "inputs"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert f"input 'x' of shape [1, {SEQ}, {HIDDEN}]" in lines[0]
