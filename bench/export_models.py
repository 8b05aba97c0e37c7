"""Export the real-size benchmark models as ONNX, with random perturbed weights.

    python bench/export_models.py --out bench/models [--only gpt2-small,bert-base]
                                  [--exporter legacy14|legacy17|dynamo] [--no-check]

Needs ``pip install -e '.[export]'``. The shapes are those of the published checkpoints; the
weights are random and perturbed as in ``samples/make_samples.py`` (the shared recipe), so the
graphs look like exports of trained models. Batch and sequence are dynamic. Weights too big to
stay inline (the legacy exporter moves them out above the 2 GB protobuf limit, dynamo above
1.5 GB) are in one file ``<name>.onnx.data`` next to ``<name>.onnx``. Each export is timed
and, unless ``--no-check``, compared with torch in onnxruntime at batch 1, sequence 16.
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
    config = dict(
        n_embd=width,
        n_layer=layers,
        n_head=heads,
        n_inner=4 * width,
        vocab_size=50257,
        n_positions=positions,
        use_cache=False,
        **extra,
    )
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
    parser.add_argument("--out", type=Path, default=Path("bench/models"), help="output folder")
    parser.add_argument("--only", help=f"comma-separated subset of: {', '.join(MODELS)}")
    parser.add_argument("--exporter", choices=recipe.EXPORTERS, default="legacy17")
    parser.add_argument("--no-check", action="store_true", help="skip the onnxruntime comparison")
    args = parser.parse_args(argv)

    names = args.only.split(",") if args.only else list(MODELS)
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {list(MODELS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    print(
        f"torch {recipe.torch.__version__}, transformers {recipe.transformers.__version__}",
        flush=True,
    )
    for name in names:
        export_model(name, args.out, args.exporter, check=not args.no_check)
        gc.collect()


if __name__ == "__main__":
    main()
