"""What `wsecc compile` shows while it runs and when it ends.

On a terminal: a spinner on the running stage, one line per finished stage with its time, then
a summary table (rich). Not on a terminal (CI logs, pipes): the same lines as plain text, no
control codes. `--json` silences both; the report goes to stdout instead.
"""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from wsecc.check.numerics import verdict_line
from wsecc.frontend.common import widened_text
from wsecc.limits import Limits, si


def _seconds(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.3g} µs"
    return f"{s * 1e3:.3g} ms" if s < 1 else f"{s:.3g} s"


def summary_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """The summary of one report.json as (label, value) rows; absent stages are left out."""
    rows: list[tuple[str, str]] = []
    m = report.get("model", {})
    if m.get("params") is not None:
        rows.append(("model", f"{m['params']:,} params, {m['flops_per_sample']:,} FLOPs/sample"))
        if m.get("widened"):
            rows[-1] = ("model", f"{rows[-1][1]}; {widened_text(m['widened'])}")
    t = report.get("target", {})
    if t:
        rows.append(("target", f"{t['name']} ({t['fabric']['width']}x{t['fabric']['height']} PEs)"))
    s = report.get("sizing")
    if s:
        rows.append(("kernels", f"{len(report['kernels'])}"))
        rows.append(
            ("PEs used", f"{s['pes_used']:,} ({100 * s['fabric_fraction']:.1f}% of fabric)")
        )
        rows.append(("SRAM max / PE", f"{s['max_sram_bytes_per_pe']:,} B"))
    sram = report.get("sram")
    if sram:
        rows[-1] = (
            "SRAM max / PE",
            f"{sram['max_bytes']:,} B of {sram['budget_bytes']:,} (mean {sram['mean_bytes']:,.0f})",
        )
    r = report.get("routing")
    if r:
        rows.append(
            (
                "colors",
                f"max {r['colors_max']} of {r['color_budget']} (lower bound {r['color_lower_bound']})",
            )
        )
    p = report.get("placement")
    if p:
        rows.append(
            (
                "placement",
                f"{p['placer']}: wirelength {p['objective']:.4g} B·PE, gap {100 * p['gap']:.1f}%"
                f"{' to the ' + p['bound_kind'] + ' bound' if p.get('bound_kind') else ''}"
                f" ({p['status']})",
            )
        )
    perf = report.get("performance")
    if perf:
        rows.append(
            (
                "throughput",
                f"{si(perf['samples_per_s'], 'samples/s')}, {si(perf['tokens_per_s'], 'tokens/s')} ({perf['model']})",
            )
        )
        if perf["model"] == "train":
            rows[-1:-1] = [("mode", f"train, {perf['execution']} ({perf['execution_reason']})")]
            rows.append(
                (
                    "batch",
                    f"{perf['batch']:,} = {perf['systems']} system(s) x {perf['grad_accum']} "
                    f"pass(es) x {perf['micro_batch']:,} samples"
                    + (f" (chosen: {perf['batch_chosen']})" if perf["batch_chosen"] else ""),
                )
            )
            rows.append(("step", _seconds(perf["latency_s"])))
        elif perf["model"] == "generate":
            rows[-1:] = _generation_rows(perf)
        else:
            rows.append(("latency", _seconds(perf["latency_s"])))
        rows.append(("utilization", f"{100 * perf['utilization']:.1f}% of peak"))
    reps = report.get("replicas")
    if reps and "per_copy_samples_per_s" in reps and report.get("mode") != "generate":
        rows.append(("replicas", replicas_text(reps)))
    rows += _systems_rows(report)
    limits = Limits.from_report(report)
    if limits is not None:
        rows.append(("bottleneck", limits.bottleneck_text()))
        if limits.on_wafer:
            rows.append(("on wafer", limits.on_wafer_text()))
    n = report.get("numerics")
    if n and "loss_kind" in n:  # train mode: the gradient check
        failed = [r for r in n["rows"] if r.get("status") == "failed"]
        checked = failed or [r for r in n["rows"] if r.get("status") != "unchecked"]
        worst = max(checked, key=lambda r: r["max_rel_err"], default=None)
        unchecked = n.get("unchecked", [])
        rows.append(
            (
                "gradients",
                f"{'PASS' if n['passed'] else 'FAIL'} ({n['precision']}, loss {n['loss_kind']}): "
                f"{sum(r['passed'] for r in n['rows'])}/{len(n['rows'])} tensors passed against "
                "onnxruntime finite differences"
                + (f", {len(unchecked)} unchecked (not resolved by them)" if unchecked else "")
                + (
                    f", worst {worst['name']}: max rel err {worst['max_rel_err']:.2e}, "
                    f"|g|/|fd| {worst.get('norm_ratio', 1.0):.4f}"
                    if worst
                    else ""
                )
                + (
                    f"; not trained (a learned table held as a constant, unchecked): "
                    f"{', '.join(n['not_trained'])}"
                    if n.get("not_trained")
                    else ""
                )
                + (f"; not trained (buffer): {', '.join(n['buffers'])}" if n.get("buffers") else "")
                + (
                    f"; routers' choices held: {n.get('routing_excluded', 0)} coordinates left "
                    f"out of {n.get('measured', 0) + n.get('routing_excluded', 0)}"
                    if n.get("routers")
                    else ""
                )
                + (f"; untraced {', '.join(n['untraced'])}" if n["untraced"] else ""),
            )
        )
    elif n and "ids_equal" in n:  # generate mode: greedy generation against onnxruntime
        rows.append(("numerics", n["summary"]))
    elif n:
        rows.append(("numerics", verdict_line(n)))
    elif "numerics" in report:
        rows.append(
            ("numerics", report.get("numerics_skipped", "not validated (--validate to run it)"))
        )
    return rows


