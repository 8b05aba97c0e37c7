"""A sweep's results: a journal of finished points, and the table it gives.

`DIR/points.jsonl` is the record: one JSON line per finished point, appended and flushed as it
finishes, so a sweep killed at any moment keeps every point that finished (a torn last line is
ignored). After each point the table is written again from it, atomically: `results.parquet`
and its mirror `results.csv`, one row per point of the spec in the spec's order (the latest
row of each config hash). The only module that imports pyarrow.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

JOURNAL = "points.jsonl"
PARQUET = "results.parquet"
CSV = "results.csv"


def read_journal(folder: Path) -> dict[str, dict[str, Any]]:
    """The latest row of each config hash in `folder`'s journal (empty when there is none)."""
    rows: dict[str, dict[str, Any]] = {}
    path = folder / JOURNAL
    if not path.is_file():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line torn by a kill mid-write
        if isinstance(row, dict) and "config_hash" in row:
            rows[row["config_hash"]] = row
    return rows


def append_journal(folder: Path, row: Mapping[str, Any]) -> None:
    with open(folder / JOURNAL, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")  # in column order
        f.flush()
        os.fsync(f.fileno())


def columns_of(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every key of `rows` in the order first seen, the point's columns (a row's keys before its
    config_hash: model, batch, seq, the axes) ahead of the figures whichever row brings them: a
    model's own axis is a column of that model's rows only."""
    point: dict[str, None] = {}
    rest: dict[str, None] = {}
    for r in rows:
        keys = list(r)
        cut = keys.index("config_hash") if "config_hash" in keys else len(keys)
        point |= dict.fromkeys(keys[:cut])
        rest |= dict.fromkeys(keys[cut:])
    return list(point) + [k for k in rest if k not in point]


def write_table(folder: Path, rows: list[Mapping[str, Any]]) -> None:
    """results.parquet and results.csv from `rows` (each file replaced in one rename)."""
    cols = columns_of(rows)
    table = pa.table({c: [r.get(c) for r in rows] for c in cols}) if rows else pa.table({})
    tmp = folder / f".{PARQUET}.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, folder / PARQUET)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    tmp = folder / f".{CSV}.tmp"
    tmp.write_text(buf.getvalue(), encoding="utf-8")
    os.replace(tmp, folder / CSV)


def read_table(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """A results table (a sweep folder, its results.parquet, or a CSV) as rows. CSV cells come
    back typed: numbers as numbers, empty as None."""
    path = Path(path)
    if path.is_dir():
        path = path / PARQUET
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    with open(path, newline="", encoding="utf-8") as f:
        return [
            {k: (v or None) if k in TEXT_COLUMNS else _typed(v) for k, v in r.items()}
            for r in csv.DictReader(f)
        ]


TEXT_COLUMNS = frozenset(
    {"model", "config_hash", "status", "error", "bottleneck", "numerics", "execution"}
)
"""Columns read from CSV as text whatever they look like (a hex hash can parse as a number)."""


def _typed(text: str | None) -> Any:
    if text is None or text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
