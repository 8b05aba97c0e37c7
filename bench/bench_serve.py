"""Serving speeds on several systems against the published figures (issue 30, measurements.md §6).

    python bench/bench_serve.py                          # every row
    python bench/bench_serve.py --only llama-3.1-70b     # one row
    python bench/bench_serve.py --models /tmp/serve      # where the weightless exports are

Each row compiles a weightless export (`wsecc export bench/configs/NAME.json -o NAME.onnx`, made
here when `--models` lacks it) in generate mode with `--systems auto` on its target (16-bit
weights in mixed precision, batch 1: one user, a 2,048-position context and a 128-token prompt,
CP-SAT placement at its default budget unless `--placer greedy`), as a child process under `/usr/bin/time -v`, and prints
a markdown row:

- published: the public figure (measurements.md §6) and what it relied on that wsecc does not
  model (speculative decoding, another precision), said in the row, never adjusted for; a model
  with no published wafer-scale figure (Mixtral 8x7B, Qwen3-30B-A3B) has a row without one
  (no ratio), beside its memory-roofline baseline;
- wsecc: decode tokens/s per user, the time to first token, the systems `--systems auto` chose,
  what bounds a token (its decode step by phase: weight reads = the matrix-vector multiply-adds
  that read each resident weight once; hops = flows, multicasts and reductions on the fabric;
  K/V reads; system crossings; host I/O), and the ratio to the published figure;
- sensitivity: the tokens/s were each crossing between systems to cost the target's 200 us per
  TCP transaction (`system.swarmx_hop_s`, a host-runtime memcpy overhead) in place of its
  `system.crossing_s` (2 us on wse3, an Ethernet hop: see the target's [sources]): the same
  decode step with N - 1 crossings of the one figure swapped for the other;
- baseline: the memory roofline of the chosen systems, their aggregate SRAM read bandwidth
  (read ports x PEs x clock x systems) over the weight bytes a token reads (every weight once):
  what a reader would guess with no model, beside what the model computes;
- the compile's wall time, CPU time (user + system) and peak memory on this machine.

Nothing is fitted to these rows. A row whose model does not fuse, or is not exported, says so
(`does not fuse: <reason>`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIGS = HERE / "configs"
WEIGHTLESS = HERE / "models" / "weightless"

BOUND_WORDS = {
    "compute": "weight reads",
    "cache": "K/V reads",
    "reduction": "hops",
    "broadcast": "hops",
    "flows": "hops",
    "crossings": "system crossings",
    "host": "host",
}
"""The decode phases (`wsecc.modes.generate.DECODE_PHASES`) in the table's words."""

TCP_TRANSACTION_S = 200e-6
"""The sensitivity column's crossing: "200 us overhead per TCP transaction" (Cerebras
csl-examples benchmarks/bandwidth-test/run.py docstring; wafer-facts.md, host I/O), the
targets' `system.swarmx_hop_s`."""


@dataclass(frozen=True)
class Row:
    model: str  # bench/configs/<model>.json
    target: str
    published: float | None  # decode tokens/s per user; None: no wafer-scale figure is public
    source: str  # where the figure is from, and what it relied on that wsecc does not model
    published_ttft_s: float | None = None
    published_systems: str = "not stated"
    layers_of: int = 0  # a one-layer export standing for a model of this many layers
    also: tuple[tuple[float, str], ...] = ()  # further published figures for the same model:
    # (tokens/s, what they relied on), each held against the same compile as its own table row
    active_b: float | None = None  # parameters a token reads, in billions (the model's card)


ANCHOR_TOKENS_S, ANCHOR_ACTIVE_B = 1800.0, 8.03
"""The trivial baseline "8B scaled": Cerebras's Llama 3.1 8B figure on one CS-3 (Aug 2024,
measurements.md §6) times 8.03 B (its card's parameters) over a row's active parameters."""


AFTER_OCT_2024 = (
    "; published after the October 2024 stack (new kernels, asynchronous wafer I/O, "
    "speculative decoding: measurements.md §6), whose speculative decoding wsecc does not "
    "model; the source does not say whether this row uses it"
)
"""What the rows published after October 2024 say of the stack they ran on (stated, not
adjusted for)."""


