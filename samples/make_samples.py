"""Regenerate the committed sample ONNX exports: ``python samples/make_samples.py``.

Needs ``pip install -e '.[export]'`` (torch 2.13.0 CPU and transformers). Nothing is downloaded:
every model is built from a transformers config with random weights, and then EVERY parameter
is perturbed by N(0, 0.02) from a fixed seed. Without the perturbation every bias is 0 and every
LayerNorm is the identity, and value-dependent folding in the exporters (dynamo drops an all-zero
Gemm ``C``) produces graphs that no trained checkpoint ever gives.

This module is also the export recipe shared by ``tests/hf_exports.py`` (the tiny models of
eight Hugging Face families) and ``bench/export_models.py`` (real-size shapes): building a
perturbed model, exporting it with the legacy TorchScript exporter or the dynamo exporter, and
checking the export against torch with onnxruntime.
"""

from __future__ import annotations

import math
import shutil
import sys
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers

SAMPLES_DIR = Path(__file__).resolve().parent
SEED = 0
PERTURB_STD = 0.02
EXPORTERS = ("legacy14", "legacy17", "dynamo")
# Shapes every export is checked at: (batch, sequence, right-pad the last row by 4 tokens).
CHECK_SHAPES = ((2, 16, True), (1, 7, False))
MAX_ABS_DIFF = 1e-4


@dataclass(frozen=True)
class Family:
    """A transformers model class with a config, and the graph signature it is exported with.

    ``outputs`` maps each output name to the names of its dynamic dims, in order;
    ``unperturbed`` names parameters (by the end of their name) left as initialised: the zero
    QKV biases of an untrained model, which the exporters store once for every layer.
    """

    model_class: str
    config_class: str
    config: Mapping[str, object]
    inputs: tuple[str, ...]
    outputs: Mapping[str, tuple[str, ...]]
    unperturbed: tuple[str, ...] = ()

    @property
    def vocab_size(self) -> int:
        return int(self.config["vocab_size"])


_GPT2_TINY = dict(
    n_layer=2,
    n_embd=64,
    n_head=4,
    n_inner=256,
    vocab_size=1000,
    n_positions=128,
    use_cache=False,
    bos_token_id=0,  # the default 50256 is outside the tiny vocabulary
    eos_token_id=0,
)
_BERT_TINY = dict(
    num_hidden_layers=2,
    hidden_size=64,
    num_attention_heads=4,
    intermediate_size=256,
    vocab_size=1000,
    max_position_embeddings=128,
)
_LM = {"logits": ("batch", "sequence")}
_HIDDEN = {"last_hidden_state": ("batch", "sequence")}
_HIDDEN_POOLED = {"last_hidden_state": ("batch", "sequence"), "pooler_output": ("batch",)}
_IDS_MASK = ("input_ids", "attention_mask")
_IDS_MASK_TYPES = ("input_ids", "attention_mask", "token_type_ids")

# The tiny models: 2 layers, width 64, 4 heads, FFN 256, vocab 1000, 128 positions.
# no KV cache in the export; special tokens all id 0 (the random vocab has no real ones)
_NO_CACHE_TOKENS_0 = dict(use_cache=False, bos_token_id=0, eos_token_id=0, pad_token_id=0)

