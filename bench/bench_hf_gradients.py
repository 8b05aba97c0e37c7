"""Train mode's gradient check on the tiny Hugging Face exports (tests/hf_exports.py: 8
families x 3 exporters, and the SDPA-attention exports): the gradient of the loss for every
ONNX weight initializer, by reverse mode over wsecc's fused graph, against central finite
differences of onnxruntime on the original file (`wsecc.modes.gradcheck`).

    python bench/bench_hf_gradients.py [--precision fp32 --precision mixed] [--samples 50]
                                       [--only gpt2lm] [--batch 2 --seq 8]

The exports are made with torch and transformers (pip install -e '.[export]', or any
environment that has them: `tests/hf_exports.py`'s `export_path`), cached in
~/.cache/wsecc/hf-exports; without torch this script reads that cache (the newest folder of
the current EXPORT_VERSION) and skips what is not there. Each export is imported and fused as
train mode does (`Compilation.load(path, Options(mode="train", batch=2, seq=8, ...)).fuse()`),
its inputs from `make_inputs(seed=0, padded=True)` (the last row right-padded), and checked in
each precision with `samples` coordinates per initializer. An export the frontend refuses is
listed as such, not counted. Prints one markdown row per export and precision — the loss,
tensors passed / total, the worst row's figures (max rel err and beyond_noise: see
`wsecc/modes/gradcheck.py`), the rows the finite differences could not resolve (noisy), in fp32 the
rows judged by float64 differences (f64; "n/a" when onnxruntime cannot run the file in float64,
the reasons listed at the end), the initializers no constant of the graph traces to (untraced:
failures) — and a summary line per precision.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

SDPA_FAMILIES = ("gpt2lm", "bert", "distilbert")


def export_files(families: tuple[str, ...]) -> list[tuple[str, str, str, Path | None]]:
    """(family, exporter, attn, path or None when not cached) of every export to check."""
    from hf_exports import EXPORT_VERSION, EXPORTERS

    exports = [(f, e, "eager") for f in families for e in EXPORTERS]
    exports += [(f, e, "sdpa") for f in families if f in SDPA_FAMILIES for e in EXPORTERS]
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        root = os.environ.get("WSECC_EXPORT_CACHE") or Path.home() / ".cache/wsecc/hf-exports"
        folders = sorted(Path(root).glob(f"v{EXPORT_VERSION}-*"), key=lambda p: p.stat().st_mtime)
        cache = folders[-1] if folders else None
        out = []
        for f, e, a in exports:
            path = cache / f"{f}_{e}{'' if a == 'eager' else f'_{a}'}.onnx" if cache else None
            out.append((f, e, a, path if path is not None and path.exists() else None))
        return out
    from hf_exports import export_path

    return [(f, e, a, export_path(f, e, attn=a)) for f, e, a in exports]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precision", action="append", choices=("fp32", "mixed"))
    ap.add_argument("--samples", type=int, default=50, help="coordinates per initializer")
    ap.add_argument("--only", action="append", metavar="FAMILY", help="one family (repeatable)")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0, help="the check's (sampling, labels)")
    args = ap.parse_args()
    precisions = args.precision or ["fp32", "mixed"]

    from hf_exports import FAMILIES

    import wsecc
    from wsecc.check.numerics import make_inputs
    from wsecc.compiler import Compilation
    from wsecc.errors import WseccError
    from wsecc.modes.gradcheck import check_gradients

    families = tuple(args.only or FAMILIES)
    if unknown := set(families) - set(FAMILIES):
        ap.error(f"unknown family {sorted(unknown)}; expected one of {FAMILIES}")
    exports = export_files(families)
    print(f"machine: {platform.machine()}, Python {platform.python_version()}; "
          f"{len(exports)} exports at batch {args.batch} x seq {args.seq}, "
          f"{args.samples} samples per initializer")  # fmt: skip
    print("| family | exporter | precision | loss | passed | max rel err | beyond noise "
          "| min PCC | noisy | f64 | untraced | s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    # per precision: exports checked, exports passed, worst rel, worst beyond, min pcc
    totals = {p: [0, 0, 0.0, 0.0, 1.0] for p in precisions}
    missing, refused = [], []
    no_float64: dict[str, list[str]] = {}  # why onnxruntime cannot run it in float64 -> exports
    for family, exporter, attn, path in exports:
        name = exporter + ("/sdpa" if attn == "sdpa" else "")
        if path is None:
            missing.append(f"{family}/{name}")
            continue
        for precision in precisions:
            opts = wsecc.Options(
                mode="train", batch=args.batch, seq=args.seq, precision=precision,
                validate=False,
            )  # fmt: skip
            try:
                c = Compilation.load(path, opts).fuse()
            except WseccError as e:
                refused.append(f"{family}/{name}: {str(e).splitlines()[0]}")
                break
            assert c.graph is not None and c.fused is not None
            feeds = make_inputs(c.graph, seed=0, padded=True)
            start = time.perf_counter()
            check = check_gradients(
                c.model_path, c.fused, feeds, precision, samples=args.samples, seed=args.seed
            )
            rows = check.rows
            rel = max((r.max_rel_err for r in rows), default=0.0)
            beyond = max((r.beyond_noise for r in rows), default=0.0)
            pcc = min((r.pcc for r in rows), default=1.0)
            t = totals[precision]
            t[:] = [t[0] + 1, t[1] + check.passed, max(t[2], rel), max(t[3], beyond), min(t[4], pcc)]  # fmt: skip
            untraced = ", ".join(check.untraced) or "-"
            f64 = str(sum(r.reference == "float64 FD" for r in rows))
            if check.float64 not in ("", "available"):
                f64 = "n/a"
                no_float64.setdefault(check.float64, []).append(f"{family}/{name}")
            elif not check.float64:
                f64 = "-"
            print(f"| {family} | {name} | {precision} | {check.loss_kind} | "
                  f"{sum(r.passed for r in rows)}/{len(rows)} | {rel:.1e} | {beyond:.1e} | "
                  f"{pcc:.5f} | {sum(r.noisy for r in rows)} | {f64} | {untraced} | "
                  f"{time.perf_counter() - start:.0f} |", flush=True)  # fmt: skip
            for r in (r for r in rows if not r.passed):
                print(f"<!-- FAIL {family}/{name} {precision} {r.name} {r.shape}: max rel err "
                      f"{r.max_rel_err:.2e}, beyond {r.beyond_noise:.2e}, PCC {r.pcc:.5f}, "
                      f"noise {r.noise:.1e}, vs {r.reference} -->", file=sys.stderr)  # fmt: skip
    for p, (n, ok, rel, beyond, pcc) in totals.items():
        print(f"{p}: {ok}/{n} exports pass; max rel err <= {rel:.1e}, beyond noise <= "
              f"{beyond:.1e}, PCC >= {pcc:.5f}")  # fmt: skip
    for why, names in no_float64.items():
        print(f"no float64 reference ({why}): {', '.join(names)}")
    for m in missing:
        print(f"not cached (make it with torch: tests/hf_exports.py): {m}")
    for r in refused:
        print(f"refused by the frontend: {r}")


if __name__ == "__main__":
    main()
