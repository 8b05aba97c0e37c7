"""The `wsecc` command line.

Errors in the user's input print one line on stderr and exit with code 2 (a traceback only
with --debug); outputs are written to a temporary folder and moved into place at the end, so
a failed or interrupted compile leaves nothing half-written.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from wsecc import profiling
from wsecc.analysis import flops_per_sample, fused_ops, param_count
from wsecc.compiler import VALIDATE_AUTO_MAX_PARAMS, Compilation
from wsecc.errors import WseccError, one_line
from wsecc.frontend.bind import memory_bytes
from wsecc.frontend.common import widened_text
from wsecc.frontend.hf_export import cmd_export
from wsecc.kernels import fit_bounds
from wsecc.options import Options, add_flags, argparse_type, from_args, option
from wsecc.passes.lower import lower_to_kernels
from wsecc.pm import Level, check_level
from wsecc.report.artifacts import PNG_AUTO_MAX_PARAMS
from wsecc.report.diff import diff_reports, format_diff, load_report
from wsecc.report.outdir import check_compile_output, check_sweep_output
from wsecc.targets import list_targets, load_target
from wsecc.version import __version__
from wsecc.view import load_outdir, render_viewer
from wsecc.view.outdir import system_panels
from wsecc.vocab import Precision

EXAMPLES = """examples:
  wsecc compile samples/gpt2_legacy_op17.onnx --seq 32
  wsecc compile model.onnx --batch 4 --seq 512 --target wse3 --precision fp32 -o out/
  wsecc compile model.onnx --placer cpsat --time-budget 60 --deterministic --seed 1
  wsecc compile gpt3-20b.onnx --weights inputs --seq 2048     (a weightless export: README)
  wsecc check model.onnx --seq 1024 --target wse2
  wsecc inspect samples/bert_dynamo.onnx --batch 2 --seq 16 --target wse2 --json
  wsecc simulate out/ --sim l0 --precision fp32
  wsecc view out/
  wsecc diff greedy.wsecc/ cpsat.wsecc/
  wsecc targets
  wsecc sweep study.toml -o study.sweep --workers 2
  wsecc sweep report study.sweep --measured published.csv
