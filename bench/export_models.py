"""Export the real-size benchmark models as ONNX, with random perturbed weights, or weightless.

    python bench/export_models.py --out bench/models [--only gpt2-small,bert-base]
                                  [--exporter legacy14|legacy17|dynamo] [--no-check]
    python bench/export_models.py --weightless [--out bench/models/weightless] [--only gpt3-20b]

Needs ``pip install -e '.[export]'``. The shapes are those of the published checkpoints; the
weights are random and perturbed as in ``samples/make_samples.py`` (the shared recipe), so the
graphs look like exports of trained models. Batch and sequence are dynamic. Weights too big to
stay inline (the legacy exporter moves them out above the 2 GB protobuf limit, dynamo above
1.5 GB) are in one file ``<name>.onnx.data`` next to ``<name>.onnx``. Each export is timed
and, unless ``--no-check``, compared with torch in onnxruntime at batch 1, sequence 16.

``--weightless`` exports ``WEIGHTLESS``, the configurations of
/work/shared/reference/measurements.md §1, §2 and §4 up to GPT-3 20B, built on torch's meta
device: every parameter is a graph input with a static shape and no data (the file is a few
hundred KB whatever the model's size), batch and sequence dynamic, for ``wsecc compile
--weights inputs`` (``make_samples.export_weightless`` says how and why the export differs from
the issue's one-liner). There are no values to check against.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "samples"))
import make_samples as recipe  # noqa: E402  (the shared export recipe)


def _gpt2(width: int, layers: int, heads: int, positions: int, **extra: object) -> recipe.Family:
    config = (
        dict(
            n_embd=width,
            n_layer=layers,
            n_head=heads,
            n_inner=4 * width,
            vocab_size=50257,
            n_positions=positions,
            use_cache=False,
        )
        | extra
    )  # extra may set n_inner (Cerebras-GPT's d_ffn)
    return recipe.Family(
        "GPT2LMHeadModel",
        "GPT2Config",
        config,
        ("input_ids", "attention_mask"),
        {"logits": ("batch", "sequence")},
    )


def _bert(width: int, layers: int, heads: int) -> recipe.Family:
    config = dict(
        hidden_size=width,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * width,
        vocab_size=30522,
        max_position_embeddings=512,
    )
    return recipe.Family(
        "BertModel",
        "BertConfig",
        config,
        ("input_ids", "attention_mask", "token_type_ids"),
        {"last_hidden_state": ("batch", "sequence"), "pooler_output": ("batch",)},
    )


# Cerebras-GPT is the GPT-2 architecture with the exact (erf) GELU, per its published config.json.
MODELS: dict[str, recipe.Family] = {
    "gpt2-small": _gpt2(768, 12, 12, 1024),
    "gpt2-medium": _gpt2(1024, 24, 16, 1024),
    "gpt2-large": _gpt2(1280, 36, 20, 1024),
    "gpt2-xl": _gpt2(1600, 48, 25, 1024),
    "bert-base": _bert(768, 12, 12),
    "bert-large": _bert(1024, 24, 16),
    "cerebras-gpt-111m": _gpt2(768, 10, 12, 2048, activation_function="gelu"),
    "cerebras-gpt-256m": _gpt2(1088, 14, 17, 2048, activation_function="gelu"),
    "cerebras-gpt-590m": _gpt2(1536, 18, 12, 2048, activation_function="gelu"),
    "cerebras-gpt-1.3b": _gpt2(2048, 24, 16, 2048, activation_function="gelu"),
}


def _gpt3(width: int, layers: int, heads: int, **extra: object) -> recipe.Family:
    return _gpt2(width, layers, heads, 2048, **extra)


def _cerebras(width: int, layers: int, d_head: int, d_ffn: int) -> recipe.Family:
    return _gpt3(width, layers, width // d_head, n_inner=d_ffn, activation_function="gelu")


def _llama(
    width: int, layers: int, heads: int, kv_heads: int, ffn: int, vocab: int
) -> recipe.Family:
    base = recipe.ROTARY_FAMILIES["llama"]
    config = dict(base.config) | dict(
        hidden_size=width, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv_heads, intermediate_size=ffn, vocab_size=vocab,
        max_position_embeddings=131072, rope_theta=500000.0,
    )  # fmt: skip
    return recipe.Family(base.model_class, base.config_class, config, base.inputs, base.outputs)


WEIGHTLESS: dict[str, recipe.Family] = {
    # Emani et al. Table III: measured up to seq 8192, 13B further, to 51200 (its position
    # table holds 51200 rows: weightless, the longer table costs no memory here).
    "gpt2-xl": _gpt2(1600, 48, 25, 8192),
    # the rest of the real-size suite's GPT-2 family (MODELS), to compile without its weights
    "gpt2-medium": MODELS["gpt2-medium"],
    "gpt2-large": MODELS["gpt2-large"],
    "gpt2-13b": _gpt2(5120, 40, 40, 51200),
    # Emani et al. Table IV: the GenSLM model on the CS-2, "a GPT-3 XL shape": 24 layers, 16
    # heads, d 2048, vocabulary 70 (codons), seq 10240.
    "genslm-1.5b": _gpt2(2048, 24, 16, 10240, vocab_size=70),
    # Zhang et al. Tables II-III: GPT-2 architecture (gelu_new), vocab 50257, MSL 2048.
    "gpt3-256m": _gpt3(1088, 14, 17),
    "gpt3-590m": _gpt3(1536, 18, 12),
    "gpt3-2.7b": _gpt3(2560, 32, 32),
    "gpt3-6.7b": _gpt3(4096, 32, 32),
    "gpt3-13b": _gpt3(5120, 40, 40),
    "gpt3-20b": _gpt3(6144, 44, 64),
    # Dey et al. Table 1 (d_model, layers, d_head, d_ffn); exact GELU, as in its config.json.
    "cerebras-gpt-111m": _cerebras(768, 10, 64, 3072),
    "cerebras-gpt-256m": _cerebras(1088, 14, 64, 4352),
    "cerebras-gpt-590m": _cerebras(1536, 18, 128, 6144),
    "cerebras-gpt-1.3b": _cerebras(2048, 24, 128, 8192),
    "cerebras-gpt-2.7b": _cerebras(2560, 32, 80, 10240),
    "cerebras-gpt-6.7b": _cerebras(4096, 32, 128, 16384),
    "cerebras-gpt-13b": _cerebras(5120, 40, 128, 20480),
    # Llama 3.1 8B and 70B (measurements.md §6; Meta's published configs): GQA with 8 K/V heads,
    # SwiGLU, RMSNorm, rotary embeddings (plain rope_theta 500000; the 3.1 frequency scaling
    # changes the tables' values, not the graph's shape or cost).
    "llama-3.1-8b": _llama(4096, 32, 32, 8, 14336, 128256),
    "llama-3.1-70b": _llama(8192, 80, 64, 8, 28672, 128256),
    # One Llama 3.1 8B layer with a 256-token vocabulary, so the layer has the wafer to itself:
    # WaferLLM's decode setting (one layer on a P x P region, its per-layer time x 32).
    "llama-3.1-8b-layer": _llama(4096, 1, 32, 8, 14336, 256),
    # Zhang et al. Table II, MSL 128 (the position table is the checkpoints' 512).
    "bert-base": _bert(768, 12, 12),
    "bert-large": _bert(1024, 24, 16),
}


def export_weightless(name: str, out_dir: Path) -> None:
    family = WEIGHTLESS[name]
    path = out_dir / f"{name}.onnx"
    path.unlink(missing_ok=True)
    start = time.perf_counter()
    module = recipe.build_family_meta(family)
    built = time.perf_counter()
    example = recipe.make_inputs(family, 2, 16, pad_last_row=True)
    inputs, params = recipe.export_weightless(module, example, path)
    exported = time.perf_counter()
    nodes = sum(recipe.op_counts(path).values())
    print(
        f"{name}: {params / 1e6:,.1f}M params in {inputs} weight inputs, build "
        f"{built - start:.1f} s, export {exported - built:.1f} s, {nodes} nodes, "
        f"{path.name} {path.stat().st_size / 1e3:,.0f} KB",
        flush=True,
    )


def export_model(name: str, out_dir: Path, exporter: str, check: bool) -> None:
    family = MODELS[name]
    path = out_dir / f"{name}.onnx"
    for stale in (path, path.with_name(f"{path.name}.data")):
        stale.unlink(missing_ok=True)

    start = time.perf_counter()
    module = recipe.build_family(family)
    built = time.perf_counter()
    params = sum(p.numel() for p in module.parameters())
    example = recipe.make_inputs(family, 2, 16, pad_last_row=True)
    recipe.export_onnx(module, example, family.outputs, path, exporter)
    exported = time.perf_counter()

    data = path.with_name(f"{path.name}.data")
    data_bytes = data.stat().st_size if data.exists() else 0
    nodes = sum(recipe.op_counts(path).values())
    line = (
        f"{name}: {params / 1e6:.1f}M params, {exporter}, build {built - start:.1f} s, "
        f"export {exported - built:.1f} s, {nodes} nodes, "
        f"{path.name} {path.stat().st_size / 1e6:.1f} MB"
    )
    if data_bytes:
        line += f" + {data.name} {data_bytes / 1e6:.1f} MB"
    print(line, flush=True)
    if check:
        inputs = recipe.make_inputs(family, 1, 16, pad_last_row=False, seed=recipe.SEED + 2)
        diffs = recipe.max_abs_diffs(module, path, inputs)
        print(
            f"    max |torch - ORT| at (1, 16): {diffs} ({time.perf_counter() - exported:.1f} s)",
            flush=True,
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=None, help="output folder")
    parser.add_argument(
        "--only",
        help=f"comma-separated subset of: {', '.join(MODELS)} (--weightless: "
        f"{', '.join(WEIGHTLESS)})",
    )
    parser.add_argument("--exporter", choices=recipe.EXPORTERS, default="legacy17")
    parser.add_argument("--no-check", action="store_true", help="skip the onnxruntime comparison")
    parser.add_argument(
        "--weightless",
        action="store_true",
        help="export WEIGHTLESS from the meta device: weights as data-less graph inputs "
        "(dynamo exporter; default --out bench/models/weightless)",
    )
    args = parser.parse_args(argv)

    models = WEIGHTLESS if args.weightless else MODELS
    out = args.out or Path("bench/models/weightless" if args.weightless else "bench/models")
    names = args.only.split(",") if args.only else list(models)
    unknown = sorted(set(names) - set(models))
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {list(models)}")
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"torch {recipe.torch.__version__}, transformers {recipe.transformers.__version__}",
        flush=True,
    )
    for name in names:
        if args.weightless:
            export_weightless(name, out)
        else:
            export_model(name, out, args.exporter, check=not args.no_check)
        gc.collect()


if __name__ == "__main__":
    main()
