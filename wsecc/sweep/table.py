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

from wsecc.errors import WseccError, one_line

JOURNAL = "points.jsonl"
PARQUET = "results.parquet"
CSV = "results.csv"


STATUSES = ("ok", "failed")
MAX_POINTS = 100_000
"""Points a spec may expand to (models x axes), counted before they are built, and so rows a
results table may hold: beyond it the table alone takes minutes to write after every point,
and the compiles months. A table with more rows (a golden, published figures) is refused
before it is read."""


class TableError(WseccError):
    """A sweep's journal or results table is damaged: the message names the file and line."""


def read_journal(folder: Path) -> dict[str, dict[str, Any]]:
    """The latest row of each config hash in `folder`'s journal (empty when there is none).

    A line torn by a kill mid-write (text starting with `{` that does not parse) is skipped;
    anything else that is not a point's row (binary, another JSON value, a row whose
    config_hash, status or cells have the wrong type) is a TableError naming the line: a resume
    must not trust it, nor silently run every point again."""
    rows: dict[str, dict[str, Any]] = {}
    path = folder / JOURNAL
    if not path.exists():
        return rows
    if not path.is_file():
        raise TableError(f"{path}: not a file; move it away (the sweep then runs every point)")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TableError(f"{path}: cannot read ({e.strerror or e})") from None
    for n, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
            row = json.loads(line)
        except UnicodeDecodeError:
            raise TableError(_damaged(path, n, "is not text")) from None
        except RecursionError:
            raise TableError(_damaged(path, n, "is nested too deeply")) from None
        except json.JSONDecodeError:
            if line.lstrip().startswith("{"):
                continue  # a line torn by a kill mid-write
            raise TableError(_damaged(path, n, "is not JSON")) from None
        why = _row_problem(row)
        if why:
            raise TableError(_damaged(path, n, why))
        rows[row["config_hash"]] = row
    return rows


def _damaged(path: Path, n: int, why: str) -> str:
    return (
        f"{path}: line {n} {why}; the journal is damaged: fix or delete that line (or move the "
        "file away to run every point again)"
    )


def _row_problem(row: Any) -> str:
    """'' if `row` is a point's row (`wsecc.sweep.run`), else what is wrong with it."""
    if not isinstance(row, dict):
        return f"is a JSON {type(row).__name__}, not a point's row"
    if not isinstance(row.get("config_hash"), str):
        return f"has config_hash {row.get('config_hash')!r}, not a string"
    if row.get("status") not in STATUSES:
        return f"has status {row.get('status')!r}, not one of {', '.join(STATUSES)}"
    for k, v in row.items():
        if not isinstance(v, (str, int, float, bool, type(None))):
            return f"has {k} = {json.dumps(v)[:40]}, not a number, text or null"
    return ""


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


def _column(values: list[Any]) -> list[Any]:
    """A column Parquet can type: values of one kind as they are (numbers of both kinds count
    as one), else each as its text, e.g. an axis `systems = [1, 2, "auto"]`."""
    kinds = {type(v) for v in values if v is not None}
    if len(kinds) <= 1 or kinds <= {int, float}:
        return values
    return [None if v is None else str(v) for v in values]


def write_table(folder: Path, rows: list[Mapping[str, Any]]) -> None:
    """results.parquet and results.csv from `rows` (each file replaced in one rename)."""
    cols = columns_of(rows)
    table = pa.table({c: _column([r.get(c) for r in rows]) for c in cols}) if rows else pa.table({})
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
    if not path.is_file():
        what = "no such file" if not path.exists() else "not a file"
        raise TableError(f"{path}: {what}")
    if path.suffix == ".parquet":
        try:
            n = pq.ParquetFile(path).metadata.num_rows
            if n > MAX_POINTS:
                raise TableError(
                    f"{path}: {n:,} rows; a results table holds at most {MAX_POINTS:,}"
                )
            rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
        except (pa.ArrowException, OSError, ValueError) as e:
            raise TableError(f"{path}: not a readable Parquet table ({_first_line(e)})") from None
        return rows
    out: list[dict[str, Any]] = []
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            for r in reader:
                if len(out) == MAX_POINTS:
                    raise TableError(
                        f"{path}: over {MAX_POINTS:,} rows; a results table holds no more"
                    )
                if None in r:
                    n = reader.line_num
                    raise TableError(f"{path}: line {n} has more cells than the header")
                out.append(
                    {k: (v or None) if k in TEXT_COLUMNS else _typed(v) for k, v in r.items()}
                )
        return out
    except (UnicodeDecodeError, csv.Error) as e:
        raise TableError(f"{path}: not a readable CSV table ({_first_line(e)})") from None


def _first_line(e: BaseException) -> str:
    return one_line(str(e).splitlines()[0] if str(e) else type(e).__name__)[:160]


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