ROWS = (
    Row(
        "llama-3.1-8b", "wse3", 1800.0,
        "Cerebras Inference, Aug 2024, CS-3, 16-bit weights", published_systems="1",
        active_b=8.03,
    ),
    Row(
        "llama-3.1-70b", "wse3", 450.0,
        "Cerebras Inference, Aug 2024, 16-bit weights, the model over four CS-3 systems; its "
        "October 2024 row, about 2,100 tokens/s, ran on new kernels, asynchronous wafer I/O "
        "and speculative decoding (measurements.md §6), which wsecc does not model",
        published_systems="4", active_b=70.6,
        also=((2100.0, "Oct 2024: new kernels, async wafer I/O, speculative decoding"),),
    ),
    Row(
        "llama-3.1-405b", "wse3", 969.0,
        "Cerebras Inference, Nov 2024, time to first token 0.24 s; systems and precision not "
        "stated (compiled here in 16-bit weights)" + AFTER_OCT_2024,
        published_ttft_s=0.24, active_b=405.9,
    ),
    Row(
        "llama-4-maverick", "wse3", 2500.0,
        "May 2025, over 2,500 tokens/s per user measured by Artificial Analysis; systems not "
        "stated" + AFTER_OCT_2024,
        active_b=17.0,  # the card: 17B active of 400B
    ),
    Row(
        "gpt-oss-120b", "wse3", 3000.0,
        "2025, about 3,000 tokens/s; systems not stated; gpt-oss ships its experts in MXFP4 "
        "(4-bit), compiled here in 16-bit weights" + AFTER_OCT_2024,
        active_b=5.1,  # the card: 5.1B active of 117B
    ),
    Row(
        "llama-3.1-8b-layer", "wse2", 2700.0,
        "WaferLLM (OSDI'25), WSE-2, 16-bit: one Llama3-8B layer on a P x P region, 0.37 ms per "
        "token = its per-layer time x 32; ours: the one-layer export's step x 32 (its layer "
        "alone on the wafer, a 256-token vocabulary)",
        published_systems="1 (one layer)", layers_of=32,
    ),
    Row(
        "mixtral-8x7b", "wse3", None,
        "no published figure for Mixtral 8x7B on a wafer-scale system; its memory-roofline "
        "baseline only", published_systems="none", active_b=12.9,  # the card: 12.9B active
    ),
    Row(
        "qwen3-30b-a3b", "wse3", None,
        "no published figure for Qwen3-30B-A3B on a wafer-scale system; its memory-roofline "
        "baseline only", published_systems="none", active_b=3.3,  # the card: 3.3B active
    ),
)  # fmt: skip


def export(model: str, models: Path) -> tuple[Path, str]:
    """The weightless export of `model` under `models`, made from its config when missing; the
    path and what making it took ("" when it was there)."""
    path = models / f"{model}.onnx"
    if path.is_file():
        return path, ""
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "wsecc.cli", "export", str(CONFIGS / f"{model}.json"),
           "-o", str(path)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise RuntimeError(f"export failed: {why}")
    return path, f"exported in {time.perf_counter() - t0:.0f} s"


def compile_row(
    path: Path, row: Row, context: int, prompt: int, placer: list[str]
) -> tuple[dict, float, float, float]:
    """The report of `wsecc compile` on `path` (generate, --systems auto), its wall seconds,
    CPU seconds (user + system) and peak resident memory in GB (`/usr/bin/time -v`)."""
    out = Path(tempfile.mkdtemp(prefix=f"serve-{row.model}-"))
    systems = "1" if row.layers_of else "auto"
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "wsecc.cli", "compile", str(path),
           "--weights", "inputs", "--mode", "generate", "--systems", systems, "--target",
           row.target, "--context", str(context), "--prompt", str(prompt), *placer,
           "-o", str(out / "out")]  # fmt: skip
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    gb = int(rss.group(1)) / 1e6 if rss else float("nan")
    cpu = sum(
        float(m.group(1))
        for m in re.finditer(r"(?:User|System) time \(seconds\): ([0-9.]+)", done.stderr)
    )
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.startswith("wsecc: error")]
        raise RuntimeError((lines or ["failed: " + done.stderr.strip()[-200:]])[-1])
    return json.loads((out / "out" / "report.json").read_text()), seconds, cpu, gb


def with_crossing(rep: dict, systems: int, crossing_s: float) -> float:
    """Decode tokens/s per user were each of the systems - 1 crossings to cost `crossing_s`
    in place of the target's `system.crossing_s` (the sensitivity column, module doc)."""
    from wsecc.targets import load_target

    t = load_target(rep["target"]["name"])
    if systems < 2 or t.system is None:
        return float(rep["performance"]["decode"]["tokens_per_s_per_sequence"])
    step = rep["performance"]["decode"]["latency_s"]
    return 1 / (step + (systems - 1) * (crossing_s - t.system.crossing_s))


def baseline(rep: dict, systems: int) -> float:
    """The memory roofline (module doc): tokens/s at which the chosen systems' SRAM read ports
    read every weight once per token."""
    from wsecc.targets import load_target

    t = load_target(rep["target"]["name"])
    per_pe = rep["performance"]["decode"]["roofline"]["sram_read_bytes_per_pe_s"]
    weight_bytes = rep["model"]["params"] * 2  # 16-bit weights
    return systems * t.usable_pes * per_pe / weight_bytes


