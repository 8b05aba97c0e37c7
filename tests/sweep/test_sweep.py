"""Sweeps end to end on the bundled samples: one row per point, shared placements, failed
points as rows, resume after a kill, the same table on Ray, the report and the golden check."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLES

import wsecc
from wsecc.cli import main
from wsecc.sweep import load_spec, read_table, run_sweep
from wsecc.sweep.report import check_golden, match_measured, read_measured, write_report
from wsecc.sweep.table import read_journal

SPEC = f"""
[[models]]
path = "{SAMPLES / "gpt2_legacy_op17.onnx"}"
name = "gpt2"
[[models]]
path = "{SAMPLES / "bert_dynamo.onnx"}"
name = "bert"
[axes]
batch = [1, 2]
seq = [16, 4096]
[fixed]
placer = "greedy"
validate = false
sim = "l0"
"""
TIMES = ("wall_s", "compile_s")


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("sweep")
    (folder / "spec.toml").write_text(SPEC)
    summary = run_sweep(load_spec(folder / "spec.toml"), folder / "out", workers=2)
    assert (summary.points, summary.ran, summary.skipped) == (8, 8, 0)
    return folder


def figures(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMES} for r in rows]


def test_one_row_per_point_in_the_specs_order(swept: Path) -> None:
    rows = read_table(swept / "out")
    assert [(r["model"], r["batch"], r["status"]) for r in rows] == [
        (m, b, s) for m in ("gpt2", "bert") for b in (1, 2) for s in ("ok", "failed")
    ]
    for r in rows:
        if r["status"] == "ok":
            assert r["seq"] == 16 and r["error"] is None and r["samples_per_s"] > 0
        else:  # the samples' position tables are shorter than 4096: one line naming the limit
            assert r["seq"] == 4096 and "--seq" in r["error"] and "\n" not in r["error"]
    assert figures(read_table(swept / "out" / "results.csv")) == figures(rows)


def test_a_row_is_what_wsecc_compile_reports(swept: Path) -> None:
    row = next(r for r in read_table(swept / "out") if r["model"] == "gpt2" and r["batch"] == 2)
    c = wsecc.compile(SAMPLES / "gpt2_legacy_op17.onnx", batch=2, seq=16, placer="greedy",
                      validate=False, sim="l0")  # fmt: skip
    perf = c.report()["performance"]
    assert row["samples_per_s"] == pytest.approx(perf["samples_per_s"], rel=1e-12)
    assert row["latency_s"] == pytest.approx(perf["latency_s"], rel=1e-12)
    assert row["batch_latency_s"] == pytest.approx(perf["batch_latency_s"], rel=1e-12)
    assert row["pes_used"] == c.report()["sizing"]["pes_used"]


def test_batch_sizes_share_one_placement(swept: Path) -> None:
    """The kernel graph is per sample: batch 1 and 2 of a model place once."""
    placed = list((swept / "out" / "cache").glob("placed-*.json"))
    assert len(placed) == 2  # gpt2 and bert at seq 16


def test_batch_sizes_share_one_frontend_unless_numerics_run(tmp_path: Path) -> None:
    """Without numerics every stage but performance is per sample, so the batches of one model
    and seq are one task (one frontend); numerics need the graph at each batch."""
    from wsecc.sweep.run import make_tasks

    (tmp_path / "spec.toml").write_text(SPEC)
    points = load_spec(tmp_path / "spec.toml").points()
    assert sorted(len(t.points) for t in make_tasks(points)) == [2, 2, 2, 2]
    (tmp_path / "spec.toml").write_text(SPEC.replace("validate = false", "validate = true"))
    points = load_spec(tmp_path / "spec.toml").points()
    assert sorted(len(t.points) for t in make_tasks(points)) == [1] * 8


def test_a_second_run_keeps_every_finished_point(swept: Path) -> None:
    spec = load_spec(swept / "spec.toml")
    before = read_table(swept / "out")
    again = run_sweep(spec, swept / "out", workers=2)
    assert (again.ran, again.skipped, again.failed) == (0, 8, 4)
    assert read_table(swept / "out") == before
    retried = run_sweep(spec, swept / "out", workers=2, retry_failed=True)
    assert (retried.ran, retried.skipped, retried.failed) == (4, 4, 4)


def test_the_golden_check_names_the_points_that_moved(swept: Path, tmp_path: Path, capsys) -> None:
    golden = tmp_path / "golden.csv"
    golden.write_text((swept / "out" / "results.csv").read_text())
    assert check_golden(swept / "out", golden) == []
    rows = list(csv.DictReader(golden.open()))
    rows[2]["samples_per_s"] = str(float(rows[2]["samples_per_s"]) * 1.01)
    with golden.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    moved = check_golden(swept / "out", golden)
    assert len(moved) == 1 and moved[0].startswith("model=gpt2 batch=2 seq=16: samples_per_s")
    assert check_golden(swept / "out", golden, {"samples_per_s": 0.02}) == []
    assert main(["sweep", "report", str(swept / "out"), "--check-golden", str(golden)]) == 1
    assert "moved: model=gpt2 batch=2 seq=16" in capsys.readouterr().out


@pytest.mark.pictures  # the sweep's figures rasterised (tests/conftest.py)
def test_the_report_draws_the_table_and_the_published_ratio(swept: Path, tmp_path: Path) -> None:
    measured = tmp_path / "published.csv"
    measured.write_text("model,seq,batch,samples_per_s\ngpt2,16,1,1000\n")
    page = write_report(swept / "out", measured=str(measured)).read_text()
    row = next(r for r in read_table(swept / "out") if r["model"] == "gpt2" and r["batch"] == 1)
    assert "Against published figures" in page
    assert f"{row['samples_per_s'] / 1000:,.4g}" in page  # the ratio wsecc / published
    assert (swept / "out" / "tokens_vs_batch.png").stat().st_size > 10_000
    assert "data:image/png;base64," in page  # self-contained


def test_a_killed_sweep_resumes_with_its_finished_points(tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'[[models]]\npath = "{SAMPLES / "bert_dynamo.onnx"}"\n'
        '[axes]\nseq = [8, 16, 24, 32, 40, 48]\n[fixed]\nplacer = "greedy"\nvalidate = false\n'
        'sim = "l0"\n'
    )
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "wsecc.cli", "sweep", str(spec), "-o", str(out), "--workers", "1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    journal = out / "points.jsonl"
    # wait for two finished points however loaded the machine is: the deadline only ends a
    # hung sweep (each point takes ~1 s idle), it never decides the result
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.is_file() and len(journal.read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the runner and its workers, mid-sweep
    proc.wait()
    kept = list(read_journal(out).values())  # the record (the table may lag it by one point)
    assert 2 <= len(kept) < 6
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"{len(kept)} kept from before, {6 - len(kept)} run" in done.stdout
    rows = read_table(out)
    assert [r["seq"] for r in rows] == [8, 16, 24, 32, 40, 48]
    assert all(r["status"] == "ok" for r in rows)
    by_hash = {r["config_hash"]: r for r in rows}
    assert all(by_hash[r["config_hash"]] == r for r in kept)  # the finished points untouched


def test_ray_gives_the_same_table(swept: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="Ray is in the dev extra: pip install -e '.[dev]'")
    summary = run_sweep(load_spec(swept / "spec.toml"), tmp_path / "ray", workers=2, ray="local")
    assert summary.ran == 8
    assert figures(read_table(tmp_path / "ray")) == figures(read_table(swept / "out"))


def test_an_unreachable_ray_cluster_fails_in_one_line(tmp_path: Path, capsys) -> None:
    pytest.importorskip("ray", reason="Ray is in the dev extra: pip install -e '.[dev]'")
    spec = tmp_path / "spec.toml"
    spec.write_text(f'[[models]]\npath = "{SAMPLES / "bert_dynamo.onnx"}"\n')
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "-o", str(out), "--ray", "127.0.0.1:1"]) == 2
    assert "--ray 127.0.0.1:1: nothing answers there" in capsys.readouterr().err
    assert not out.exists()


def test_the_cli_exits_1_when_a_point_failed(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'[[models]]\npath = "{SAMPLES / "bert_dynamo.onnx"}"\n[axes]\nseq = [16, 4096]\n'
        '[fixed]\nplacer = "greedy"\nvalidate = false\nsim = "l0"\n'
    )
    assert main(["sweep", str(spec), "-o", str(tmp_path / "out"), "--workers", "1"]) == 1
    out = capsys.readouterr().out
    assert "2 points, 0 kept from before, 2 run, 1 failed; --retry-failed" in out


def test_a_worker_that_dies_fails_its_point_and_the_sweep_goes_on(tmp_path: Path) -> None:
    """A worker killed mid-point (as the kernel's OOM killer would): that point is a failed
    row, every other point runs on a fresh pool."""
    import multiprocessing

    from wsecc.sweep.pool import run_local
    from wsecc.sweep.run import make_tasks

    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'[[models]]\npath = "{SAMPLES / "bert_dynamo.onnx"}"\n[axes]\nseq = [8, 16, 24]\n'
        '[fixed]\nplacer = "greedy"\nvalidate = false\nsim = "l0"\n'
    )
    points = load_spec(spec).points()
    rows: dict[str, dict] = {}

    def on_message(message: tuple) -> None:
        kind, payload = message
        if kind == "start" and not rows and payload == points[0].config_hash:
            for child in multiprocessing.active_children():
                if child.name.startswith("SpawnProcess"):
                    os.kill(child.pid, signal.SIGKILL)
        elif kind == "row":
            rows[payload["config_hash"]] = payload

    run_local(make_tasks(points), 1, None, on_message)
    assert [rows[p.config_hash]["status"] for p in points] == ["failed", "ok", "ok"]
    assert "worker process died" in rows[points[0].config_hash]["error"]


def test_a_train_sweep_with_a_models_own_axes(tmp_path: Path) -> None:
    """Train points (costed, not placed) and per-model axes: a column only one model's rows
    fill is still a point column, ahead of the figures, and published rows match on it."""
    (tmp_path / "spec.toml").write_text(
        f'[[models]]\npath = "{SAMPLES / "gpt2_legacy_op17.onnx"}"\nname = "gpt2"\n'
        "batch = [8, 16]\n"
        f'[[models]]\npath = "{SAMPLES / "bert_dynamo.onnx"}"\nname = "bert"\nbatch = 8\n'
        "systems = [1, 2]\n"
        '[fixed]\nmode = "train"\nseq = 16\nvalidate = false\n'
    )
    summary = run_sweep(load_spec(tmp_path / "spec.toml"), tmp_path / "out", workers=1)
    assert (summary.points, summary.failed) == (4, 0)
    rows = read_table(tmp_path / "out")
    keys = list(rows[0])
    assert keys.index("systems") < keys.index("config_hash") < keys.index("samples_per_s")
    assert [(r["model"], r["batch"], r["systems"]) for r in rows] == [
        ("gpt2", 8, None), ("gpt2", 16, None), ("bert", 8, 1), ("bert", 8, 2)
    ]  # fmt: skip
    assert all(r["execution"] and r["gap"] is None for r in rows)  # costed, not placed
    two = next(r for r in rows if r["systems"] == 2)
    measured = tmp_path / "published.csv"
    measured.write_text(f"model,systems,samples_per_s\nbert,2,{two['samples_per_s'] / 2}\n")
    matches = match_measured(rows, read_measured(measured))
    assert [(m.row["systems"], round(m.ratio, 6)) for m in matches] == [(2, 2.0)]
    assert "Against published figures" in write_report(tmp_path / "out", str(measured)).read_text()


def test_a_crowded_plot_is_sliced_where_a_model_has_a_line() -> None:
    """With too many lines the plot keeps one value of each other axis: the value of a model
    that varies along x (here GPT-2 XL's batch 112 along seq), not whatever row comes first."""
    from wsecc.sweep.report import _slice

    rows = [{"model": "bert", "seq": 128, "batch": b} for b in range(1, 14)]
    rows += [{"model": "xl", "seq": s, "batch": 112} for s in (1024, 2048)]
    shown, fixed = _slice(rows, ["model", "batch"], "seq")
    assert fixed == {"batch": 112} and [r["seq"] for r in shown] == [1024, 2048]
    assert _slice(rows[-4:], ["model", "batch"], "seq") == (rows[-4:], {})  # few lines: all


def test_a_tampered_cached_placement_fails_its_point_in_one_line(tmp_path: Path) -> None:
    """The placements a sweep shares are products too: one edited so that two regions overlap
    is refused by the validators a saved folder goes through, not simulated."""
    import json

    spec = SPEC.replace("batch = [1, 2]", "batch = [1]").replace("seq = [16, 4096]", "seq = [16]")
    (tmp_path / "spec.toml").write_text(spec)
    first = run_sweep(load_spec(tmp_path / "spec.toml"), tmp_path / "out", workers=1)
    assert first.failed == 0
    for cached in (tmp_path / "out" / "cache").glob("placed-*.json"):
        saved = json.loads(cached.read_text())
        rects = saved["placement"]["rects"]
        a, b = list(rects)[:2]
        rects[b] = dict(rects[a])
        cached.write_text(json.dumps(saved))
    (tmp_path / "out" / "points.jsonl").unlink()  # every point runs again, from the cache
    again = run_sweep(load_spec(tmp_path / "spec.toml"), tmp_path / "out", workers=1)
    assert again.failed == again.points == 2
    for row in read_table(tmp_path / "out"):
        assert "overlap" in row["error"] and "\n" not in row["error"]


def test_generate_points_take_systems_auto_beside_counts(tmp_path: Path) -> None:
    """`systems = [1, 2, "auto"]` in generate mode (issue 30): every point runs and the table
    keeps the mixed axis as text, with the systems each point used beside it."""
    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'[[models]]\npath = "{SAMPLES / "llama_dynamo.onnx"}"\nname = "llama"\n'
        '[axes]\nsystems = [1, 2, "auto"]\n'
        '[fixed]\nmode = "generate"\nseq = 64\nprompt = 16\nplacer = "greedy"\nvalidate = false\n'
    )
    summary = run_sweep(load_spec(spec), tmp_path / "out", workers=1)
    assert (summary.points, summary.ran) == (3, 3)
    for table in (tmp_path / "out", tmp_path / "out" / "results.csv"):
        rows = read_table(table)
        assert [(str(r["systems"]), r["systems_used"], r["status"]) for r in rows] == [
            ("1", 1, "ok"),
            ("2", 2, "ok"),
            ("auto", 1, "ok"),  # the sample fits one wafer
        ]
    one, _, auto = read_table(tmp_path / "out")
    assert one["tokens_per_s"] == auto["tokens_per_s"]