def _systems_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """A program over several systems (`wsecc.core.partition`): how many and why, and a row per
    system (layers, PEs, resident bytes, time share); nothing for one system."""
    systems, split = report.get("systems", []), report.get("partition")
    if len(systems) < 2 or split is None:
        return []
    out = [
        ("systems", f"{len(systems)}: {split['count_why']}; {split['why']}"),
        ("crossings", f"{len(split['crossings'])} flows, "
         f"{sum(c['bytes_per_sample'] for c in split['crossings']):,.0f} B per sample, "
         f"{_seconds(split['crossing_latency_s'])} latency each of {len(systems) - 1}"),
    ]  # fmt: skip
    for r in systems:
        shared = f", placement of system {r['placed_as']}" if r["placed_as"] != r["system"] else ""
        if r.get("expert_shards"):
            shared += f"; moe shards {', '.join(r['expert_shards'])}"
        out.append(
            (
                f"system {r['system']}",
                f"L{r['first_layer']}-L{r['last_layer']} ({r['layers']} layers), "
                f"{r['kernels']} kernels, {r['pes']:,} PEs, {r['resident_bytes'] / 1e9:,.2f} GB "
                f"resident, {_seconds(r['seconds'])} ({100 * r['time_share']:.0f}%){shared}",
            )
        )
    return out


def _generation_rows(perf: dict[str, Any]) -> list[tuple[str, str]]:
    """Generate mode's rows (`wsecc.modes.generate`): prefill, decode, the token's latency by phase and
    per layer, the decode bound, the K/V cache."""
    d, b = perf["decode"], perf["batch"]
    phases = d["phases_s"]
    total = sum(phases.values()) or 1.0
    layers = [row for row in d["layers"] if row["layer"][:1] == "L" and row["layer"][1:].isdigit()]
    per_layer = (
        f"; {_seconds(sum(r['latency_s'] for r in layers) / len(layers))} per layer x {len(layers)}"
        if layers
        else ""
    )
    return [
        ("mode", f"generate: prompt {perf['prompt']:,}, context {perf['context']:,}, batch {b}"),
        ("first token", f"{_seconds(perf['ttft_s'])} (prefill bound {perf['prefill']['bound']}, "
         f"{perf['prefill']['bound_kind']})"),
        ("decode", f"{d['tokens_per_s_per_sequence']:,.0f} tokens/s per sequence, "
         f"{d['tokens_per_s']:,.0f} tokens/s at batch {b}"),
        ("token latency", f"{_seconds(d['latency_s'])}{per_layer}: "
         + ", ".join(f"{p} {100 * s / total:.0f}%" for p, s in phases.items() if s)),
        ("decode bound", f"{d['bound']}: {d['bound_words']}"),
        ("K/V cache", f"{perf['kv_cache_bytes'] / 2**20:,.1f} MiB, max {perf['kv_bytes_per_pe_max']:,} "
         f"B/PE; largest context that fits {perf['max_context']:,}"),
    ]  # fmt: skip


