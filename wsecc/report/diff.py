"""`wsecc diff A B`: the quality of results of two compiles side by side, with ratios B / A."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wsecc.errors import WseccError
from wsecc.report.products import check_report, read_json

# (label, path into report.json, lower is better?)
METRICS: tuple[tuple[str, tuple[str, ...], bool | None], ...] = (
    ("kernels", ("sizing", "kernels"), None),
    ("PEs used", ("sizing", "pes_used"), True),
    ("fabric fraction", ("sizing", "fabric_fraction"), None),
    ("SRAM max B/PE", ("sizing", "max_sram_bytes_per_pe"), True),
    ("wirelength B·PE", ("placement", "objective"), True),
    ("placement bound", ("placement", "bound"), None),
    ("placement gap", ("placement", "gap"), True),
    ("placement s", ("placement", "seconds"), True),
    ("colors max", ("routing", "colors_max"), True),
    ("route length", ("routing", "total_length"), True),
    ("link load max", ("routing", "link_load_max"), True),
    ("samples/s", ("performance", "samples_per_s"), False),
    ("tokens/s", ("performance", "tokens_per_s"), False),
    ("latency s", ("performance", "latency_s"), True),
    ("utilization", ("performance", "utilization"), False),
    ("numerics passed", ("numerics", "passed"), None),
)


def load_report(path: str | Path) -> dict[str, Any]:
    """A report.json, given the file or the compile's output folder, checked against the report
    schema (`wsecc.report.products.check_report`) so a wrong type fails here, naming the key."""
    p = Path(path)
    if p.is_dir():
        p = p / "report.json"
    if not p.exists():
        raise WseccError(f"{p}: no such report (give a compile's output folder or its report.json)")
    return check_report(read_json(p), p)


def _get(rep: dict[str, Any], path: tuple[str, ...]) -> Any:
    if path == ("sizing", "kernels"):
        return len(rep["kernels"]) if "kernels" in rep else None
    v: Any = rep
    for k in path:
        if not isinstance(v, dict) or k not in v:
            return None
        v = v[k]
    return v


SYSTEM_METRICS: tuple[tuple[str, str, bool | None], ...] = (
    ("layers", "layers", None),
    ("kernels", "kernels", None),
    ("PEs", "pes", True),
    ("resident B", "resident_bytes", True),
    ("SRAM max B/PE", "sram_max_bytes_per_pe", True),
    ("seconds", "seconds", True),
    ("time share", "time_share", None),
    ("crossing in B", "crossing_in_bytes", True),
)
"""Compared for each system when both reports have several (report.json `systems[]`)."""


def diff_reports(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows {metric, a, b, ratio (b / a, None when undefined), better ('a'|'b'|'=' |None)}:
    the whole compile's (`METRICS`), then, when both compiles span several systems, each
    system's (`SYSTEM_METRICS`, metric "system N: ..."; a system only one side has shows "-"
    on the other)."""
    rows = [_row(label, _get(a, path), _get(b, path), lower) for label, path, lower in METRICS]
    sa, sb = a.get("systems", []), b.get("systems", [])
    if len(sa) > 1 and len(sb) > 1:
        for i in range(max(len(sa), len(sb))):
            ra = sa[i] if i < len(sa) else {}
            rb = sb[i] if i < len(sb) else {}
            rows += [
                _row(f"system {i}: {label}", ra.get(key), rb.get(key), lower)
                for label, key, lower in SYSTEM_METRICS
            ]
    return [r for r in rows if r["a"] is not None or r["b"] is not None]


def _row(label: str, va: Any, vb: Any, lower_better: bool | None) -> dict[str, Any]:
    ratio = None
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (va, vb))
    if numeric and va:
        ratio = vb / va
    better = None
    if numeric and lower_better is not None:
        better = "=" if va == vb else ("b" if (vb < va) == lower_better else "a")
    return {"metric": label, "a": va, "b": vb, "ratio": ratio, "better": better}


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def format_diff(a: dict[str, Any], b: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    def who(r: dict[str, Any]) -> str:
        placer = r.get("placement", {}).get("placer", "?")
        return f"{Path(r['model']['path']).name} {r['target']['name']} {placer}"

    lines = [f"A: {who(a)}", f"B: {who(b)}", ""]
    width = max([18, *(len(r["metric"]) for r in rows)])
    lines.append(f"{'metric':<{width}} {'A':>14} {'B':>14} {'B/A':>8}")
    for r in rows:
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"
        mark = {"a": "  (A better)", "b": "  (B better)"}.get(r["better"] or "", "")
        lines.append(
            f"{r['metric']:<{width}} {_fmt(r['a']):>14} {_fmt(r['b']):>14} {ratio:>8}{mark}"
        )
    return "\n".join(lines)
