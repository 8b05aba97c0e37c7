"""Make the exports whose context is shorter than the default sequence (128): what
`wsecc compile MODEL` with no options must bind from the graph itself.

    python tests/data/make_context_models.py        (needs pip install -e '.[export]')

- gpt2_pos64.onnx: a GPT2LMHeadModel with 64 positions (its position table has 64 rows).
- opt_pos64.onnx: an OPTForCausalLM with 64 positions; OPT reads its table at an offset of 2,
  so the table has 66 rows and the context is still 64.

Both use samples/make_samples.py's recipe (random weights, perturbed; one layer, width 64),
exported with the legacy exporter at opset 17 and checked against torch in onnxruntime.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "samples"))

import make_samples as recipe  # noqa: E402

MODELS = {
    "gpt2_pos64": replace(
        recipe.FAMILIES["gpt2lm"],
        config=dict(recipe.FAMILIES["gpt2lm"].config, n_layer=1, n_positions=64),
    ),
    "opt_pos64": replace(
        recipe.FAMILIES["opt"],
        config=dict(recipe.FAMILIES["opt"].config, num_hidden_layers=1, max_position_embeddings=64),
    ),
}


def main() -> None:
    for stem, family in MODELS.items():
        module = recipe.build_family(family)
        path = HERE / f"{stem}.onnx"
        recipe.export_onnx(module, recipe.make_inputs(family, 2, 16, True), family.outputs, path,
                           "legacy17")  # fmt: skip
        diffs = recipe.check_export(module, family, path)
        print(f"{path.name}: {path.stat().st_size} bytes, max |torch - ORT| {diffs}")


if __name__ == "__main__":
    main()
