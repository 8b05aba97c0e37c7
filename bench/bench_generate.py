"""Token generation against what wafer-scale systems measured (measurements.md §6).

    python bench/bench_generate.py                 # Llama 3.1 8B on wse3 and wse2, 70B's fit
    python bench/bench_generate.py --only wse3     # the rows whose target is wse3
    python bench/bench_generate.py --context 8192  # another context (default 2048)

Each row compiles a weightless export of `bench/export_models.py --weightless` (Llama 3.1 8B:
32 layers, d 4096, 32 heads, 8 K/V heads, FFN 14336, vocab 128256; 70B: 80 layers, d 8192,
64 heads, 8 K/V heads, FFN 28672) in generate mode (`wsecc.compile(..., mode="generate",
weights="inputs")`, mixed precision, CP-SAT placement with its default budget, batch 1: one
user; the 8-token chunks of the prefill unless a row says), and prints a markdown row: wsecc's
decode tokens/s per sequence (for a one-layer export, 1 / (its layer's latency x the model's
layers), as WaferLLM measured it), the published figure,
their ratio, the time to first token, the per-layer latency and the phase that bounds the step,
and the compile's wall time. Nothing is fitted: the decode model's numbers are the target's
(`wsecc.kernels.decode`). A model whose weights do not fit one wafer prints how many it needs.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
WEIGHTLESS = HERE / "models" / "weightless"


@dataclass(frozen=True)
class Row:
    model: str  # export name under bench/models/weightless
    target: str
    published: float | None  # decode tokens/s per user
    source: str
    chunk_tokens: int = 8
    layers_of: int = 0  # a one-layer export standing for a model of this many layers


ROWS = (
    Row("llama-3.1-8b", "wse3", 1800.0, "Cerebras Inference, Aug 2024, CS-3, 16-bit weights"),
    Row(
        "llama-3.1-8b",
        "wse2",
        None,
        "no whole-model WSE-2 decode figure is published; at the default 8-token chunks the "
        "prefill's buffers beside the weights do not fit 85% of the wafer, at 2 they do",
        chunk_tokens=2,
    ),
    Row(
        "llama-3.1-8b-layer",
        "wse2",
        2700.0,
        "WaferLLM (OSDI'25), WSE-2: one Llama3-8B layer on a P x P region, 0.37 ms per token "
        "= its per-layer time (11.6 µs) x 32; ours: the layer's latency on the wafer x 32",
        layers_of=32,
    ),
    Row("llama-3.1-70b", "wse3", 450.0, "Cerebras Inference, Aug 2024, four CS-3 systems"),
)


def run(row: Row, context: int, prompt: int) -> str:
    import wsecc
    from wsecc.errors import WseccError

    path = WEIGHTLESS / f"{row.model}.onnx"
    head = f"| {row.model} | {row.target} |"
    if not path.is_file():
        return f"{head} missing: python bench/export_models.py --weightless --only {row.model} |"
    t0 = time.perf_counter()
    try:
        c = wsecc.compile(
            path, mode="generate", weights="inputs", target=row.target, seq=context,
            prompt=prompt, batch=1, chunk_tokens=row.chunk_tokens,
        )  # fmt: skip
    except WseccError as e:
        return f"{head} {e} ({time.perf_counter() - t0:.0f} s) |"
    seconds = time.perf_counter() - t0
    g = c.generation
    assert g is not None
    layers = [(n, r) for n, r in g.layers() if n.startswith("L")]
    per_layer = (
        sum(sum(r.values()) for _, r in layers) / len(layers) / g.clock_hz if layers else 0.0
    )
    phases = (
        g.phases() if not row.layers_of else dict(sum((Counter(r) for _, r in layers), Counter()))
    )
    total = sum(phases.values())
    split = ", ".join(f"{p} {100 * v / total:.0f}%" for p, v in phases.items() if v)
    bound = max(phases, key=lambda p: phases[p])
    rate = 1 / (per_layer * row.layers_of) if row.layers_of else g.tokens_per_s_per_sequence
    ratio = f"{rate / row.published:.2f}" if row.published else ""
    published = f"{row.published:,.0f}" if row.published else ""
    return (
        f"{head} {rate:,.0f} | {published} | {ratio} | "
        f"{g.ttft_s * 1e3:,.2f} ms | {per_layer * 1e6:,.1f} µs x {len(layers)} | "
        f"{bound} ({split}) | {seconds:.0f} s |"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="a target or model name to keep")
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--prompt", type=int, default=128)
    args = ap.parse_args(argv)
    print(
        f"machine: {platform.machine()}, {platform.python_version()}, "
        f"command: python {' '.join(sys.argv)}; context {args.context}, prompt {args.prompt}"
    )
    print(
        "| model | target | wsecc tokens/s per user | published | ratio | first token | "
        "per layer | decode bound | compile |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in ROWS:
        if args.only and args.only not in (row.model, row.target):
            continue
        print(run(row, args.context, args.prompt), flush=True)
    for row in ROWS:
        if not args.only or args.only in (row.model, row.target):
            print(f"- {row.model} on {row.target}: {row.source}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