FAMILIES: dict[str, Family] = {
    "gpt2lm": Family("GPT2LMHeadModel", "GPT2Config", _GPT2_TINY, _IDS_MASK, _LM),
    "gpt2": Family("GPT2Model", "GPT2Config", _GPT2_TINY, _IDS_MASK, _HIDDEN),
    "gptneo": Family(
        "GPTNeoForCausalLM",
        "GPTNeoConfig",
        dict(
            num_layers=2,
            hidden_size=64,
            num_heads=4,
            intermediate_size=256,
            vocab_size=1000,
            max_position_embeddings=128,
            # Layer 0 global, layer 1 local. A window of 8 is shorter than the check sequence
            # (16), so the sliding-window mask really changes the result.
            attention_types=[[["global", "local"], 1]],
            window_size=8,
            use_cache=False,
        ),
        _IDS_MASK,
        _LM,
    ),
    "opt": Family(
        "OPTForCausalLM",
        "OPTConfig",
        dict(
            num_hidden_layers=2,
            hidden_size=64,
            num_attention_heads=4,
            ffn_dim=256,
            vocab_size=1000,
            max_position_embeddings=128,
            word_embed_proj_dim=64,
            use_cache=False,
        ),
        _IDS_MASK,
        _LM,
    ),
    "bert": Family("BertModel", "BertConfig", _BERT_TINY, _IDS_MASK_TYPES, _HIDDEN_POOLED),
    "bertseq": Family(
        "BertForSequenceClassification",
        "BertConfig",
        dict(_BERT_TINY, num_labels=2),
        _IDS_MASK_TYPES,
        {"logits": ("batch",)},
    ),
    "distilbert": Family(
        "DistilBertModel",
        "DistilBertConfig",
        dict(
            n_layers=2,
            dim=64,
            n_heads=4,
            hidden_dim=256,
            vocab_size=1000,
            max_position_embeddings=128,
        ),
        _IDS_MASK,
        _HIDDEN,
    ),
    "roberta": Family(
        "RobertaModel",
        "RobertaConfig",
        # RoBERTa numbers positions from padding_idx + 1 = 2, so 128 tokens need 130 rows
        # (roberta-base has 514 for 512 tokens).
        dict(_BERT_TINY, max_position_embeddings=130),
        _IDS_MASK,
        _HIDDEN_POOLED,
    ),
    # A learned relative position bias instead of absolute positions alone: the encoder looks
    # up Embedding(32 buckets, heads) at the bucket of each (query, key) distance, once, and
    # every layer adds it to its scores. Positions start at padding_idx + 1 = 2 (as RoBERTa's).
    "mpnet": Family(
        "MPNetModel",
        "MPNetConfig",
        dict(_BERT_TINY, max_position_embeddings=130, vocab_size=256),  # 256: a smaller file
        _IDS_MASK,
        _HIDDEN_POOLED,
    ),
    # ALiBi instead of position embeddings: scores in [B·heads, S, S] (baddbmm), biased by
    # slope_h × the key's position, the positions a cumsum of the attention mask.
    "bloom": Family(
        "BloomForCausalLM",
        "BloomConfig",
        dict(
            hidden_size=64,
            n_layer=2,
            n_head=4,
            vocab_size=1000,
            **_NO_CACHE_TOKENS_0,
        ),
        _IDS_MASK,
        _LM,
    ),
}

# The Llama family's pieces (issue 17): RMSNorm, rotary embeddings, SwiGLU, grouped-query
# attention. Llama rotates by halves (`rotate_half`), GPT-J pairs of neighbours
# (`rotate_every_two`, the interleaved form); GPT-J's rotary_dim is its head dim (16).
ROTARY_FAMILIES: dict[str, Family] = {
    "llama": Family(
        "LlamaForCausalLM",
        "LlamaConfig",
        dict(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=172,
            vocab_size=256,
            max_position_embeddings=128,
            **_NO_CACHE_TOKENS_0,
        ),
        _IDS_MASK,
        _LM,
    ),
    "gptj": Family(
        "GPTJForCausalLM",
        "GPTJConfig",
        dict(
            n_embd=64,
            n_layer=2,
            n_head=4,
            rotary_dim=16,
            n_inner=172,
            vocab_size=256,
            n_positions=128,
            use_cache=False,
            bos_token_id=0,
            eos_token_id=0,
        ),
        _IDS_MASK,
        _LM,
    ),
}

# Exported by the tests (tests/hf_exports.py), not committed samples: partial rotary (GPT-J-6B
# rotates 64 of its 256 head dims and passes the rest through: 8 of 16 here; GPT-NeoX/Pythia a
# quarter), and GPT-NeoX's fused query_key_value, laid out [heads, 3, head_dim] per token, with
# attention and MLP in parallel (the default) or one after the other.
ROTARY_FAMILIES["gptj_partial"] = replace(
    ROTARY_FAMILIES["gptj"], config=dict(ROTARY_FAMILIES["gptj"].config, rotary_dim=8)
)
ROTARY_FAMILIES["gptneox"] = Family(
    "GPTNeoXForCausalLM",
    "GPTNeoXConfig",
    dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=172,
        vocab_size=256,
        max_position_embeddings=128,
        rotary_pct=0.25,  # transformers 4; 5 calls it partial_rotary_factor
        partial_rotary_factor=0.25,
        use_parallel_residual=True,
        **_NO_CACHE_TOKENS_0,
    ),
    _IDS_MASK,
    _LM,
)
ROTARY_FAMILIES["gptneox_serial"] = replace(
    ROTARY_FAMILIES["gptneox"],
    config=dict(ROTARY_FAMILIES["gptneox"].config, use_parallel_residual=False),
)

