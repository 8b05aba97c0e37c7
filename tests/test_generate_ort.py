"""onnxruntime's greedy generation (`wsecc.check.numerics.ort_generate`, issue 17 item 5): the file run
step by step, a with-past file with its cache fed back, a no-past file recomputing the whole
sequence. Both exports of one torch model must generate the same tokens: that is the check that
the past is handled right."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import ORT_CORPUS, SAMPLES

from wsecc.check.numerics import file_generation, ort_generate
from wsecc.errors import WseccError

STEPS = 8
TWINS = Path(__file__).resolve().parent / "data" / "generation"
PAIRS = [  # (with past, the same model without)
    ("gpt2_optimum_past.onnx", "gpt2_optimum.onnx"),
    ("opt_optimum_past.onnx", "opt_optimum.onnx"),
    ("llama_optimum_past.onnx", "llama_optimum.onnx"),
    ("llama_optimum_merged.onnx", "llama_optimum.onnx"),
    ("gpt2_dynamo_past.onnx", "gpt2_optimum.onnx"),
    ("llama_dynamo_past.onnx", "llama_optimum.onnx"),
    ("llama_dynamo_past_nomask.onnx", "llama_optimum.onnx"),
]


def prompt(batch: int = 2, length: int = 5, vocab: int = 256, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).integers(3, vocab, (batch, length)).astype(np.int64)


@pytest.mark.parametrize("past,no_past", PAIRS, ids=[p for p, _ in PAIRS])
def test_with_past_and_no_past_exports_generate_the_same(past, no_past):
    ids, logits = ort_generate(SAMPLES / past, prompt(), STEPS)
    ref_ids, ref_logits = ort_generate(TWINS / no_past, prompt(), STEPS)
    assert ids.shape == (2, STEPS) and ids.dtype == np.int64
    assert logits.shape == (2, STEPS, 256) and logits.dtype == np.float32
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(logits, ref_logits, rtol=1e-4, atol=1e-5)
    # each step's token is the argmax of its logits, the first from the prompt
    np.testing.assert_array_equal(ids, np.argmax(logits, axis=-1))


def test_the_cache_changes_what_is_generated():
    """A cache fed back wrong (dropped: every step sees one token) generates other tokens; the
    comparison above would catch it."""
    path = SAMPLES / "gpt2_optimum_past.onnx"
    ids, _ = ort_generate(path, prompt(), STEPS)
    alone = [ort_generate(path, ids[:, i : i + 1], 1)[0][:, 0] for i in range(STEPS - 1)]
    assert not np.array_equal(np.stack(alone, 1), ids[:, 1:])


def test_the_file_generation_interface_is_read_when_not_given():
    path = SAMPLES / "llama_optimum_past.onnx"
    gen = file_generation(path)
    assert gen is not None
    a = ort_generate(path, prompt(1), 3, gen)
    b = ort_generate(path, prompt(1), 3)
    np.testing.assert_array_equal(a[0], b[0])
    assert file_generation(TWINS / "llama_optimum.onnx") is None


@pytest.mark.parametrize("past,no_past", PAIRS[:3], ids=[p for p, _ in PAIRS[:3]])
def test_generation_matches_transformers_greedy_generate(past, no_past):
    from hf_exports import _recipe

    recipe = _recipe()  # skips without torch and transformers
    import torch

    family = recipe.GENERATION_FAMILIES[past.split("_")[0]]
    model = recipe.build_model(family.model_class, family.config_class, family.config)
    p = prompt()
    with torch.no_grad():
        out = model.generate(
            torch.from_numpy(p),
            attention_mask=torch.ones(p.shape, dtype=torch.int64),
            max_new_tokens=STEPS,
            min_new_tokens=STEPS,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=0,
        )
    ids, logits = ort_generate(SAMPLES / past, p, STEPS)
    np.testing.assert_array_equal(ids, out.sequences[:, p.shape[1] :].numpy())
    scores = torch.stack(out.logits, 1).numpy()
    np.testing.assert_allclose(logits, scores, rtol=1e-3, atol=1e-4)


def test_a_no_past_file_with_a_fixed_sequence_is_one_error(tmp_path):
    import onnx

    model = onnx.load(TWINS / "gpt2_optimum.onnx")
    for i in model.graph.input:
        i.type.tensor_type.shape.dim[1].dim_value = 5
    fixed = tmp_path / "fixed.onnx"
    onnx.save(model, fixed)
    with pytest.raises(WseccError, match="fixed sequence length of 5.*needs a dynamic sequence"):
        ort_generate(fixed, prompt(), 2)


def test_a_4d_mask_is_one_error():
    with pytest.raises(WseccError, match="feeds a \\[batch, keys\\] attention mask"):
        ort_generate(ORT_CORPUS / "gpt2_megatron.onnx", prompt(1, vocab=10), 2)


def test_a_file_that_takes_one_token_per_run_gets_the_prompt_token_by_token():
    """onnxruntime's gpt2_past.onnx: input_ids [batch, 1], a stacked past [2, B, H, P, d], its
    output the hidden state (read as the logits: 4 wide). Generating after the prompt and one
    more token continues exactly where generating after the prompt left off."""
    path = ORT_CORPUS / "gpt2_past.onnx"
    p = np.array([[1, 2, 3], [3, 2, 1]])
    ids, logits = ort_generate(path, p, 3)
    assert ids.shape == (2, 3) and logits.shape == (2, 3, 4)
    more_ids, more_logits = ort_generate(path, np.concatenate([p, ids[:, :1]], 1), 2)
    np.testing.assert_array_equal(more_ids, ids[:, 1:])
    np.testing.assert_allclose(more_logits, logits[:, 1:], rtol=1e-5, atol=1e-6)