def bound_text(phases: dict[str, float]) -> str:
    words: dict[str, float] = {}
    for p, s in phases.items():
        words[BOUND_WORDS.get(p, p)] = words.get(BOUND_WORDS.get(p, p), 0.0) + s
    total = sum(words.values()) or 1.0
    top = max(words, key=lambda w: words[w])
    split = ", ".join(f"{w} {100 * s / total:.0f}%" for w, s in words.items() if s)
    return f"{top} ({split})"


def run(row: Row, models: Path, context: int, prompt: int, placer: list[str]) -> str:
    published = "none" if row.published is None else f"{row.published:,.0f}"
    head = f"| {row.model} | {row.target} | {published} |"
    try:
        path, made = export(row.model, models)
        rep, seconds, cpu, gb = compile_row(path, row, context, prompt, placer)
    except RuntimeError as e:
        msg = str(e)
        generic = "no decode model" in msg or "known kind" in msg or "fuse" in msg
        what = f"does not fuse: {msg}" if generic else msg
        return f"{head} {what} | | | | | | | | |"
    perf = rep["performance"]
    d = perf["decode"]
    systems = perf.get("systems", 1)
    if row.layers_of:
        layers = [r for r in d["layers"] if r["layer"].startswith("L")]
        rate = 1 / (sum(r["latency_s"] for r in layers) / len(layers) * row.layers_of)
    else:
        rate = d["tokens_per_s_per_sequence"]
    roof = baseline(rep, systems)
    tcp = with_crossing(rep, systems, TCP_TRANSACTION_S)
    ratio = "—" if row.published is None else f"{rate / row.published:.2f}"
    tcp_ratio = "" if row.published is None else f" ({tcp / row.published:.2f})"
    ttft = f"{perf['ttft_s']:.3f} s" + (
        f" (published {row.published_ttft_s} s)" if row.published_ttft_s else ""
    )
    scaled = (
        f"{ANCHOR_TOKENS_S * ANCHOR_ACTIVE_B / row.active_b:,.0f}"
        + (
            f" ({ANCHOR_TOKENS_S * ANCHOR_ACTIVE_B / row.active_b / row.published:.2f})"
            if row.published
            else ""
        )
        if row.active_b
        else "—"
    )
    main = (
        f"{head} {rate:,.0f} | {ratio} | {scaled} | {ttft} | {systems} "
        f"(published {row.published_systems}) | {bound_text(d['phases_s'])} | "
        f"{'—' if row.layers_of else f'{tcp:,.0f}{tcp_ratio}'} | {roof:,.0f} ({rate / roof:.4f}) | "
        f"{seconds:.0f} s wall, {cpu:.0f} s CPU, {gb:.1f} GB{', ' + made if made else ''} |"
    )
    later = [
        f"| {row.model} ({label}) | {row.target} | {pub:,.0f} | {rate:,.0f} (the row above) | "
        f"{rate / pub:.2f} | | | | | {tcp:,.0f} ({tcp / pub:.2f}) | | |"
        for pub, label in row.also
    ]
    return "\n".join([main, *later])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="a model name to keep")
    ap.add_argument("--models", type=Path, default=WEIGHTLESS, help="the weightless exports")
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--placer", default="cpsat", help="cpsat (default budget) or greedy")
    ap.add_argument(
        "--deterministic",
        action="store_true",
        help="compile with --deterministic: CP-SAT on one worker at its deterministic time, so "
        "a row is the same on a busy machine as on an idle one",
    )
    args = ap.parse_args(argv)
    placer = ["--placer", args.placer] + (["--deterministic"] if args.deterministic else [])
    args.models.mkdir(parents=True, exist_ok=True)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores (shared), Python "
        f"{platform.python_version()}; command: python {' '.join(sys.argv)}; context "
        f"{args.context}, prompt {args.prompt}, batch 1, mixed precision (16-bit weights), "
        f"placer {' '.join(placer[1:])}"
    )
    print(
        "| model | target | published tokens/s | wsecc tokens/s per user | ratio "
        "| 8B scaled (ratio) | first token "
        "| systems | what bounds a token | tokens/s at 200 us a crossing (ratio) "
        "| memory roofline tokens/s (wsecc / it) | compile |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in ROWS:
        if not args.only or args.only == row.model:
            print(run(row, args.models, args.context, args.prompt, placer), flush=True)
    for row in ROWS:
        if not args.only or args.only == row.model:
            print(f"- {row.model} on {row.target}: {row.source}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