# Issue 33: the families users bring that had no sample, 2 layers, width 64, vocab 256 (a file
# of a few hundred KB). Each shows a pattern the passes fuse as a general mechanism: q/k
# RMSNorm before rotary (Qwen3, OLMo 2 over the whole projection, Gemma 3), soft-capped scores
# (Gemma 2), GeGLU and the embedding scale (Gemma), a fused gate_up projection (Phi-3),
# parallel attention and MLP (Falcon, CodeGen), padding-derived positions (XLM-RoBERTa), a
# factorised embedding with a projection (ALBERT), erf-GeGLU and rotary in an encoder
# (ModernBERT), relative position buckets (T5's encoder), disentangled attention (DeBERTa-v2).
_DECODER_TINY = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    intermediate_size=172,
    vocab_size=256,
    max_position_embeddings=128,
    **_NO_CACHE_TOKENS_0,
)
_ENCODER_TINY = dict(_BERT_TINY, vocab_size=256)
ISSUE33_FAMILIES: dict[str, Family] = {
    "qwen3": Family("Qwen3ForCausalLM", "Qwen3Config", _DECODER_TINY, _IDS_MASK, _LM),
    "olmo2": Family("Olmo2ForCausalLM", "Olmo2Config", _DECODER_TINY, _IDS_MASK, _LM),
    "gemma": Family("GemmaForCausalLM", "GemmaConfig", _DECODER_TINY, _IDS_MASK, _LM),
    "gemma2": Family(
        "Gemma2ForCausalLM",
        "Gemma2Config",
        # Gemma 2's soft-caps, lowered so that they bite on a tiny model's small scores and
        # logits (the released models use 50 and 30), and a sliding window of 4 tokens on
        # every other layer (4096 released), so that a 16-token sequence sees both
        dict(
            _DECODER_TINY,
            attn_logit_softcapping=0.05,
            final_logit_softcapping=0.5,
            sliding_window=4,
        ),
        _IDS_MASK,
        _LM,
    ),
    "gemma3": Family("Gemma3ForCausalLM", "Gemma3TextConfig", _DECODER_TINY, _IDS_MASK, _LM),
    "phi3": Family(
        "Phi3ForCausalLM",
        "Phi3Config",
        dict(_DECODER_TINY, num_key_value_heads=4),
        _IDS_MASK,
        _LM,
    ),
    "falcon": Family(
        "FalconForCausalLM",
        "FalconConfig",
        dict(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            vocab_size=256,
            max_position_embeddings=128,
            parallel_attn=True,
            new_decoder_architecture=False,
            alibi=False,
            bias=False,
            **_NO_CACHE_TOKENS_0,
        ),
        _IDS_MASK,
        _LM,
    ),
    "codegen": Family(
        "CodeGenForCausalLM",
        "CodeGenConfig",
        dict(
            n_embd=64,
            n_layer=2,
            n_head=4,
            rotary_dim=8,
            n_inner=172,
            vocab_size=256,
            n_positions=128,
            **_NO_CACHE_TOKENS_0,
        ),
        _IDS_MASK,
        _LM,
    ),
    "xlmroberta": Family(
        "XLMRobertaModel",
        "XLMRobertaConfig",
        dict(_ENCODER_TINY, max_position_embeddings=130, pad_token_id=1),
        _IDS_MASK,
        _HIDDEN_POOLED,
    ),
    "albert": Family(
        "AlbertModel",
        "AlbertConfig",
        dict(_ENCODER_TINY, embedding_size=32),
        _IDS_MASK,  # token types default to a zero buffer: a lookup the frontend folds
        _HIDDEN_POOLED,
    ),
    "modernbert": Family(
        "ModernBertModel",
        "ModernBertConfig",
        dict(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            vocab_size=256,
            max_position_embeddings=128,
            pad_token_id=0,
            bos_token_id=0,
            eos_token_id=0,
            cls_token_id=0,
            sep_token_id=0,
        ),
        _IDS_MASK,
        _HIDDEN,
    ),
    "t5encoder": Family(
        "T5EncoderModel",
        "T5Config",
        dict(
            d_model=64,
            d_kv=16,
            d_ff=128,
            num_layers=2,
            num_heads=4,
            vocab_size=256,
            relative_attention_num_buckets=32,
            **_NO_CACHE_TOKENS_0,
        ),
        _IDS_MASK,
        _HIDDEN,
    ),
    "debertav2": Family(
        "DebertaV2Model",
        "DebertaV2Config",
        dict(_ENCODER_TINY, relative_attention=True, pos_att_type=["p2c", "c2p"]),
        _IDS_MASK,
        _HIDDEN,
    ),
    # untrained QKV biases (zero): one initializer that every layer's attention reads
    "gptneox_zerobias": replace(
        ROTARY_FAMILIES["gptneox"], unperturbed=("attention.query_key_value.bias",)
    ),
    "bloom_zerobias": replace(
        FAMILIES["bloom"],
        config=dict(FAMILIES["bloom"].config, vocab_size=256),
        unperturbed=("self_attention.query_key_value.bias",),
    ),
}

