"""Running a sweep's points: the shared stages, one point's row, and the runners.

Points are grouped into tasks by what the frontend needs (model content, seq, dims, and the
batch when numerics run; without them the graph is bound per sample, `per_sample_batch`): a
task loads and fuses its model once and compiles each of its points from there. Placement and
routing are shared across tasks through a cache folder, keyed by the content of what they
depend on (the kernel graph, the target's text, precision, chunking, placer, budget, seed,
pins): a sweep over batch sizes places once, because the kernel graph is per sample. A lock
per key makes a second worker wait for the first rather than place the same program twice.

A task is a generator of messages, ("start", config_hash) when a point begins and ("row",
row) when it ends, so the runners (a local process pool, or Ray) report each point as it
finishes. A point that fails is a row with status "failed" and its one-line error; the task
goes on with its next point.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import itertools
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wsecc.core import chain
from wsecc.core.instrument import Instrument
from wsecc.core.stages import Fused, Simulated, Sized
from wsecc.errors import WseccError, one_line
from wsecc.modes.strategy import per_sample_batch, strategy
from wsecc.options import Options
from wsecc.report.build import report
from wsecc.report.products import check_program
from wsecc.sweep.spec import Point
from wsecc.targets import target_source
from wsecc.version import __version__

Message = tuple[str, Any]


@dataclass(frozen=True)
class Task:
    points: tuple[Point, ...]
    shared: bool = True  # False: one point compiled as `wsecc compile` would, shared nothing


def frontend_key(p: Point) -> tuple[Any, ...]:
    o = p.options()
    key = (p.model.sha256, str(p.model.path), per_sample_batch(o), o.seq)
    return (*key, tuple(sorted(o.dims.items())))


def make_tasks(points: list[Point]) -> list[Task]:
    """Points grouped by frontend key, the groups dealt model by model in turn (the first of
    each model's groups, then the second, ...): workers that start together then mostly
    compile different models, rather than wait on one another for the same placement."""
    groups: dict[tuple[Any, ...], list[Point]] = {}
    for p in points:
        groups.setdefault(frontend_key(p), []).append(p)
    by_model: dict[str, list[Task]] = {}
    for g in groups.values():
        by_model.setdefault(g[0].model.name, []).append(Task(tuple(g)))
    rounds = itertools.zip_longest(*by_model.values())
    return [t for r in rounds for t in r if t is not None]


def run_task(task: Task, cache_dir: str | None) -> Iterator[Message]:
    """Compile each point of `task` (module doc), sharing the frontend within the task and
    placements through `cache_dir` (None: no sharing across tasks)."""
    fused: Fused | WseccError | None = None
    cache = Path(cache_dir) if cache_dir else None
    for point in task.points:
        yield ("start", point.config_hash)
        t0 = time.perf_counter()
        try:
            if fused is None:
                try:
                    options = _frontend_options(point) if task.shared else point.options()
                    fused = chain.fuse(chain.load(chain.job(point.model.path, options)))
                except WseccError as e:
                    fused = e  # the task's other points have the same binding: the same error
            if isinstance(fused, WseccError):
                raise fused
            row = row_of(point, _compile(chain.fork(fused, point.options()), cache))
        except (WseccError, MemoryError) as e:
            row = failed_row(point, one_line(str(e)) or type(e).__name__)
        except Exception as e:  # a bug in wsecc: a row all the same, the sweep goes on
            row = failed_row(point, f"internal error: {type(e).__name__}: {one_line(str(e))}")
        row["wall_s"] = round(time.perf_counter() - t0, 3)
        yield ("row", row)


def _frontend_options(p: Point) -> Options:
    """The point's options at the batch its task's frontend binds (`frontend_key`)."""
    o = p.options()
    return dataclasses.replace(o, batch=per_sample_batch(o)) if o.batch else o


def _compile(fused: Fused, cache: Path | None) -> Sized | Simulated:
    """The chain after the passes, the placement taken from `cache` when a compile of the same
    kernels, target and placement options made it."""
    sized = chain.size(fused)
    o = sized.job.options
    if not strategy(o.mode).placed_in_sweep:  # train: costed, not placed
        return sized
    if sized.systems is not None:  # several systems: placed for this point, not cached
        return chain.simulate(chain.place(sized))
    key = {
        "kernels": hashlib.sha256(
            json.dumps(sized.kernel_graph.to_json(), sort_keys=True).encode()
        ).hexdigest(),
        "target": hashlib.sha256(target_source(o.target)[0].encode()).hexdigest(),
        "precision": str(o.precision), "chunk_tokens": o.chunk_tokens, "placer": str(o.placer),
        "time_budget_s": o.time_budget_s, "seed": o.seed, "deterministic": o.deterministic,
        "pins": Path(o.pins).read_text() if o.pins else None, "wsecc": __version__,
        "replicas": o.replicas,
    }  # fmt: skip
    ins = Instrument.after(sized.trace)
    with ins.stage("place"):  # placing, or reading the cache
        saved = shared(cache, "placed", key, lambda: chain.placed_to_json(chain.place(sized)))
    where = cache if cache is not None else Path(".")
    try:  # a cached product is checked as a saved folder is (`wsecc.report.products`)
        placed = chain.with_placement(sized, saved, ins.trace)
        check_program(placed.program, where, pinned=bool(o.pins), layer=False)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise WseccError(
            f"{where}: a cached placement of this point is malformed ({type(e).__name__}: {e}); "
            f"delete {where} to place again"
        ) from None
    return chain.simulate(placed)


def shared(
    cache: Path | None, kind: str, key: dict[str, Any], make: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """`make()`'s product (JSON) for `key`, made once per cache folder: the first caller makes
    and stores it under an exclusive lock, later callers (other processes too) read it."""
    if cache is None:
        return make()
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{kind}-{digest}.json"
    with open(cache / f"{kind}-{digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            try:
                product: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
                return product
            except (OSError, ValueError):
                pass  # unreadable: make it again
        product = make()
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(product), encoding="utf-8")
        os.replace(tmp, path)
        return product


def point_columns(p: Point) -> dict[str, Any]:
    """The model, batch and seq (None until the frontend binds a seq the spec leaves open),
    the other axes, the config hash."""
    o = p.options()
    return {
        "model": p.model.name,
        "batch": o.batch,
        "seq": o.seq,
        **{k: _cell(v) for k, v in p.axes.items() if k not in ("batch", "seq")},
        "config_hash": p.config_hash,
    }


def _cell(v: Any) -> Any:
    return json.dumps(v, sort_keys=True) if isinstance(v, dict) else v


def failed_row(p: Point, error: str) -> dict[str, Any]:
    return {**point_columns(p), "status": "failed", "error": error}


def row_of(p: Point, stage: Sized | Simulated) -> dict[str, Any]:
    """A compiled point's row: its columns (seq as bound) and the report's key figures."""
    rep = report(stage)
    perf, sizing = rep["performance"], rep["sizing"]
    numerics = rep.get("numerics")
    placed = "placement" in rep  # train mode is costed, not placed
    sized = stage.placed.sized if isinstance(stage, Simulated) else stage
    row = {
        **point_columns(p),
        "seq": sized.kernel_graph.tokens_per_sample,
        "status": "ok",
        "error": None,
        "samples_per_s": perf["samples_per_s"],
        "tokens_per_s": perf["tokens_per_s"],
        "latency_s": perf["latency_s"],
        "batch_latency_s": perf.get("batch_latency_s"),
        "utilization": perf["utilization"],
        "bottleneck": str(perf["bottleneck"]),
        "on_wafer_samples_per_s": perf.get("on_wafer_samples_per_s"),
        "pes_used": sizing["pes_used"],
        "fabric_fraction": sizing["fabric_fraction"],
        "copies": rep.get("replicas", {}).get("k"),  # data-parallel copies on the wafer
        "systems_used": perf.get("systems"),  # the systems it spans (--systems auto chooses)
        "sram_max_bytes": rep["sram"]["max_bytes"] if placed else sizing["max_sram_bytes_per_pe"],
        "colors_max": rep["routing"]["colors_max"] if placed else None,
        "gap": rep["placement"]["gap"] if placed else None,
        "execution": perf.get("execution"),
        "train_batch": perf.get("batch"),
        "params": rep["model"]["params"],
        "numerics": None if numerics is None else ("PASS" if numerics["passed"] else "FAIL"),
        "compile_s": round(sum(stage.seconds.values()), 3),
    }
    return row
