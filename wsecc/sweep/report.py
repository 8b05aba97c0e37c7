"""`wsecc sweep report DIR`: a sweep's table drawn, held against published figures or a
golden table.

Plots (PNG, and all of them in one self-contained `report.html`): tokens/s against sequence
length and against batch, one line per model (and per value of every other axis that varies),
and utilization against model size. With published figures (`--measured`), they are drawn on
the same axes and each is matched to the table's points: the ratio wsecc / published per point.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wsecc.errors import WseccError
from wsecc.sweep.table import TEXT_COLUMNS, read_table

METRICS = ("tokens_per_s", "samples_per_s")
IGNORED = frozenset({"wall_s", "compile_s", "config_hash"})  # differ from run to run
DEFAULT_REL_TOL = 1e-6


def _rows(folder: Path) -> list[dict[str, Any]]:
    if not (folder / "results.parquet").is_file():
        raise WseccError(f"{folder}: no results.parquet; is it a `wsecc sweep` output folder?")
    return read_table(folder)


def point_keys(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The columns that say which point a row is: those before config_hash."""
    if not rows:
        return ["model"]
    keys = list(rows[0])
    return keys[: keys.index("config_hash")] if "config_hash" in keys else ["model"]


def _varying(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> list[str]:
    """The point columns that take several values within one model (a model's own seq is a
    property of the model, not an axis)."""
    out = []
    for k in keys:
        per_model: dict[str, set[str]] = {}
        for r in rows:
            per_model.setdefault(str(r["model"]), set()).add(json.dumps(r.get(k)))
        if any(len(v) > 1 for v in per_model.values()):
            out.append(k)
    return out


def _series(
    rows: Sequence[Mapping[str, Any]], x: str, y: str, others: Sequence[str]
) -> dict[str, list[tuple[float, float]]]:
    """(x, y) lines, one per value of each of the `others` columns ("model" among them for a
    line per model)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        if r.get(x) is None or not r.get(y):
            continue
        label = " ".join(str(r[k]) if k == "model" else f"{k}={r[k]}" for k in others) or y
        out.setdefault(label, []).append((float(r[x]), float(r[y])))
    return out


MAX_LINES = 12
"""Lines one plot may hold; past it a plot shows one line per model at the other axes' first
values (and says so in its title)."""


def _slice(
    rows: Sequence[Mapping[str, Any]], others: Sequence[str], x: str
) -> tuple[list[Mapping[str, Any]], dict[str, Any]]:
    """`rows` and {} when their lines (one per value of `others`) are few enough; else the
    rows at one value of each of `others` but the model, and those values: the values of the
    first row whose model varies along `x` (so the slice has lines to draw)."""
    lines = {tuple(json.dumps(r.get(k)) for k in others) for r in rows}
    if len(lines) <= MAX_LINES or not rows:
        return list(rows), {}
    xs: dict[Any, set[str]] = {}
    for r in rows:
        xs.setdefault(r.get("model"), set()).add(json.dumps(r.get(x)))
    first = next((r for r in rows if len(xs[r.get("model")]) > 1), rows[0])
    fixed = {k: first.get(k) for k in others if k != "model"}
    return [r for r in rows if all(r.get(k) == v for k, v in fixed.items())], fixed


@dataclass(frozen=True)
class Match:
    measured: dict[str, Any]
    row: dict[str, Any]
    metric: str

    @property
    def ratio(self) -> float:
        return float(self.row[self.metric]) / float(self.measured[self.metric])


def read_measured(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    try:
        rows = read_table(path)
    except (OSError, ValueError) as e:
        raise WseccError(f"--measured {path}: cannot read ({e})") from None
    if not rows or "model" not in rows[0] or not any(m in rows[0] for m in METRICS):
        raise WseccError(
            f"--measured {path}: needs a header with model and tokens_per_s or samples_per_s"
        )
    for n, r in enumerate(rows, 2):  # line 1 is the header
        for metric in METRICS:
            v = r.get(metric)
            if v is not None and not (_is_number(v) and math.isfinite(v) and v > 0):
                raise WseccError(
                    f"--measured {path}: row {n}: {metric} = {v!r} is not a positive number"
                )
    return rows


def match_measured(
    rows: Sequence[Mapping[str, Any]], measured: Sequence[Mapping[str, Any]]
) -> list[Match]:
    """Each published figure with each ok row it names: every point column (model, seq,
    batch, target, ...) the published row fills is equal; its other columns (a source, a
    note) are not compared."""
    keys = point_keys(rows)
    out = []
    for m in measured:
        named = [k for k in keys if m.get(k) is not None]
        for r in rows:
            if r["status"] != "ok" or any(str(r.get(k)) != str(m[k]) for k in named):
                continue
            for metric in METRICS:
                if m.get(metric):
                    out.append(Match(dict(m), dict(r), metric))
    return out


def write_report(folder: str | os.PathLike[str], measured: str | None = None) -> Path:
    """The plots as PNGs and report.html in `folder`; returns report.html's path."""
    from wsecc.view.png import write_series_png

    folder = Path(folder)
    rows = _rows(folder)
    ok = [r for r in rows if r["status"] == "ok"]
    keys = point_keys(rows)
    published = read_measured(measured) if measured else []
    matches = match_measured(ok, published)
    pictures: list[tuple[str, str]] = []
    for x, y, xlabel, ylabel, name in (
        ("seq", "tokens_per_s", "sequence length", "tokens/s", "tokens_vs_seq.png"),
        ("batch", "tokens_per_s", "batch", "tokens/s", "tokens_vs_batch.png"),
        ("params", "utilization", "parameters", "utilization of peak", "utilization_vs_size.png"),
    ):
        # a line per model along an axis; along model size, a line through the models
        others = [k for k in _varying(ok, keys) if k not in (x, "model")]
        others = others if x == "params" else ["model", *others]
        shown, fixed = _slice(ok, others, x)
        if fixed:  # too many lines to read: the other axes at their first value
            others = [k for k in others if k not in fixed]
        series = _series(shown, x, y, others)
        if not series or max(len({p[0] for p in pts}) for pts in series.values()) < 2:
            continue  # no line has two points along x
        pub = _series([m.row | {y: m.measured[y]} for m in matches if m.metric == y
                       and all(m.row.get(k) == v for k, v in fixed.items())], x, y,
                      others)  # fmt: skip
        shown_at = [f"{k}={v}" for k, v in fixed.items() if v is not None]  # None: not set
        at = f" at {', '.join(shown_at)}" if shown_at else ""
        caption = f"{ylabel} against {xlabel}{at}"
        write_series_png(folder / name, series, xlabel=xlabel, ylabel=ylabel,
                         title=f"{folder.name}: {caption}", measured=pub)  # fmt: skip
        pictures.append((name, caption))
    page = _html(folder, rows, keys, pictures, matches)
    out = folder / "report.html"
    tmp = folder / ".report.html.tmp"
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, out)
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return "" if v is None else str(v)