# The committed samples: file stem -> family, and the exporters each is made with.
SAMPLES = {
    "gpt2": "gpt2lm", "bert": "bertseq", "llama": "llama", "gptj": "gptj", "mpnet": "mpnet",
}  # fmt: skip
SAMPLE_EXPORTERS = {
    "llama": ("legacy17", "dynamo"), "gptj": ("legacy17", "dynamo"), "mpnet": ("legacy17",),
}  # fmt: skip
# Issue 33's families (ISSUE33_FAMILIES): decoders by the dynamo exporter (the legacy exporter
# fails on transformers 5's mask code, `aten::diff`), encoders by the legacy exporter at opset 17.
FAMILY_SAMPLES = {
    "qwen3": "qwen3", "gemma3": "gemma3", "phi3": "phi3", "falcon": "falcon",
    "codegen": "codegen", "gptneox": "gptneox_zerobias", "bloom": "bloom_zerobias",
    "albert": "albert", "xlmroberta": "xlmroberta", "modernbert": "modernbert",
    "t5encoder": "t5encoder", "gemma2": "gemma2",
}  # fmt: skip
SAMPLES.update(FAMILY_SAMPLES)
SAMPLE_EXPORTERS.update(
    {
        stem: ("legacy17",) if stem in ("albert", "xlmroberta", "modernbert", "t5encoder")
        else ("dynamo",)
        for stem in FAMILY_SAMPLES
    }
)  # fmt: skip
SAMPLE_MAX_BYTES = 2 * 1024 * 1024
GENERATION_TWINS_DIR = SAMPLES_DIR.parent / "tests" / "data" / "generation"


class _NamedOutputs(torch.nn.Module):
    """Calls a transformers model with positional inputs and returns the named outputs in order.

    Both exporters then see a plain tensors-in, tuple-out forward with the graph signature.
    """

    def __init__(self, model: torch.nn.Module, inputs: tuple[str, ...], outputs: tuple[str, ...]):
        super().__init__()
        self.model = model
        self.input_names = inputs
        self.output_names = outputs

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, ...]:
        given = dict(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        )
        result = self.model(**{name: given[name] for name in self.input_names}, return_dict=True)
        return tuple(result[name] for name in self.output_names)


