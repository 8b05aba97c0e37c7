"""Regenerate the committed mixture-of-experts samples: ``python samples/make_moe_samples.py``.

Needs ``pip install -e '.[export]'`` (torch 2.13.0 CPU, transformers 5). Nothing is downloaded:
each model is built from a transformers config with random weights, every parameter perturbed
by N(0, 0.02) from a fixed seed (``make_samples.perturb_``), and exported with the dynamo
exporter (``torch.onnx.export(dynamo=True)``), batch and sequence dynamic, then checked against
torch with onnxruntime as ``make_samples.py`` checks its files.

transformers' default ("eager") experts loop over the experts a batch hits, which no exporter
can write; ``model.set_experts_implementation("batched_mm")`` computes every (token, chosen
expert) pair as a batched matmul of the gathered expert weights instead, which the dynamo
exporter writes as TopK, Gather of the expert weight stacks and MatMul (samples/README.md
lists the pattern).

The tiny models: 2 layers, hidden 64, 4 heads (2 K/V heads), 4 experts, top 2, vocabulary 256.

Llama 4's rotary embedding multiplies complex tensors (torch.polar, view_as_complex), which the
dynamo exporter does not translate ("No ONNX function found for aten.unsqueeze ... complex-valued
input", torch 2.13): its sample exports within `wsecc.frontend.hf_export.real_rotary`, the same
rotation in real arithmetic (the check against torch runs the unpatched model).
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_samples import (  # noqa: E402  (a script beside this one, not a package)
    SAMPLES_DIR,
    Family,
    build_family,
    check_export,
    export_sample,
    make_inputs,
)

from wsecc.frontend.hf_export import real_rotary  # noqa: E402

_TINY = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=256,
    max_position_embeddings=128,
    use_cache=False,
    bos_token_id=0,
    eos_token_id=0,
    pad_token_id=0,
)
_IDS_MASK = ("input_ids", "attention_mask")
_LM = {"logits": ("batch", "sequence")}

MOE_FAMILIES: dict[str, Family] = {
    # softmax router over 4 experts, top 2, the kept probabilities renormalised; SwiGLU experts
    "mixtral": Family(
        "MixtralForCausalLM",
        "MixtralConfig",
        dict(_TINY, intermediate_size=96, num_local_experts=4, num_experts_per_tok=2),
        _IDS_MASK,
        _LM,
    ),
    # as Mixtral, plus a shared SwiGLU expert scaled by sigmoid(x w_shared_gate); top-k
    # probabilities not renormalised (norm_topk_prob=False, Qwen2-MoE's default)
    "qwen2moe": Family(
        "Qwen2MoeForCausalLM",
        "Qwen2MoeConfig",
        dict(
            _TINY,
            intermediate_size=96,
            moe_intermediate_size=48,
            shared_expert_intermediate_size=96,
            num_experts=4,
            num_experts_per_tok=2,
            decoder_sparse_step=1,
            mlp_only_layers=[],
        ),
        _IDS_MASK,
        _LM,
    ),
    # top 2 of 4 renormalised (norm_topk_prob, as Qwen3-30B-A3B), no shared expert; layer 1 a
    # dense SwiGLU MLP (mlp_only_layers): dense and MoE layers interleaved; per-head q/k RMSNorm
    "qwen3moe": Family(
        "Qwen3MoeForCausalLM",
        "Qwen3MoeConfig",
        dict(
            _TINY,
            head_dim=16,
            intermediate_size=96,
            moe_intermediate_size=48,
            num_experts=4,
            num_experts_per_tok=2,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[1],
        ),
        _IDS_MASK,
        _LM,
    ),
    # Llama 4 text: layer 0 dense (SwiGLU of intermediate_size_mlp), layer 1 MoE (sigmoid top-1
    # router scaling the expert's input, every expert computing every token, a shared expert);
    # layer 0 chunked attention (chunks of 8) with rotary and q/k L2 norm, layer 1 full
    # attention without rotary (NoPE; its temperature tuning is 1 below floor_scale 8192)
    "llama4": Family(
        "Llama4ForCausalLM",
        "Llama4TextConfig",
        dict(
            _TINY,
            head_dim=16,
            intermediate_size=48,
            intermediate_size_mlp=96,
            num_local_experts=4,
            num_experts_per_tok=1,
            interleave_moe_layer_step=2,
            no_rope_layers=[1, 0],
            attention_chunk_size=8,
            use_qk_norm=True,
        ),
        _IDS_MASK,
        _LM,
    ),
    # gpt-oss: router Linear with bias, top 2 of 4, softmax over the two kept logits; experts
    # with biases, gate/up interleaved in one stack, the clamped SwiGLU (alpha 1.702, limit 7);
    # attention with per-head sinks and bias, layer 0 a sliding window of 8 tokens, layer 1 full
    "gptoss": Family(
        "GptOssForCausalLM",
        "GptOssConfig",
        dict(
            _TINY,
            head_dim=16,
            intermediate_size=48,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=8,
            layer_types=["sliding_attention", "full_attention"],
            rope_parameters={"rope_type": "default", "rope_theta": 150000.0},
        ),
        _IDS_MASK,
        _LM,
    ),
}

MOE_SAMPLES = {
    "mixtral": "mixtral",
    "qwen2moe": "qwen2moe",
    "qwen3moe": "qwen3moe",
    "gptoss": "gptoss",
    "llama4": "llama4",
}
"""The committed samples (the suite compiles every bundled sample)."""


def build_moe_family(family: Family) -> torch.nn.Module:
    """`make_samples.build_family` with the experts computed as batched matmuls."""
    module = build_family(family)
    module.model.set_experts_implementation("batched_mm")
    return module


def main(out_dir: Path = SAMPLES_DIR, only: tuple[str, ...] = ()) -> None:
    versions = (torch.__version__, transformers.__version__, onnx.__version__)
    print("torch {}, transformers {}, onnx {}".format(*versions))
    out_dir.mkdir(parents=True, exist_ok=True)
    stems = {stem: stem for stem in only} if only else MOE_SAMPLES
    for stem, family_name in stems.items():
        family = MOE_FAMILIES[family_name]
        module = build_moe_family(family)
        example = make_inputs(family, 2, 16, pad_last_row=True)
        path = out_dir / f"{stem}_dynamo.onnx"
        with real_rotary():
            export_sample(module, family, example, path, "dynamo")
        # and the model as transformers runs it (Llama 4's complex rotary) against the export
        worst = max(d for _, d in check_export(module, family, path))
        print(f"    unpatched torch against ORT: max |diff| {worst:.1e}")


if __name__ == "__main__":
    # optional: an output folder, then the stems to make
    args = sys.argv[1:]
    main(Path(args[0]) if args else SAMPLES_DIR, tuple(args[1:]))