def _table(header: Sequence[str], body: Sequence[Sequence[Any]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    trs = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in r) + "</tr>" for r in body
    )
    return f"<table><tr>{th}</tr>{trs}</table>"


def _html(
    folder: Path, rows: Sequence[Mapping[str, Any]], keys: Sequence[str],
    pictures: Sequence[tuple[str, str]], matches: Sequence[Match],
) -> str:  # fmt: skip
    cols = [*keys, "status", "samples_per_s", "tokens_per_s", "latency_s", "utilization",
            "bottleneck", "pes_used", "gap", "error"]  # fmt: skip
    parts = [
        f"<h1>{html.escape(folder.name)}: {len(rows)} points, "
        f"{sum(r['status'] != 'ok' for r in rows)} failed</h1>"
    ]
    for name, caption in pictures:
        data = base64.b64encode((folder / name).read_bytes()).decode()
        parts.append(f"<figure><img src='data:image/png;base64,{data}' alt='{caption}'>"
                     f"<figcaption>{html.escape(caption)}</figcaption></figure>")  # fmt: skip
    if matches:
        parts.append("<h2>Against published figures</h2>")
        mk = [k for k in keys if any(m.measured.get(k) is not None for m in matches)]
        notes = [k for k in matches[0].measured if k not in keys and k not in METRICS]
        parts.append(_table(
            [*mk, "metric", "published", "wsecc", "wsecc / published", *notes],
            [[m.row.get(k) for k in mk] + [m.metric, m.measured[m.metric], m.row[m.metric],
              m.ratio] + [m.measured.get(k) for k in notes] for m in matches],
        ))  # fmt: skip
    parts.append("<h2>Every point</h2>")
    parts.append(_table(cols, [[r.get(c) for c in cols] for r in rows]))
    style = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}img{max-width:100%}")  # fmt: skip
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(folder.name)}"
            f"</title><style>{style}</style></head><body>{''.join(parts)}</body></html>\n")  # fmt: skip