def perturb_(model: torch.nn.Module, seed: int = SEED, keep: tuple[str, ...] = ()) -> None:
    """Add N(0, PERTURB_STD) noise to every parameter, in place (tied weights once), except
    those whose name ends with one of ``keep`` (the same noise is drawn for them, unused, so
    the others get the same values either way)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator, dtype=param.dtype)
            if not name.endswith(keep):
                param.add_(PERTURB_STD * noise)


def build_model(
    model_class: str,
    config_class: str,
    config: Mapping[str, object],
    seed: int = SEED,
    attn: str = "eager",
    keep: tuple[str, ...] = (),
) -> torch.nn.Module:
    """A random-weight, perturbed transformers model in eval mode; `attn` is the attention
    implementation ("eager" or "sdpa", which exports a decomposed scaled_dot_product_attention)."""
    torch.manual_seed(seed)
    cfg = getattr(transformers, config_class)(**config)
    model = getattr(transformers, model_class)._from_config(cfg, attn_implementation=attn)
    perturb_(model, seed + 1, keep)
    return model.eval()


def build_family(family: Family, seed: int = SEED, attn: str = "eager") -> _NamedOutputs:
    model = build_model(
        family.model_class, family.config_class, family.config, seed, attn, family.unperturbed
    )
    # eval() on the wrapper too: the legacy exporter restores the wrapper's training flag after
    # export, recursively, which would switch dropout on in the inner model.
    return _NamedOutputs(model, family.inputs, tuple(family.outputs)).eval()


def make_inputs(
    family: Family, batch: int, sequence: int, pad_last_row: bool, seed: int = SEED
) -> dict[str, torch.Tensor]:
    """int64 inputs; with ``pad_last_row`` the last row's mask ends in 4 zeros (right padding).

    Token ids start at 3 so that no id is a pad/bos/eos token of any family.
    """
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, family.vocab_size, (batch, sequence), generator=generator)
    mask = torch.ones(batch, sequence, dtype=torch.int64)
    if pad_last_row:
        mask[-1, -4:] = 0
    tensors = {
        "input_ids": ids,
        "attention_mask": mask,
        "token_type_ids": (torch.arange(sequence) >= sequence // 2).long().expand(batch, -1),
    }
    return {name: tensors[name].contiguous() for name in family.inputs}


def export_onnx(
    module: _NamedOutputs,
    example: Mapping[str, torch.Tensor],
    output_dims: Mapping[str, tuple[str, ...]],
    path: Path,
    exporter: str,
) -> None:
    """Export ``module`` to ``path`` with one of EXPORTERS; batch and sequence are dynamic.

    Weights are inline unless the exporter moves them out (dynamo above 1.5 GB, legacy above the
    2 GB protobuf limit); then they are in one file ``<path>.data`` in the same folder (the
    dynamo exporter's convention; the legacy exporter's one file per tensor is packed into it).
    """
    path = Path(path)
    args = tuple(example.values())
    input_names = list(example)
    output_names = list(output_dims)
    with warnings.catch_warnings():
        # Deprecation and tracer warnings that are expected and documented in samples/README.md.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", "Exporting aten::index operator of advanced indexing")
        warnings.filterwarnings("ignore", "# The axis name: ")
        if exporter.startswith("legacy"):
            _export_legacy(module, args, input_names, output_dims, path, int(exporter[6:]))
        elif exporter == "dynamo":
            batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
            program = torch.onnx.export(
                module,
                args,
                dynamo=True,
                input_names=input_names,
                output_names=output_names,
                dynamic_shapes={name: {0: batch, 1: sequence} for name in example},
            )
            # The stack traces name files on this machine (/work/..., site-packages); dropping
            # them makes the output independent of where the script and venv live.
            for node in program.model.graph.all_nodes():
                node.metadata_props.pop("pkg.torch.onnx.stack_trace", None)
            program.save(path)
        else:
            raise ValueError(f"unknown exporter {exporter!r}; expected one of {EXPORTERS}")


def build_family_meta(family: Family, attn: str = "eager") -> _NamedOutputs:
    """The model of `family` with its parameters on torch's meta device (shapes, no data: a
    20B model costs nothing) and its buffers real: buffers are computed, not learned (BERT's
    position ids are an arange), and the graph reads them as data, so they are made on the CPU
    by the model's own initializer."""
    cfg = getattr(transformers, family.config_class)(**family.config)
    with torch.device("meta"):
        model = getattr(transformers, family.model_class)._from_config(
            cfg, attn_implementation=attn
        )
    for module in model.modules():
        if module._buffers:
            for name, buf in module._buffers.items():
                if buf is not None:
                    module._buffers[name] = torch.empty_like(buf, device="cpu")
            model._init_weights(module)  # fills the buffers; its parameters stay meta
    return _NamedOutputs(model.eval(), family.inputs, tuple(family.outputs)).eval()


def export_weightless(
    module: _NamedOutputs, example: Mapping[str, torch.Tensor], path: Path
) -> tuple[int, int]:
    """Export a meta-device `module` with the dynamo exporter, every parameter a graph input
    with a static shape and no data; batch and sequence dynamic. Returns (parameter inputs,
    parameters).

    The exporter's optimizer cannot run on meta weights (its rule that drops an all-zero Gemm
    bias reads the bias: "Cannot copy out of meta tensor"), and the optimizer lifts the
    constants it folds into initializers, which `save(include_initializers=False,
    keep_initializers_as_inputs=True)` would turn into inputs without data as well. So the
    export skips the optimizer, the meta weights become graph inputs first (no value, so
    nothing can read them), then the same optimizer runs and the file is saved with its own
    folded constants (and the buffers) inline."""
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        warnings.filterwarnings("ignore", "# The axis name: ")
        program = torch.onnx.export(
            module,
            tuple(example.values()),
            dynamo=True,
            optimize=False,
            input_names=list(example),
            output_names=list(module.output_names),
            dynamic_shapes={name: {0: batch, 1: sequence} for name in example},
        )
    graph = program.model.graph
    weights = [v for v in graph.initializers.values() if _is_meta(v.const_value)]
    for v in weights:
        graph.initializers.pop(v.name)
        v.const_value = None
    graph.inputs.extend(weights)
    program.optimize()
    for node in program.model.graph.all_nodes():
        node.metadata_props.pop("pkg.torch.onnx.stack_trace", None)
    program.save(path)
    params = sum(math.prod(v.shape.numpy()) for v in weights)
    return len(weights), params


def _is_meta(tensor: object) -> bool:
    raw = getattr(tensor, "raw", None)
    return isinstance(raw, torch.Tensor) and raw.is_meta