def replicas_text(reps: dict[str, Any]) -> str:
    """`12 copies (stopped by host I/O): 73 ksamples/s each, 871 ksamples/s total`."""
    copies = f"{reps['k']} cop{'y' if reps['k'] == 1 else 'ies'}"
    why = f" (stopped by {reps['reason']})" if reps["reason"] else ""
    return (
        f"{copies}{why}: {si(reps['per_copy_samples_per_s'], 'samples/s')} each, "
        f"{si(reps['samples_per_s'], 'samples/s')} total"
    )


class StageDisplay:
    """Per-stage progress on stderr; `update(stage, message)` is the compile's progress hook."""

    def __init__(self, *, quiet: bool = False, stream: Any = None) -> None:
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.console = Console(file=self.stream, highlight=False, soft_wrap=True)
        self.status: Any = None
        self.stage = ""

    def __enter__(self) -> StageDisplay:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None

    def update(self, stage: str, message: str) -> None:
        if self.quiet:
            return
        if not message:  # a stage starts
            self.stage = stage
            if self.tty:
                if self.status is None:
                    self.status = self.console.status(f"{stage} ...")
                    self.status.start()
                else:
                    self.status.update(f"{stage} ...")
            return
        line = f"{stage:<10} {message}"
        if self.tty:
            self.console.print(f"[green]✓[/green] {line}")
        else:
            print(line, file=self.stream, flush=True)

    def summary(self, compilation: Any, out: Any = None) -> None:
        """The summary table on stdout (rich on a terminal, aligned text otherwise)."""
        out = out if out is not None else sys.stdout
        rows = summary_rows(compilation.report())
        title = f"{compilation.model_path.name} on {compilation.target.name}"
        if getattr(out, "isatty", lambda: False)():
            table = Table(title=title, show_header=False, title_justify="left")
            table.add_column(style="bold")
            table.add_column()
            for k, v in rows:
                table.add_row(k, v)
            Console(file=out).print(table)
        else:
            print(title, file=out)
            for k, v in rows:
                print(f"  {k:<14} {v}", file=out)


class SweepDisplay:
    """A sweep's progress on stderr (the listener of `wsecc.sweep.run_sweep`): on a terminal a
    bar with points done / failed / running and the time left; otherwise one line per finished
    point."""

    def __init__(self, *, quiet: bool = False, stream: Any = None) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.console = Console(file=self.stream, highlight=False, soft_wrap=True)
        self.progress = Progress(
            TextColumn("sweep"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[state]}"), TimeElapsedColumn(), TextColumn("left"),
            TimeRemainingColumn(), console=self.console, transient=False,
        )  # fmt: skip
        self.task: Any = None
        self.total = self.done = self.failed = self.running = 0

    def __enter__(self) -> SweepDisplay:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.task is not None and self.tty:
            self.progress.stop()

    def _state(self) -> str:
        return f"failed {self.failed}, running {self.running}"

    def __call__(self, kind: str, payload: Any) -> None:
        if self.quiet:
            return
        if kind == "plan":
            todo, kept = payload
            self.total = todo
            print(f"sweep      {todo} points to run, {kept} finished before (kept)",
                  file=self.stream, flush=True)  # fmt: skip
            if self.tty:
                self.task = self.progress.add_task("sweep", total=todo, state=self._state())
                self.progress.start()
            return
        if kind == "start":
            self.running += 1
        else:
            self.running = max(0, self.running - 1)
            self.done += 1
            self.failed += payload["status"] != "ok"
            line = _point_line(payload)
            if self.tty:
                self.progress.console.print(line)
            else:
                print(f"[{self.done}/{self.total}] {line}", file=self.stream, flush=True)
        if self.tty and self.task is not None:
            self.progress.update(self.task, completed=self.done, state=self._state())


def _point_line(row: dict[str, Any]) -> str:
    """'ok     gpt2 batch=8 seq=512: ...': the point's columns (those before its config hash)."""
    keys = list(row)
    cols = keys[: keys.index("config_hash")]
    head = " ".join([str(row["model"])] + [f"{k}={row[k]}" for k in cols[1:] if row[k] is not None])
    if row["status"] != "ok":
        return f"failed {head}: {row['error']}"
    return (
        f"ok     {head}: {si(row['samples_per_s'], 'samples/s')}, "
        f"{si(row['tokens_per_s'], 'tokens/s')} ({row['wall_s']:.1f} s)"
    )
