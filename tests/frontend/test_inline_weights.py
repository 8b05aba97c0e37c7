"""Weights stored inline are left in the file when it is parsed (`wsecc.frontend.inline`): the
frontend imports the same graph, and a bad file gets the same error, as when onnx.load parses
the whole file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import SAMPLES
from onnx import TensorProto, helper, numpy_helper

from wsecc.errors import FrontendError
from wsecc.frontend import inline, load
from wsecc.frontend.onnx import import_model
from wsecc.ir.printer import format_graph

BIG = 1 << 16  # load._MAP_BYTES: inline weights above this are left in the file


def _whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make load_model parse every file with onnx.load, as it did before inline.py."""
    monkeypatch.setattr(load, "parse_leaving_weights", lambda path, min_bytes: None)


def _error(path: Path) -> str:
    with pytest.raises(FrontendError) as e:
        load.load_model(path, lazy_weights=True)
    return str(e.value)


@pytest.mark.parametrize(
    "name",
    [
        "gpt2_legacy_op17.onnx",
        "bert_dynamo.onnx",
        "phi3_dynamo.onnx",
        "mixtral_dynamo.onnx",
        "gptoss_dynamo.onnx",
    ],
)
def test_the_same_graph_and_constants_as_onnx_load(name, monkeypatch):
    path = SAMPLES / name
    assert inline.parse_leaving_weights(path, BIG + 1) is not None  # the sample has some
    lazy, lazy_info = import_model(path, batch=1, seq=8)
    _whole(monkeypatch)
    eager, eager_info = import_model(path, batch=1, seq=8)
    assert format_graph(lazy) == format_graph(eager)
    assert lazy_info == eager_info

    def consts(g):
        return {v.name: v.const for n in g.nodes for v in n.inputs if v.const is not None}

    a, b = consts(lazy), consts(eager)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k


def test_the_left_out_bytes_are_the_weights(tmp_path):
    """Putting each left-out weight's bytes back gives onnx.load's model, byte for byte."""
    path = SAMPLES / "gpt2_legacy_op17.onnx"
    model, left = inline.parse_leaving_weights(path, BIG + 1)
    data = path.read_bytes()
    for k, w in left.items():
        assert not model.graph.initializer[k].HasField("raw_data")
        model.graph.initializer[k].raw_data = data[w.offset : w.offset + w.length]
    whole = onnx.load(str(path), load_external_data=False)
    assert model.SerializeToString() == whole.SerializeToString()


def _cuts(size: int) -> list[int]:
    return sorted({0, 1, 7, 100, 4000, size // 3, size // 2, size - 5000, size - 1})


def test_a_truncated_file_gets_the_same_error(tmp_path, monkeypatch):
    """Cut anywhere (in the header, the nodes, a weight's bytes): the error is onnx.load's."""
    data = (SAMPLES / "gpt2_legacy_op17.onnx").read_bytes()
    lazy, whole = [], []
    for n in _cuts(len(data)):
        p = tmp_path / f"cut{n}.onnx"
        p.write_bytes(data[:n])
        lazy.append(_error(p))
    _whole(monkeypatch)
    for n in _cuts(len(data)):
        whole.append(_error(tmp_path / f"cut{n}.onnx"))
    assert lazy == whole


def test_a_corrupt_file_gets_the_same_outcome(tmp_path, monkeypatch):
    """Bytes overwritten at spread positions: the same error, or the same graph."""
    data = (SAMPLES / "gpt2_legacy_op17.onnx").read_bytes()
    rng = np.random.default_rng(0)
    spots = sorted(int(x) for x in rng.integers(0, len(data) - 8, 24))

    def outcome(p: Path) -> str:
        try:
            return format_graph(import_model(p, batch=1, seq=8)[0])
        except FrontendError as e:
            return f"error: {e}"

    paths = []
    for k, at in enumerate(spots):
        bad = bytearray(data)
        bad[at : at + 8] = b"\xff" * 8
        paths.append(tmp_path / f"bad{k}.onnx")
        paths[-1].write_bytes(bytes(bad))
    lazy = [outcome(p) for p in paths]
    _whole(monkeypatch)
    assert lazy == [outcome(p) for p in paths]


def _one_weight_model(raw: bytes, dims: list[int], dtype: int = TensorProto.FLOAT) -> bytes:
    w = TensorProto(name="w", data_type=dtype, dims=dims, raw_data=raw)  # any length
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, dims[0]])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g", [x], [y], [w]
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return m.SerializeToString()


def test_a_weight_of_the_wrong_length_gets_the_same_error(tmp_path, monkeypatch):
    raw = np.ones((128, 256), np.float32).tobytes()[:-4]  # one element short
    p = tmp_path / "short.onnx"
    p.write_bytes(_one_weight_model(raw, [128, 256]))
    lazy = _error(p)
    assert "holds 131068 bytes but its dims [128, 256] need 131072" in lazy
    _whole(monkeypatch)
    assert _error(p) == lazy