"""


_NOTES = {
    "validate": f" (default: on for models up to {VALIDATE_AUTO_MAX_PARAMS / 1e6:g}M parameters)",
    "png": f" (default: on for models up to {PNG_AUTO_MAX_PARAMS / 1e6:g}M parameters)",
}
_CONTEXT = argparse_type(option("seq"))
OUT_HELP = (
    "output folder (default MODEL_STEM.wsecc/): a new folder, an empty one, or a previous "
    "wsecc output, which is replaced; never the model's own folder, '.', or another folder "
    "holding other files"
)


def _add_model_args(p: argparse.ArgumentParser, command: str, **defaults: Any) -> None:
    """The model positional, every option `command` takes (`wsecc.options.add_flags`: flags,
    checks and help from the one option definition), --json and --debug."""
    p.add_argument("model", help="path to an .onnx file")
    add_flags(p, command, defaults, notes=_NOTES)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--debug", action="store_true", help="show tracebacks")


WORKER_BYTES = 400 << 20
"""Memory one sweep worker is given in `--workers`' ceiling: a worker is a Python interpreter
holding the compiler; `wsecc compile` of the GPT-2 sample at --seq 16 peaked at 0.4 GB here
(measured, /usr/bin/time), bigger models take more."""


def _workers(text: str) -> int:
    """`--workers`: a positive integer, at most as many as this machine's memory holds at
    WORKER_BYTES each (10^9 workers would spawn as many interpreters as there are points)."""
    n = _positive_int(text)
    most = max(1, memory_bytes() // WORKER_BYTES)
    if n > most:
        raise argparse.ArgumentTypeError(
            f"{n:,} workers; this machine's memory holds at most {most:,} (0.4 GB each)"
        )
    return n


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def _load(args: argparse.Namespace) -> Any:
    """Load, bind and fuse the model as `wsecc compile` does (inspect and check stop there)."""
    kw = from_args(args)
    options = Options(**kw | {"target": kw["target"] or "wse2", "batch": kw["batch"] or 1})
    return Compilation.load(args.model, options).fuse()


def cmd_targets(args: argparse.Namespace) -> int:
    targets = [load_target(n) for n in list_targets()]
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "name": t.name,
                        "summary": t.summary(),
                        "usable_pes": t.usable_pes,
                        "color_budget": t.color_budget,
                    }
                    for t in targets
                ],
                indent=1,
            )
        )
    else:
        for t in targets:
            print(t.summary())
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    c = _load(args)
    fused, info = c.fused, c.import_info
    sizing = None
    if args.target:
        sizing = c.lower_and_size().sizing
    out: dict[str, Any] = {
        "model": str(args.model),
        "bindings": info.bindings,
        "params": param_count(fused),
        "flops_per_sample": flops_per_sample(fused),
        "ops_raw": info.raw_ops,
        "ops_after": fused.op_histogram(),
        "fused": [{"op": f["op"], "onnx_nodes": f["onnx_nodes"]} for f in fused_ops(fused)],
        "unsupported": [],
    }
    if sizing is not None:
        report = c.report()
        out["kernels"] = [
            {k: v for k, v in r.items() if k not in ("sram", "sram_bytes_per_pe_max")}
            | {"sram_bytes_per_pe": r["sram_bytes_per_pe_max"]}
            for r in report["kernels"]
        ]
        out["sizing"] = report["sizing"]
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(
        f"{args.model}: {sum(info.raw_ops.values())} ONNX nodes, bindings {info.describe_bindings()}"
        + (f"; {widened_text(info.widened)}" if info.widened else "")
    )
    print(f"params {out['params']:,}   FLOPs/sample {out['flops_per_sample']:,}")
    print("ops (raw):   " + ", ".join(f"{k} {v}" for k, v in info.raw_ops.items()))
    print("ops (fused): " + ", ".join(f"{k} {v}" for k, v in fused.op_histogram().items()))
    for f in out["fused"]:
        nodes = f["onnx_nodes"]
        print(
            f"  {f['op']:<11} <- {len(nodes)} ONNX nodes: {', '.join(nodes[:3])}{' ...' if len(nodes) > 3 else ''}"
        )
    if sizing is not None:
        print(
            f"\n{'kernel':<22} {'kind':<12} {'PEs':>8} {'region':>11} {'SRAM B/PE':>10} {'cycles/sample':>14}  ONNX nodes"
        )
        for r in out["kernels"]:
            reg = f"{r['region']['h']}x{r['region']['w']}"
            nodes = r["onnx_nodes"]
            print(
                f"{r['name']:<22} {r['kind']:<12} {r['pes']:>8,} {reg:>11} {r['sram_bytes_per_pe']:>10,} {r['cycles_per_sample']:>14,.0f}  {nodes[0] if nodes else ''}{' ...' if len(nodes) > 1 else ''}"
            )
        print(sizing.summary())
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Does it load, bind, convert and fit? Every problem in one error; seconds, no placement."""
    from wsecc.frontend.onnx import (
        default_seq,
        load_model,
        resolve_bindings,
        unsupported_ops,
    )

    target = load_target(args.target)
    model = load_model(args.model, lazy_weights=True)  # read for its bindings only
    try:
        seq = args.seq or default_seq(model)[0]
        resolve_bindings(model, args.batch or 1, seq, dict(args.dims))
    except WseccError as e:  # folding needs the bindings: name the ops now, unfolded
        bad = unsupported_ops(model)
        ops = f"; {len(bad)} unsupported ops before folding: " + ", ".join(bad) if bad else ""
        raise WseccError(f"{e}{ops}") from None
    del model  # converting the folded graph names every op left unsupported
    c = _load(args)
    fused, info = c.fused, c.import_info
    check_level(fused, Level.FUSED, "the input of pass lower")  # what compile refuses
    kg = lower_to_kernels(fused)
    bounds = fit_bounds(kg, target, Precision(args.precision), chunk_tokens=args.chunk_tokens)
    result = {
        "model": str(args.model),
        "ok": bounds.fits,
        "bindings": info.bindings,
        "ops_after": fused.op_histogram(),
        "target": target.name,
        "precision": args.precision,
        "kernels": len(kg.kernels),
        "flows": len(kg.flows),
        "bounds": {
            **bounds.to_json(),
            "colors_min": 1 if kg.flows else 0,
            "color_budget": target.color_budget,
        },
    }
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        verdict = "fits" if bounds.fits else "does NOT fit"
        print(
            f"{args.model}: {verdict} {target.name} ({args.precision}): {len(fused.nodes)} ops after "
            f"fusion, {len(kg.kernels)} kernels; needs >= {bounds.min_pes:,} of "
            f"{bounds.usable_pes:,} PEs, >= {bounds.min_sram_per_pe:,} of "
            f"{bounds.sram_per_pe:,} B SRAM/PE; {target.color_budget} colors for "
            f"{len(kg.flows)} flows (the per-router bound needs a placement: wsecc compile)"
        )
    if not bounds.fits:
        raise WseccError(
            f"{args.model} does not fit {target.name}: its kernels need >= {bounds.min_pes:,} PEs "
            f"at their smallest shapes, {bounds.usable_pes:,} are usable; would help: a shorter "
            "sequence, fp16 or mixed storage, a bigger target"
        )
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    a, b = load_report(args.a), load_report(args.b)
    rows = diff_reports(a, b)
    print(json.dumps(rows, indent=1) if args.json else format_diff(a, b, rows))
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    """Re-simulate a saved compile (another simulator level or precision) and update its folder."""
    from wsecc.progress import StageDisplay

    folder = Path(args.outdir)
    with StageDisplay(quiet=args.json) as display:
        saved = Compilation.from_outdir(folder, display.update)
        changes = {"sim": args.sim, "precision": args.precision, "validate": args.validate}
        c = saved.with_options(**{k: v for k, v in changes.items() if v is not None})
        c.simulate()
        c.write(folder, keep=True)
    if args.json:
        print(json.dumps(c.report(), indent=1))
    else:
        display.summary(c)
    return 1 if c.numerics is not None and not c.numerics.passed else 0


