"""Design-space sweeps: many compiles from one spec, one results table, resumable.

    from wsecc.sweep import load_spec, run_sweep
    summary = run_sweep(load_spec("study.toml"), "study.sweep", workers=2)

`wsecc sweep SPEC.toml -o DIR` runs it from the command line; `wsecc sweep report DIR` draws
it (`wsecc.sweep.report`). The pieces: `spec` (the TOML and its points), `run` (one point,
and the stages points share), `pool` (the local and Ray runners), `table` (the journal and
results.parquet / results.csv).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wsecc.report.outdir import check_sweep_output
from wsecc.sweep.pool import check_ray, run_local, run_ray
from wsecc.sweep.run import Message, Task, make_tasks
from wsecc.sweep.spec import Point, Spec, SpecError, load_spec
from wsecc.sweep.table import append_journal, read_journal, read_table, write_table

__all__ = ["Point", "Spec", "SpecError", "SweepSummary", "load_spec", "read_table", "run_sweep"]


@dataclass(frozen=True)
class SweepSummary:
    points: int
    skipped: int  # finished in an earlier run (kept)
    ran: int
    failed: int  # of all points, after this run
    folder: Path


Listener = Callable[[str, Any], None]
"""Progress hook: ("plan", (points to run, points kept)), ("start", Point), ("row", row)."""


def run_sweep(
    spec: Spec,
    folder: str | os.PathLike[str],
    *,
    workers: int | None = None,
    ray: str | None = None,
    retry_failed: bool = False,
    share: bool = True,
    listener: Listener = lambda kind, payload: None,
) -> SweepSummary:
    """Run every point of `spec` not finished in `folder` (failed ones too with
    `retry_failed`), recording each as it finishes; returns what happened.

    Placements are shared through `folder/cache/` (`wsecc.sweep.run`), kept after the sweep so
    that points added to the spec later reuse them; deleting it costs only time.
    `share=False` compiles every point as a separate `wsecc compile` would (its own frontend at
    its batch, its own placement), for measuring what sharing saves."""
    folder = check_sweep_output(folder, [spec.path])
    if ray:  # a runner that cannot start fails before the folder is made
        check_ray(ray)
    done = read_journal(folder)  # a damaged journal fails before anything is written
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.toml").write_text(spec.text, encoding="utf-8")
    points = spec.points()
    by_hash = {p.config_hash: p for p in points}
    keep = {
        h for h, r in done.items()
        if h in by_hash and (r["status"] == "ok" or not retry_failed)
    }  # fmt: skip
    todo = [p for p in points if p.config_hash not in keep]
    rows = {h: done[h] for h in keep}
    write_table(folder, [rows[p.config_hash] for p in points if p.config_hash in rows])
    listener("plan", (len(todo), len(keep)))

    def on_message(message: Message) -> None:
        kind, payload = message
        if kind == "start":
            listener("start", by_hash[payload])
            return
        append_journal(folder, payload)
        rows[payload["config_hash"]] = payload
        write_table(folder, [rows[p.config_hash] for p in points if p.config_hash in rows])
        listener("row", payload)

    cache = str((folder / "cache").resolve()) if share else None
    tasks = make_tasks(todo) if share else [Task((p,), shared=False) for p in todo]
    n = workers or os.cpu_count() or 1
    if tasks and ray:
        run_ray(tasks, ray, n, cache, on_message)
    elif tasks:
        run_local(tasks, n, cache, on_message)
    failed = sum(1 for r in rows.values() if r["status"] != "ok")
    return SweepSummary(len(points), len(keep), len(todo), failed, folder)
