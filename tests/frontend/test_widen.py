"""A float type read as a wider one in the ONNX model (`wsecc.frontend.widen`): model text in,
model text out. The same model built in float16 and widened prints as the model built in
float32; float32 widened to float64 prints as the float64 one; a model without the type is
left alone."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.printer import to_text

from wsecc.frontend.widen import read_as_float32, widen_floats

FLOAT16, BFLOAT16 = TensorProto.FLOAT16, TensorProto.BFLOAT16
FLOAT, DOUBLE = TensorProto.FLOAT, TensorProto.DOUBLE


def _model(elem: int, *, value_info: bool = False) -> onnx.ModelProto:
    """Every place a float type lives in a transformer export, in `elem`: a graph input and
    output, an initializer, Constant and ConstantOfShape tensors, Cast(to=...), EyeLike's
    dtype, an If's branches (a Constant, a branch output); optionally a value_info."""
    dtype = helper.tensor_dtype_to_np_dtype(elem)

    def tensor(values: list[float], name: str = "") -> TensorProto:
        return numpy_helper.from_array(np.array(values, dtype), name)

    def info(name: str, shape: list[int]) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, elem, shape)

    yes = helper.make_graph(
        [helper.make_node("Constant", [], ["a"], value=tensor([1, 1]))], "yes", [], [info("a", [2])]
    )
    no = helper.make_graph([helper.make_node("Identity", ["k"], ["b"])], "no", [], [info("b", [2])])
    shape = numpy_helper.from_array(np.array([2, 2], np.int64))
    counts = numpy_helper.from_array(np.array([[1, 2], [3, 4]], np.int64))
    nodes = [
        helper.make_node("Constant", [], ["k"], value=tensor([0.5, 0.25])),
        helper.make_node("Constant", [], ["shape"], value=shape),
        helper.make_node("Constant", [], ["counts"], value=counts),
        helper.make_node("ConstantOfShape", ["shape"], ["ones"], value=tensor([1])),
        helper.make_node("EyeLike", ["x"], ["eye"], dtype=elem),
        helper.make_node("Cast", ["counts"], ["n"], to=elem),
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Sum", ["xw", "ones", "eye", "n"], ["s"]),
        helper.make_node("If", ["c"], ["picked"], then_branch=yes, else_branch=no),
        helper.make_node("Add", ["s", "picked"], ["y"]),
    ]
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    graph = helper.make_graph(
        nodes, "g", [info("x", [2, 2]), c], [info("y", [2, 2])], [tensor([[1, 2], [3, 4]], "w")],
        value_info=[info("xw", [2, 2])] if value_info else None,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("narrow", [FLOAT16, BFLOAT16])
def test_a_half_precision_model_reads_as_its_float32_twin(narrow: int) -> None:
    model, widened = read_as_float32(_model(narrow, value_info=True))
    assert widened == (helper.tensor_dtype_to_string(narrow).removeprefix("TensorProto.").lower(),)
    assert to_text(model) == to_text(_model(FLOAT))  # value_info dropped: inferred again


def test_float32_widens_to_float64_the_same_way() -> None:
    model = widen_floats(_model(FLOAT), FLOAT, DOUBLE)
    assert model is not None and to_text(model) == to_text(_model(DOUBLE))


def test_a_float32_model_is_left_alone() -> None:
    """Does not fire: nothing in float16 or bfloat16, nothing changed (value_info kept)."""
    original = _model(FLOAT, value_info=True)
    model, widened = read_as_float32(original)
    assert model is original and widened == ()
    assert to_text(model) == to_text(_model(FLOAT, value_info=True))
    assert widen_floats(_model(FLOAT16), DOUBLE, FLOAT) is None


def test_widening_float32_widens_what_makes_float32_by_default() -> None:
    """Constant's value_float(s), ConstantOfShape without a value and RandomNormal without a
    dtype make float32: widened to float64, they make float64."""
    nodes = [
        helper.make_node("Constant", [], ["two"], value_float=2.0),
        helper.make_node("Constant", [], ["pair"], value_floats=[1.0, 3.0]),
        helper.make_node("ConstantOfShape", ["shape"], ["zeros"]),
        helper.make_node("RandomNormal", [], ["noise"], shape=[2]),
        helper.make_node("Sum", ["x", "two", "pair", "zeros", "noise"], ["y"]),
    ]
    shape = numpy_helper.from_array(np.array([2], np.int64), "shape")
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", FLOAT, [2])],
        [helper.make_tensor_value_info("y", FLOAT, [2])], [shape],
    )  # fmt: skip
    model = widen_floats(helper.make_model(graph), FLOAT, DOUBLE)
    assert model is not None
    text = to_text(model.graph)
    assert "float" not in text.replace("double", "")
    assert "two = Constant <value: tensor = double {2}>" in text
    assert "pair = Constant <value: tensor = double[2] {1,3}>" in text
    assert "zeros = ConstantOfShape <value: tensor = double[1] {0}>" in text
    assert "dtype: int = 11" in text


def _with_function(to: int) -> onnx.ModelProto:
    """y = local.Half(x): a local function whose body casts to `to`."""
    half = helper.make_function(
        "local", "Half", ["v"], ["h"], [helper.make_node("Cast", ["v"], ["h"], to=to)],
        [helper.make_opsetid("", 17)],
    )  # fmt: skip
    graph = helper.make_graph(
        [helper.make_node("Half", ["x"], ["y"], domain="local")], "g",
        [helper.make_tensor_value_info("x", FLOAT, [2])],
        [helper.make_tensor_value_info("y", to, [2])],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    return helper.make_model(graph, functions=[half], opset_imports=opsets)


def test_a_local_function_is_inlined_then_widened() -> None:
    """A function's Cast may take its type from the caller: functions are inlined first, and
    only when there is something to widen (inlining copies the model)."""
    model, widened = read_as_float32(_with_function(FLOAT16))
    assert widened == ("float16",) and not model.functions
    assert [(n.op_type, n.attribute[0].i) for n in model.graph.node] == [("Cast", FLOAT)]
    original = _with_function(TensorProto.INT64)
    model, widened = read_as_float32(original)
    assert model is original and widened == () and original.functions