def _export_legacy(
    module: torch.nn.Module,
    args: tuple[torch.Tensor, ...],
    input_names: list[str],
    output_dims: Mapping[str, tuple[str, ...]],
    path: Path,
    opset: int,
) -> None:
    # Exported into a scratch folder because a model over 2 GB comes out as one file per tensor.
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}.") as scratch:
        scratch_path = Path(scratch) / path.name
        torch.onnx.export(
            module,
            args,
            str(scratch_path),
            dynamo=False,
            opset_version=opset,
            input_names=input_names,
            output_names=list(output_dims),
            dynamic_axes={
                **{name: {0: "batch", 1: "sequence"} for name in input_names},
                **{name: dict(enumerate(dims)) for name, dims in output_dims.items()},
            },
        )
        if any(p != scratch_path for p in Path(scratch).iterdir()):
            _pack_external_data(scratch_path, f"{path.name}.data")
        for produced in Path(scratch).iterdir():
            produced.replace(path.parent / produced.name)


def _pack_external_data(model_path: Path, data_name: str) -> None:
    """Stream the legacy exporter's one-file-per-tensor weights into the single file data_name."""
    folder = model_path.parent
    model = onnx.load(str(model_path), load_external_data=False)
    offset = 0
    with open(folder / data_name, "wb") as data:
        for tensor in model.graph.initializer:
            if not onnx.external_data_helper.uses_external_data(tensor):
                continue
            source = folder / onnx.external_data_helper.ExternalDataInfo(tensor).location
            with open(source, "rb") as chunk:
                shutil.copyfileobj(chunk, data, 1 << 24)
            length = source.stat().st_size
            del tensor.external_data[:]  # set_external_data() wants raw_data, absent here
            for key, value in (("location", data_name), ("offset", offset), ("length", length)):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, str(value)
            offset += length
            source.unlink()
    onnx.save(model, str(model_path))
    leftover = sorted(
        p.name for p in folder.iterdir() if p.name not in (model_path.name, data_name)
    )
    if leftover:
        raise RuntimeError(f"external data outside the initializers: {leftover}")