def test_files_the_walk_does_not_read_are_parsed_whole(tmp_path):
    """Two raw_data fields in one tensor (protobuf keeps the last), or two graph fields (it
    merges them): left to onnx.load, which reads them as protobuf does."""
    first = np.zeros(128 * 256, np.float32).tobytes()
    last = np.arange(128 * 256, dtype=np.float32).tobytes()
    model = onnx.load_from_string(_one_weight_model(first, [128, 256]))
    tensor = model.graph.initializer[0].SerializeToString() + _field(9, last)
    graph = onnx.GraphProto()
    graph.CopyFrom(model.graph)
    graph.ClearField("initializer")
    rest = onnx.ModelProto()
    rest.CopyFrom(model)
    rest.ClearField("graph")
    p = tmp_path / "twice.onnx"
    graph_bytes = graph.SerializeToString() + _field(5, tensor)
    p.write_bytes(rest.SerializeToString() + _field(7, graph_bytes))
    assert inline.parse_leaving_weights(p, BIG + 1) is None
    assert (
        numpy_helper.to_array(load.load_model(p, lazy_weights=True).graph.initializer[0]).tobytes()
        == last
    )

    nodes = onnx.GraphProto()
    nodes.node.extend(model.graph.node)
    others = onnx.GraphProto()
    others.CopyFrom(model.graph)
    others.ClearField("node")
    split = tmp_path / "two_graphs.onnx"
    split.write_bytes(
        rest.SerializeToString()
        + _field(7, nodes.SerializeToString())
        + _field(7, others.SerializeToString())
    )
    assert inline.parse_leaving_weights(split, BIG + 1) is None
    merged = load.load_model(split, lazy_weights=True)
    assert merged.graph.node[0].name == "mm"
    assert numpy_helper.to_array(merged.graph.initializer[0]).tobytes() == first


def test_a_weight_of_a_type_that_is_not_mapped_is_read_in(tmp_path):
    """uint16 (not a type the frontend maps): load_model reads its bytes in, as onnx.load."""
    raw = np.arange(256 * 256, dtype=np.uint16).tobytes()
    p = tmp_path / "u16.onnx"
    p.write_bytes(_one_weight_model(raw, [256, 256], TensorProto.UINT16))
    t = load.load_model(p, lazy_weights=True).graph.initializer[0]
    assert t.data_location == TensorProto.DEFAULT and t.raw_data == raw


def _field(number: int, value: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def test_load_model_keeps_inline_weights_inline_unless_asked(tmp_path):
    """A model read by default saves again as a whole file (no reference to where it came
    from); only the compile's frontend (`lazy_weights=True`) leaves its weights in the file."""
    src = SAMPLES / "gpt2_legacy_op17.onnx"
    model = load.load_model(src)
    assert all(t.data_location == TensorProto.DEFAULT for t in model.graph.initializer)
    onnx.save(model, str(tmp_path / "again.onnx"))
    again = onnx.load(str(tmp_path / "again.onnx"))
    assert again.SerializeToString() == onnx.load(str(src)).SerializeToString()
    lazy = load.load_model(src, lazy_weights=True)
    assert any(t.data_location == TensorProto.EXTERNAL for t in lazy.graph.initializer)


@pytest.mark.filterwarnings("error")  # onnx's reference evaluator warned on a mapped weight
@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.onnx")), ids=lambda p: p.stem)
def test_the_default_sequence_is_the_same_from_a_lazy_load(path):
    """`default_seq` runs the position subgraph in onnx's reference evaluator with the small
    initializers it reads: a weight left in the file is read in for it (`as_stored`), as a
    whole parse held it, and one over 1 MiB is left out, as before."""
    from wsecc.frontend.bind import default_seq

    assert default_seq(load.load_model(path, lazy_weights=True)) == default_seq(
        load.load_model(path)
    )


def test_as_stored_is_the_tensor_onnx_load_gives():
    from wsecc.frontend.common import as_stored

    path = SAMPLES / "gpt2_legacy_op17.onnx"
    lazy, whole = load.load_model(path, lazy_weights=True), onnx.load(str(path))
    for a, b in zip(lazy.graph.initializer, whole.graph.initializer, strict=True):
        assert as_stored(a).SerializeToString() == b.SerializeToString()


def test_a_graph_field_of_another_wire_type_is_left_to_onnx_load(tmp_path, monkeypatch):
    """A ModelProto.graph key with the varint wire type after the real graph: not walked."""
    p = tmp_path / "odd.onnx"
    p.write_bytes((SAMPLES / "gpt2_legacy_op17.onnx").read_bytes() + _varint(7 << 3) + b"\x01")
    assert inline.parse_leaving_weights(p, BIG + 1) is None

    def outcome() -> str:
        try:
            return format_graph(import_model(p, batch=1, seq=8)[0])
        except FrontendError as e:
            return f"error: {e}"

    lazy = outcome()
    _whole(monkeypatch)
    assert outcome() == lazy