def cmd_view(args: argparse.Namespace) -> int:
    """Draw a saved compile again: viewer.html (and placement.png, system 0's) from its output
    folder, with every system's panel for a compile over several systems."""
    from wsecc.view.png import write_placement_png  # matplotlib, on first use

    folder = Path(args.outdir)
    v = load_outdir(folder)
    html = render_viewer(v.program, title=v.title, limits=v.limits, systems=system_panels(v))
    out = folder / "viewer.html"
    tmp = out.with_name(".viewer.html.tmp")
    try:
        tmp.write_text(html)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)  # left only when the replace failed
    if args.png:
        write_placement_png(
            folder / "placement.png", v.program.kg, v.program.placement, v.program.target,
            v.title, limits=v.limits, routing=v.program.routing, replicas=v.program.replicas,
        )  # fmt: skip
    print(out.resolve().as_uri())
    return 0


def _options(args: argparse.Namespace) -> Any:
    context = getattr(args, "context", None)
    if context is not None and args.seq is not None and context != args.seq:
        raise WseccError(f"--context {context} and --seq {args.seq} disagree: give one")
    return Options(**from_args(args, seq=context or args.seq))


def cmd_compile(args: argparse.Namespace) -> int:
    from wsecc.progress import StageDisplay

    model = Path(args.model)
    out_dir = Path(args.out) if args.out else Path(f"{model.stem}.wsecc")
    inputs = [model] + [Path(p) for p in (args.pins, args.inputs, args.dump_dir) if p]
    check_compile_output(out_dir, inputs)  # before any work: never the user's folder
    options = _options(args)
    with StageDisplay(quiet=args.json) as display:
        c = Compilation.load(model, options, display.update).run()
        written = c.write(out_dir)
        display.update(
            "write", f"{out_dir}/ ({', '.join(sorted(p.name for p in written.iterdir()))})"
        )
    if args.json:
        print(json.dumps(c.report(), indent=1))
    else:
        display.summary(c)
    checks = (c.numerics, c.gradients, c.generation_check)
    failed = [n for n in checks if n is not None and not n.passed]
    return 1 if failed else 0


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run a sweep spec's points not yet finished in the output folder."""
    from wsecc.progress import SweepDisplay
    from wsecc.sweep import load_spec, run_sweep  # pandas and pyarrow: only for a sweep

    spec = load_spec(args.spec)
    out = Path(args.out) if args.out else Path(f"{spec.path.stem}.sweep")
    check_sweep_output(out, [spec.path])
    with SweepDisplay() as display:
        s = run_sweep(
            spec, out, workers=args.workers, ray=args.ray, retry_failed=args.retry_failed,
            listener=display,
        )  # fmt: skip
    print(
        f"{out}/results.parquet (and results.csv): {s.points} points, {s.skipped} kept from "
        f"before, {s.ran} run, {s.failed} failed"
        + ("; --retry-failed runs the failed ones again" if s.failed else "")
    )
    return 1 if s.failed else 0


