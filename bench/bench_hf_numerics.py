"""The tiled functional simulator on the tiny Hugging Face exports (tests/hf_exports.py: 8
families x 3 exporters, and the SDPA-attention exports), against onnxruntime and the reference
interpreter: the figures behind `wsecc/check/numerics.py`'s tolerances.

    python bench/bench_hf_numerics.py [--precision fp32 --precision mixed --precision fp16]

Needs torch and transformers (pip install -e '.[export]') to make the exports (cached in
~/.cache/wsecc/hf-exports). Each export is compiled at batch 2 x seq 16 and 1 x 7 (lowered and
sized on WSE-2, as compile does), its inputs from `make_inputs(seed=7)` with the last row
padded and with an all-ones mask, and simulated in each precision. Prints one row per export
and precision (the worst output over the four input sets) and a summary line per precision.
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

BINDINGS = ((2, 16), (1, 7))
SDPA_FAMILIES = ("gpt2lm", "bert", "distilbert")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precision", action="append", choices=("fp32", "mixed", "fp16"))
    args = ap.parse_args()
    precisions = args.precision or ["fp32", "mixed", "fp16"]

    from hf_exports import EXPORTERS, FAMILIES, export_path
    from wsecc.passes import DEFAULT_PIPELINE
    from wsecc.targets import load_target

    from wsecc.check.numerics import make_inputs
    from wsecc.core.flow import lower_and_size
    from wsecc.frontend.onnx import import_model
    from wsecc.pm import PassManager
    from wsecc.sim.functional import validate

    target = load_target("wse2")
    exports = [(f, e, "eager") for f in FAMILIES for e in EXPORTERS]
    exports += [(f, e, "sdpa") for f in SDPA_FAMILIES for e in EXPORTERS]
    print(
        f"machine: {platform.machine()}, Python {platform.python_version()}; {len(exports)} exports"
    )
    print("| export | precision | max rel err | min PCC | structure max rel err | passed |")
    print("|---|---|---|---|---|---|")
    worst: dict[str, list[float]] = {p: [0.0, 1.0, 0.0, 1.0] for p in precisions}
    for family, exporter, attn in exports:
        path = export_path(family, exporter, attn=attn)
        name = f"{family}/{exporter}" + ("/sdpa" if attn == "sdpa" else "")
        for precision in precisions:
            rel, pcc, structure, passed = 0.0, 1.0, 0.0, True
            for batch, seq in BINDINGS:
                graph, _ = import_model(path, batch=batch, seq=seq)
                fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
                kg, sizing = lower_and_size(fused, target, precision)
                for padded in (True, False):
                    feeds = make_inputs(graph, seed=7, padded=padded)
                    r = validate(path, fused, kg, sizing, precision, feeds)
                    rel = max(rel, *(o.max_rel_err for o in r.outputs))
                    pcc = min(pcc, *(o.pcc for o in r.outputs))
                    structure = max(structure, *(o.max_rel_err for o in r.structure))
                    passed = passed and r.passed
            w = worst[precision]
            w[:] = [max(w[0], rel), min(w[1], pcc), max(w[2], structure), w[3] * passed]
            print(f"| {name} | {precision} | {rel:.1e} | {pcc:.6f} | {structure:.1e} | "
                  f"{'yes' if passed else 'NO'} |", flush=True)  # fmt: skip
    for p, (rel, pcc, structure, passed) in worst.items():
        print(f"{p}: max rel err <= {rel:.1e}, PCC >= {pcc:.6f}, structure <= {structure:.1e}, "
              f"{'every export passes' if passed else 'SOME FAIL'}")  # fmt: skip


if __name__ == "__main__":
    main()