def parse_tolerances(items: Sequence[str]) -> dict[str, float]:
    """`--tolerance COLUMN=REL` values: REL a finite number >= 0 (NaN or infinity would let
    every point pass)."""
    out = {}
    for it in items:
        col, sep, val = it.partition("=")
        try:
            rel = float(val)
        except ValueError:
            raise WseccError(f"--tolerance {it!r}: expected COLUMN=REL (a number)") from None
        if not sep or not col or not math.isfinite(rel) or rel < 0:
            raise WseccError(f"--tolerance {it!r}: expected COLUMN=REL, REL a finite number >= 0")
        out[col] = rel
    return out


def read_golden(
    folder: str | os.PathLike[str],
    golden: str | os.PathLike[str],
    tolerances: Mapping[str, float] | None = None,
) -> list[dict[str, Any]]:
    """A golden table's rows, checked against the sweep's table in `folder` so that the check
    can fail: at least one row; a model and a status column; every column one the sweep's
    table has; numbers where the table has numbers, finite; every --tolerance column present.
    WseccError (one line) otherwise, before anything is written."""
    rows = _rows(Path(folder))
    try:
        gold = read_table(golden)
    except (OSError, ValueError) as e:
        raise WseccError(f"--check-golden {golden}: cannot read ({e})") from None
    if not gold:
        raise WseccError(
            f"--check-golden {golden}: no rows, so nothing could move; give a results table "
            "with the points to hold (a sweep's results.csv or results.parquet)"
        )
    have = {c for r in rows for c in r}
    numeric = {c for r in rows for c, v in r.items() if _is_number(v) and c not in TEXT_COLUMNS}
    for c in ("model", "status"):
        if c not in gold[0]:
            raise WseccError(f"--check-golden {golden}: no {c!r} column; is it a results table?")
    unknown = sorted(set(gold[0]) - have - IGNORED)
    if unknown:
        raise WseccError(
            f"--check-golden {golden}: column {unknown[0]!r} is not in {folder}'s table "
            f"(its columns: {', '.join(sorted(have))})"
        )
    for n, g in enumerate(gold, 2):  # line 1 is the header
        for c, v in g.items():
            if c in numeric and v is not None and not (_is_number(v) and math.isfinite(v)):
                raise WseccError(
                    f"--check-golden {golden}: row {n}: {c} = {v!r} is not a finite number"
                )
    unknown = sorted(set(tolerances or {}) - set(gold[0]))
    if unknown:
        raise WseccError(f"--tolerance: no column {unknown[0]!r} in {golden}")
    return gold


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def check_golden(
    folder: str | os.PathLike[str],
    golden: str | os.PathLike[str],
    tolerances: Mapping[str, float] | None = None,
    gold: Sequence[Mapping[str, Any]] | None = None,
) -> list[str]:
    """The points whose figures moved against `golden`, one line each (empty: none moved).
    Points are matched by their point columns; numbers within the column's relative tolerance
    (`tolerances`, else DEFAULT_REL_TOL for floats, exact for integers) and everything else
    equal; wall times and config hashes are ignored. A golden point missing here moved too.
    `gold`: its rows as `read_golden` returned them (read and checked here otherwise)."""
    tol = dict(tolerances or {})
    gold = read_golden(folder, golden, tol) if gold is None else gold
    rows = read_table(Path(folder))
    keys = point_keys(gold)

    def ident(r: Mapping[str, Any]) -> str:
        return " ".join(f"{k}={r.get(k)}" for k in keys)

    here = {ident(r): r for r in rows}
    moved = []
    for g in gold:
        r = here.get(ident(g))
        if r is None:
            moved.append(f"{ident(g)}: not in {folder}")
            continue
        diffs = [
            f"{c} {_fmt(g[c])} -> {_fmt(r.get(c))}"
            for c in g
            if c not in IGNORED and c not in keys and _moved(g[c], r.get(c), c, tol)
        ]
        if diffs:
            moved.append(f"{ident(g)}: " + ", ".join(diffs))
    return moved


def _moved(a: Any, b: Any, column: str, tol: Mapping[str, float]) -> bool:
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (a, b))
    if not numbers:
        return str(a) != str(b)
    rel = tol.get(column, DEFAULT_REL_TOL if isinstance(a, float) or isinstance(b, float) else 0.0)
    return abs(b - a) > rel * max(abs(a), abs(b))