def cmd_sweep_report(args: argparse.Namespace) -> int:
    """Draw a sweep's table; compare it with published figures or a golden table."""
    from wsecc.sweep.report import check_golden, parse_tolerances, read_golden, write_report

    folder = Path(args.folder)
    tol = parse_tolerances(args.tolerance)  # the golden and the tolerances before any write
    gold = read_golden(folder, args.check_golden, tol) if args.check_golden else None
    written = write_report(folder, measured=args.measured)
    print(f"{written}")
    if args.check_golden:
        moved = check_golden(folder, args.check_golden, tol, gold)
        for line in moved:
            print(f"moved: {line}")
        if moved:
            print(f"{len(moved)} points moved against {args.check_golden}", file=sys.stderr)
            return 1
        print(f"every point within tolerance of {args.check_golden}")
    return 0


def build_sweep_report_parser() -> argparse.ArgumentParser:
    r = _Parser(
        prog="wsecc sweep report",
        description="Plots of a sweep's results table (PNG and one self-contained HTML page); "
        "with --measured, published figures on the same axes and the ratio per point; with "
        "--check-golden, exit 1 naming the points whose figures moved.",
    )
    r.add_argument("folder", help="a `wsecc sweep` output folder")
    r.add_argument(
        "--measured",
        metavar="FILE.csv",
        help="published figures: columns model, seq, batch (any may be empty) and "
        "tokens_per_s and/or samples_per_s (and optionally other axis columns, e.g. target)",
    )
    r.add_argument(
        "--check-golden",
        metavar="FILE",
        help="a golden results table (results.csv or .parquet) to compare against",
    )
    r.add_argument(
        "--tolerance",
        action="append",
        default=[],
        metavar="COLUMN=REL",
        help="relative tolerance of a column for --check-golden (repeatable; defaults: "
        "figures 1e-6, counts exact, wall times ignored)",
    )
    r.add_argument("--debug", action="store_true", help="show tracebacks")
    r.set_defaults(fn=cmd_sweep_report)
    return r


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line, exit code 2, like every other error."""

    def error(self, message: str) -> NoReturn:
        print(f"wsecc: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="wsecc",
        description="Compile ONNX transformer graphs for a wafer-scale dataflow engine.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"wsecc {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser(
        "compile", help="run every built stage on a model and write the output folder"
    )
    _add_model_args(c, "compile")
    c.add_argument("--out", "-o", default=None, help=OUT_HELP)
    c.add_argument(
        "--context",
        type=_CONTEXT,
        default=None,
        metavar="C",
        help="generate mode: positions each sequence's K/V cache holds, prompt included; binds "
        "the sequence dim as --seq does (the two are one option)",
    )
    c.add_argument(
        "--profile",
        action="store_true",
        help="print where the compile's time went (cProfile, top functions; or WSECC_PROFILE=1)",
    )
    c.set_defaults(fn=cmd_compile)

    i = sub.add_parser("inspect", help="op histograms, parameters, FLOPs and fused ops")
    _add_model_args(i, "inspect", target=None)
    i.set_defaults(fn=cmd_inspect)

    sub.add_parser(
        "ispd2020",
        help="size, place and score an ISPD 2020 contest benchmark (wsecc ispd2020 --help)",
        add_help=False,
    )
    t = sub.add_parser("targets", help="list the built-in targets with their key figures")
    t.add_argument("--json", action="store_true")
    t.add_argument("--debug", action="store_true")
    t.set_defaults(fn=cmd_targets)

    s = sub.add_parser(
        "simulate",
        help="re-simulate a saved compile at another level or precision; updates OUTDIR",
    )
    s.add_argument("outdir", help="a `wsecc compile` output folder")
    add_flags(
        s, "simulate", {"precision": None, "validate": None},
        notes={n: " (default: the compile's)" for n in ("precision", "validate")},
    )  # fmt: skip
    s.add_argument("--json", action="store_true", help="print the updated report as JSON")
    s.add_argument("--debug", action="store_true", help="show tracebacks")
    s.set_defaults(fn=cmd_simulate)

    v = sub.add_parser(
        "view",
        help="draw a saved compile again: write OUTDIR/viewer.html and print its file:// URL",
    )
    v.add_argument("outdir", help="a `wsecc compile` output folder")
    v.add_argument("--png", action="store_true", help="also redraw placement.png")
    v.add_argument("--debug", action="store_true", help="show tracebacks")
    v.set_defaults(fn=cmd_view)

    d = sub.add_parser(
        "diff",
        help="quality of results of two compiles side by side, with ratios B/A",
        description="Compare two compiles (output folders or report.json files): PEs, SRAM, "
        "wirelength, gap, colors, throughput, latency, utilization, numerics.",
    )
    d.add_argument("a", help="first compile's output folder (or its report.json)")
    d.add_argument("b", help="second compile's output folder (or its report.json)")
    d.add_argument("--json", action="store_true", help="rows as JSON")
    d.add_argument("--debug", action="store_true", help="show tracebacks")
    d.set_defaults(fn=cmd_diff)

    k = sub.add_parser(
        "check",
        help="does it load, bind, convert and fit? (seconds; all problems in one error)",
    )
    _add_model_args(k, "check")
    k.set_defaults(fn=cmd_check)

    x = sub.add_parser(
        "export",
        help="a Hugging Face config.json becomes a weightless ONNX export (pip install "
        "'wsecc[export]'); compile it with --weights inputs",
    )
    x.add_argument("config", help="the model's config.json as Hugging Face publishes it")
    x.add_argument("-o", "--out", required=True, help="the ONNX file to write")
    x.add_argument("--debug", action="store_true", help="show tracebacks")
    x.set_defaults(fn=cmd_export)

    w = sub.add_parser(
        "sweep",
        help="compile every point of a sweep spec into one results table (resumable); "
        "`wsecc sweep report DIR` draws it",
        description="Run a TOML spec's points (models x axes, a list under a model its own axis; keys "
        "are wsecc compile's long options), a local process pool by default or Ray, into DIR/results.parquet and "
        "results.csv, one row per point as it finishes. Re-running skips finished points. "
        "Exit 1 when a point failed. `wsecc sweep report DIR --help` for the plots.",
    )
    w.add_argument("spec", help="the sweep spec (TOML: [[models]], [axes], [fixed])")
    w.add_argument("--out", "-o", default=None, help="output folder (default SPEC_STEM.sweep/)")
    w.add_argument(
        "--workers",
        type=_workers,
        default=None,
        help=f"points compiled at once (default the CPU count, {os.cpu_count()})",
    )
    w.add_argument(
        "--ray",
        default=None,
        metavar="ADDRESS",
        help="run on a Ray cluster at ADDRESS, or `local` to start one here "
        "(pip install 'wsecc[ray]')",
    )
    w.add_argument(
        "--retry-failed", action="store_true", help="run the points that failed before again"
    )
    w.add_argument("--debug", action="store_true", help="show tracebacks")
    w.set_defaults(fn=cmd_sweep)
    return p


GC_THRESHOLDS = (100_000, 20, 10)
"""The cycle collector's thresholds while a command runs. A compile allocates millions of
small objects and keeps most of them to its end (the IR, sizing's menus, L1's events), with few
reference cycles among them: at Python's default (700, 10, 10) the collector's passes over them
took 1-1.5 s of a GPT-2 small compile and freed next to nothing. Young objects are collected
every 100,000 allocations instead; reference counting frees the rest as before."""


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["ispd2020"]:  # its own argument parser and error handling
        from wsecc.ispd2020.cli import main_ispd2020

        return main_ispd2020(argv[1:])
    try:  # the flags' checks read files (--pins, --target): a bug there is still one line
        if argv[:2] == ["sweep", "report"]:
            args = build_sweep_report_parser().parse_args(argv[2:])
        else:
            args = build_parser().parse_args(argv)
    except Exception as e:
        if "--debug" in argv:
            traceback.print_exc()
        msg = one_line(str(e).splitlines()[0] if str(e) else "")
        print(
            f"wsecc: internal error: {type(e).__name__}: {msg} (reading the command line; rerun "
            "with --debug)",
            file=sys.stderr,
        )
        return 2
    interrupted = False

    def on_sigint(signum: int, frame: object) -> None:
        nonlocal interrupted
        interrupted = True
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    thresholds = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        if profiling.wanted(getattr(args, "profile", False)):
            return profiling.run_profiled(lambda: int(args.fn(args)))
        return int(args.fn(args))
    except WseccError as e:  # every error a user can cause (wsecc.errors)
        if getattr(args, "debug", False):
            traceback.print_exc()
        print(f"wsecc: error: {one_line(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("wsecc: interrupted", file=sys.stderr)
        return 130
    except OSError as e:  # the environment, not wsecc: a path that cannot be read or written
        if e.filename is None or interrupted:
            raise
        if getattr(args, "debug", False):
            traceback.print_exc()
        target = f" -> {e.filename2}" if e.filename2 else ""
        print(
            f"wsecc: error: {one_line(str(e.filename))}{target}: {e.strerror or e}; check the "
            "path and its permissions",
            file=sys.stderr,
        )
        return 2
    except MemoryError:  # not a bug: the model, or the dims it was bound to, are too big here
        if getattr(args, "debug", False):
            traceback.print_exc()
        print(
            "wsecc: error: out of memory; bind smaller dims (--batch, --seq, --dim) or use a "
            "machine with more memory",
            file=sys.stderr,
        )
        return 2
    except Exception as e:  # a bug in wsecc, not in the input: still one line unless --debug
        if interrupted:  # Ctrl-C inside an extension module's import surfaces as ImportError
            print("wsecc: interrupted", file=sys.stderr)
            return 130
        if getattr(args, "debug", False):
            traceback.print_exc()
        msg = str(e).splitlines()[0] if str(e) else ""
        print(
            f"wsecc: internal error: {type(e).__name__}: {one_line(msg)} (rerun with --debug)",
            file=sys.stderr,
        )
        return 2
    finally:
        signal.signal(signal.SIGINT, previous)
        gc.set_threshold(*thresholds)


if __name__ == "__main__":
    sys.exit(main())
