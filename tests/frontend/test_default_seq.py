"""With no --seq, the sequence is the model's own context where the graph shows it (its position
table, less the offset its lookup adds), else 128; the bindings line says where each came from."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SAMPLES

from wsecc.cli import main
from wsecc.frontend.onnx import DEFAULT_SEQ, default_seq, import_model, load_model

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.mark.parametrize(
    ("path", "context"),
    [
        (DATA / "gpt2_pos64.onnx", 64),  # 64 rows, read at positions 0..63
        (DATA / "opt_pos64.onnx", 64),  # 66 rows, read at positions 2..65
        (SAMPLES / "bert_dynamo.onnx", 128),
        # 130 rows read at positions 2..129: RoBERTa's numbering, from padding id 1 + 1, of the
        # tokens that are not padding (fed ids of 1, every token was padding: 130 was bound)
        (SAMPLES / "mpnet_legacy_op17.onnx", 128),
    ],
)
def test_the_sequence_defaults_to_the_models_context(path, context):
    graph, info = import_model(path, batch=1)
    (seq_name,) = [k for k in info.bindings if k != "batch"]
    assert info.bindings[seq_name] == context
    assert info.sources[seq_name] == "position table"
    assert f"{seq_name}={context} (position table)" in info.describe_bindings()
    assert graph.inputs[0].type.shape[1] == context


def test_an_embed_layer_normalization_position_table_bounds_the_sequence():
    """onnxruntime's fused EmbedLayerNormalization reads its 64-row position_embedding: the
    default is 64, which its Megatron mask [B, 1, 64, 64] also needs (128 would not fit it)."""
    _, info = import_model(DATA / "onnxruntime" / "gpt2_megatron_opt_skiplayernorm.onnx", batch=1)
    assert info.bindings["seq_len"] == 64 and info.sources["seq_len"] == "position table"


def test_seq_given_wins_and_says_so():
    _, info = import_model(DATA / "gpt2_pos64.onnx", batch=1, seq=16)
    assert "=16 (--seq)" in info.describe_bindings()


def test_without_a_position_table_the_default_is_128(tmp_path):
    """A graph with no learned positions (here: the GPT-2 sample with its table's Gather fed
    by an input of token ids) binds the default."""
    import onnx

    model = load_model(SAMPLES / "gpt2_legacy_op17.onnx")
    for n in model.graph.node:  # read every 2-D table with the token ids themselves
        if n.op_type == "Gather" and n.input[0].endswith("wpe.weight"):
            n.input[1] = "input_ids"
    assert default_seq(model) == (DEFAULT_SEQ, "default")
    onnx.save(model, tmp_path / "no_positions.onnx")
    assert default_seq(load_model(tmp_path / "no_positions.onnx"))[0] == DEFAULT_SEQ


def test_compile_with_no_options_works_on_a_short_context(tmp_path, capsys):
    """A GPT-2 with 64 positions: the default compile binds 64, not 128 (which would index past
    its table), and says where 64 came from."""
    out = tmp_path / "out"
    assert main(["compile", str(DATA / "gpt2_pos64.onnx"), "-o", str(out), "--placer", "greedy",
                 "--json"]) == 0  # fmt: skip
    report = (out / "report.json").read_text()
    assert '"sequence": 64' in report