def max_abs_diffs(
    module: _NamedOutputs, path: Path, inputs: Mapping[str, torch.Tensor]
) -> dict[str, float]:
    """Max |torch - onnxruntime| per output, with ORT graph optimizations disabled."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    got = session.run(module.output_names, {k: v.numpy() for k, v in inputs.items()})
    with torch.no_grad():
        want = module(*inputs.values())
    return {
        name: float(np.max(np.abs(g - w.numpy())))
        for name, g, w in zip(module.output_names, got, want, strict=True)
    }


def check_export(
    module: _NamedOutputs,
    family: Family,
    path: Path,
    shapes: tuple[tuple[int, int, bool], ...] = CHECK_SHAPES,
) -> list[tuple[tuple[int, int, bool], float]]:
    """Compare ``path`` with torch at ``shapes``; raise if any output differs by MAX_ABS_DIFF."""
    results = []
    for batch, sequence, padded in shapes:
        diffs = max_abs_diffs(module, path, make_inputs(family, batch, sequence, padded, SEED + 2))
        worst = max(diffs.values())
        if not worst < MAX_ABS_DIFF:
            raise AssertionError(
                f"{path.name} at batch {batch}, sequence {sequence}: {diffs} >= {MAX_ABS_DIFF}"
            )
        results.append(((batch, sequence, padded), worst))
    return results


def op_counts(path: Path) -> dict[str, int]:
    model = onnx.load(str(path), load_external_data=False)
    counts: dict[str, int] = {}
    for node in model.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


# Generation exports (issue 17): decoders with past key/values as optimum writes them. A vocabulary
# of 256 keeps each file near half a megabyte; `use_cache=True` is what generation runs with.
GENERATION_FAMILIES: dict[str, Family] = {
    "gpt2": Family(
        "GPT2LMHeadModel", "GPT2Config", dict(_GPT2_TINY, vocab_size=256, use_cache=True),
        _IDS_MASK, _LM,
    ),
    "opt": Family(
        "OPTForCausalLM", "OPTConfig",
        dict(FAMILIES["opt"].config, vocab_size=256, use_cache=True, pad_token_id=1,
             bos_token_id=2, eos_token_id=2),
        _IDS_MASK, _LM,
    ),
    "llama": Family(
        "LlamaForCausalLM", "LlamaConfig", dict(ROTARY_FAMILIES["llama"].config, use_cache=True),
        _IDS_MASK, _LM,
    ),
}  # fmt: skip
# file stem -> (family, what optimum exports): "past" its text-generation-with-past model.onnx,
# "no-past" its text-generation model.onnx (the same weights: generation must agree; written to
# tests/data/generation/, as they are the generation tests' references, not samples), "merged"
# optimum 1.x's decoder_model_merged.onnx (`export_optimum`); "dynamo-past" torch.onnx's dynamo
# export of the model called with a DynamicCache (`export_dynamo_with_cache`: no position_ids
# input, the mask's key length a dim of its own), "dynamo-past-nomask" the same without a mask.
GENERATION_SAMPLES = {
    "gpt2_optimum_past": ("gpt2", "past"),
    "gpt2_optimum": ("gpt2", "no-past"),
    "opt_optimum_past": ("opt", "past"),
    "opt_optimum": ("opt", "no-past"),
    "llama_optimum_past": ("llama", "past"),
    "llama_optimum": ("llama", "no-past"),
    "llama_optimum_merged": ("llama", "merged"),
    "gpt2_dynamo_past": ("gpt2", "dynamo-past"),
    "llama_dynamo_past": ("llama", "dynamo-past"),
    "llama_dynamo_past_nomask": ("llama", "dynamo-past-nomask"),
}


def export_optimum(family: Family, what: str, path: Path, seed: int = SEED) -> None:
    """Export the perturbed model of `family` with optimum (`main_export`, which validates the
    file against torch) to `path`: `what` is "past", "no-past" or "merged" (GENERATION_SAMPLES).

    optimum exports from a model folder: the model is saved to a scratch folder first (a
    config and weights, no tokenizer; nothing is downloaded)."""
    import huggingface_hub.constants
    from optimum.exporters.onnx import main_export
    from optimum.exporters.tasks import TasksManager

    huggingface_hub.constants.HF_HUB_OFFLINE = True  # nothing is downloaded (no tokenizer)

    model = build_model(family.model_class, family.config_class, family.config, seed)
    task = "text-generation" if what == "no-past" else "text-generation-with-past"
    with tempfile.TemporaryDirectory() as scratch:
        folder, out = Path(scratch) / "model", Path(scratch) / "onnx"
        model.save_pretrained(folder)

        def export(to: Path, **extra: object) -> Path:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # tracer and deprecation warnings, as export_onnx
                main_export(str(folder), output=to, task=task, library_name="transformers", **extra)
            return to / "model.onnx"

        if what != "merged":
            shutil.move(export(out), path)
            return
        # optimum 1.x's decoder_model_merged.onnx: the decoder without past inputs (but with
        # present outputs) and the decoder with past, merged by optimum's own merge_decoders
        from optimum.onnx import merge_decoders

        make = TasksManager.get_exporter_config_constructor(
            "onnx", model, task="text-generation", library_name="transformers"
        )
        first = make(model.config, task="text-generation", use_past=True, use_past_in_inputs=False)
        merge_decoders(
            decoder=export(Path(scratch) / "first", custom_onnx_configs={"model": first}),
            decoder_with_past=export(out),
            save_path=path,
        )


class _WithCache(torch.nn.Module):
    """A causal LM called with its past key/values as flat tensors (layer by layer, key then
    value) in a DynamicCache, after the input ids and, with `mask`, the attention mask; returns
    the logits and the grown cache, flat the same way."""

    def __init__(self, model: torch.nn.Module, layers: int, mask: bool):
        super().__init__()
        self.model, self.layers, self.mask = model, layers, mask

    def forward(self, input_ids: torch.Tensor, *rest: torch.Tensor) -> tuple[torch.Tensor, ...]:
        mask, past = (rest[0], rest[1:]) if self.mask else (None, rest)
        cache = transformers.DynamicCache()
        for i in range(self.layers):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(input_ids=input_ids, attention_mask=mask, past_key_values=cache)
        grown = out.past_key_values
        flat = [
            t for i in range(self.layers) for t in (grown.layers[i].keys, grown.layers[i].values)
        ]
        return (out.logits, *flat)


def export_dynamo_with_cache(family: Family, path: Path, mask: bool, seed: int = SEED) -> None:
    """torch.onnx's dynamo export of the perturbed model of `family` called with a cache: inputs
    input_ids [batch, sequence], with `mask` attention_mask [batch, total], and per layer
    past_key_values.i.key/value [batch, kv_heads, past_sequence, head_dim]; outputs logits and
    present.i.key/value."""
    model = build_model(family.model_class, family.config_class, family.config, seed)
    cfg = model.config
    layers, heads = cfg.num_hidden_layers, cfg.num_attention_heads
    kv_heads, head_dim = getattr(cfg, "num_key_value_heads", heads), cfg.hidden_size // heads
    generator = torch.Generator().manual_seed(seed + 2)
    ids = torch.randint(3, family.vocab_size, (2, 3), generator=generator)
    past = [torch.randn(2, kv_heads, 5, head_dim, generator=generator) for _ in range(2 * layers)]
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    total, past_sequence = torch.export.Dim("total"), torch.export.Dim("past_sequence")
    kv = [f"{i}.{t}" for i in range(layers) for t in ("key", "value")]
    masks = (torch.ones(2, 8, dtype=torch.int64),) if mask else ()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            _WithCache(model, layers, mask),
            (ids, *masks, *past),
            dynamo=True,
            input_names=["input_ids", *(["attention_mask"] if mask else [])]
            + [f"past_key_values.{n}" for n in kv],
            output_names=["logits"] + [f"present.{n}" for n in kv],
            dynamic_shapes=(
                {0: batch, 1: sequence},
                (
                    *([{0: batch, 1: total}] if mask else []),
                    *({0: batch, 2: past_sequence} for _ in past),
                ),
            ),
        )
    for node in program.model.graph.all_nodes():
        node.metadata_props.pop("pkg.torch.onnx.stack_trace", None)
        for key, value in list(node.metadata_props.items()):
            if " at 0x" in value:  # a Python object's repr: its address differs run to run
                node.metadata_props.pop(key)
    program.save(path)


def main_generation(out_dir: Path = SAMPLES_DIR, only: tuple[str, ...] = ()) -> None:
    """The generation samples (GENERATION_SAMPLES): `python samples/make_samples.py generation`."""
    import optimum.version

    print(f"optimum {optimum.version.__version__}, transformers {transformers.__version__}")
    for stem, (family_name, what) in GENERATION_SAMPLES.items():
        if only and stem not in only:
            continue
        folder = GENERATION_TWINS_DIR if what == "no-past" and out_dir == SAMPLES_DIR else out_dir
        path = folder / f"{stem}.onnx"
        if what.startswith("dynamo-past"):
            mask = what == "dynamo-past"
            export_dynamo_with_cache(GENERATION_FAMILIES[family_name], path, mask)
        else:
            export_optimum(GENERATION_FAMILIES[family_name], what, path)
        onnx.checker.check_model(str(path), full_check=True)
        size = path.stat().st_size
        if size > SAMPLE_MAX_BYTES:
            raise AssertionError(f"{path.name} is over 2 MB ({size} bytes)")
        counts = op_counts(path)
        print(f"{path.name}: {sum(counts.values())} nodes, {size} bytes")
        print(f"    ops: {counts}")


def main(out_dir: Path = SAMPLES_DIR, only: tuple[str, ...] = ()) -> None:
    versions = (torch.__version__, transformers.__version__, onnx.__version__)
    print("torch {}, transformers {}, onnx {}".format(*versions))
    out_dir.mkdir(parents=True, exist_ok=True)
    for stem, family_name in SAMPLES.items():
        if only and stem not in only:
            continue
        family = {**FAMILIES, **ROTARY_FAMILIES, **ISSUE33_FAMILIES}[family_name]
        module = build_family(family)
        example = make_inputs(family, 2, 16, pad_last_row=True)
        for exporter in SAMPLE_EXPORTERS.get(stem, EXPORTERS):
            suffix = "dynamo" if exporter == "dynamo" else f"legacy_op{exporter[6:]}"
            path = out_dir / f"{stem}_{suffix}.onnx"
            export_sample(module, family, example, path, exporter)


def export_sample(module, family, example, path: Path, exporter: str) -> None:
    """Export one bundled sample, check it (one file under 2 MB, torch against onnxruntime)
    and print what it holds."""
    export_onnx(module, example, family.outputs, path, exporter)
    onnx.checker.check_model(str(path), full_check=True)
    size = path.stat().st_size
    if size > SAMPLE_MAX_BYTES or path.with_name(f"{path.name}.data").exists():
        raise AssertionError(f"{path.name} is not one file under 2 MB ({size} bytes)")
    model = onnx.load(str(path))
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    counts = op_counts(path)
    diffs = ", ".join(
        f"(b{b},s{s}{',padded' if p else ''}) {d:.1e}"
        for (b, s, p), d in check_export(module, family, path)
    )
    print(
        f"{path.name}: opset {opset}, IR {model.ir_version}, {sum(counts.values())} nodes, "
        f"{size} bytes; max |torch - ORT| {diffs}"
    )
    print(f"    ops: {counts}")


if __name__ == "__main__":
    # optional: "generation" (the optimum exports), an output folder, then the stems to make
    args = sys.argv[1:]
    make = main_generation if args[:1] == ["generation"] else main
    args = args[1:] if make is main_generation else args
    make(Path(args[0]) if args else SAMPLES_DIR, tuple(args[1:]))
