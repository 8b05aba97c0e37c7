"""Hostile input on every surface besides the ONNX file (issue 35): compile options, target
files, saved products, sweep specs and journals, golden tables.

Each case runs `wsecc.cli.main` in-process (a subprocess costs 2-4 s; the ONNX-file cases of
test_hostile.py run as real processes) in its own folder and must end in exit code 2 with
exactly one line on stderr, "wsecc: error: ...", no traceback and no "internal error" (a bug,
whatever the input), before any work: no file in the case's folder created, changed or
removed (the folder is snapshotted before and after). `CASES` counts them by surface.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES

from wsecc.cli import main
from wsecc.sweep.table import write_table

GPT2 = SAMPLES / "gpt2_legacy_op17.onnx"
LLAMA = SAMPLES / "llama_dynamo.onnx"
DEEP_JSON = '{"a":' * 100_000 + "1" + "}" * 100_000  # past Python's recursion limit
DEEP_TOML = "x = " + "[" * 5000 + "]" * 5000 + "\n"
WSE2 = Path(__file__).resolve().parents[2] / "targets" / "wse2.toml"
FAST = ["--seq", "16", "--placer", "greedy", "--sim", "l0", "--no-validate"]


def _snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry under root: kind, size, mtime (a folder: its kind)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            if p.is_dir() and not p.is_symlink():  # a temporary made and removed is fine
                out[str(p.relative_to(root))] = (st.st_mode,)
                continue
            out[str(p.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def refused(argv: list[str], where: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """Run `wsecc argv` in `where`; assert it is refused as promised; return the error line."""
    before = _snapshot(where)
    cwd = os.getcwd()
    os.chdir(where)
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's usage errors
        code = e.code  # type: ignore[assignment]
    finally:
        os.chdir(cwd)
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 2, (argv, code, err)
    assert len(err.splitlines()) == 1 and err.startswith("wsecc: error:"), (argv, err)
    assert "internal error" not in err and "Traceback" not in err, (argv, err)
    assert _snapshot(where) == before, (argv, "changed files")
    return err


# ---- compile options ------------------------------------------------------------------------

OPTION_CASES = [
    (["--time-budget", "nan"], "must be a finite number"),
    (["--time-budget", "inf"], "must be a finite number"),
    (["--time-budget", "1e300"], "must be above 0, at most 604800"),
    (["--time-budget", "0"], "must be above 0, at most 604800"),
    (["--seed", "-1"], "must be from 0"),
    (["--seed", "99999999999"], "must be from 0"),
    (["--seq", "2147483648"], "must be from 1 to 2,147,483,647"),
    (["--seq", "2147483647"], "one tensor may take here"),
    (["--batch", "1000000", "--seq", "1000000"], "one tensor may take here"),
    (["--dim", "batch=-3"], "must be from 1"),
    (["--dim", "=3"], "expected NAME=VALUE"),
    (["--new-tokens", "1000000000", "--mode", "generate"], "must be from 1 to 1,048,576"),
    (["--mode", "generate", "--context", "16", "--new-tokens", "100"], "at most 9 new tokens fit"),
    (["--pins", "missing.json"], "no such file"),
    (["--pins", "list.json", "--placer", "manual"], "must be a JSON object"),
    (["--pins", "truncated.json"], "not valid JSON"),
    (["--pins", "binary.bin"], "not valid JSON"),
    (["--pins", "."], "a folder, not a file"),
    (["--pins", "many.json"], "100,000 pins; at most 4,096"),
    (["--pins", "deep.json"], "nested too deeply"),
    (["--inputs", "list.json"], "not an .npz file"),
    (["--dump-dir", "list.json"], "names a file"),
    (["--replicas", "-2"], "must be from 1"),
    (["--systems", "0", "--mode", "train"], "must be from 1"),
    (["--chunk-tokens", "0"], "must be from 1"),
    (["-o", "."], "-o . is the working folder"),
    (["-o", "list.json"], "-o list.json"),
]


@pytest.fixture
def case_dir(tmp_path: Path) -> Path:
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "truncated.json").write_text('{"a": {"x": 1')
    (tmp_path / "binary.bin").write_bytes(bytes(range(256)))
    (tmp_path / "notes.txt").write_text("the user's")
    (tmp_path / "deep.json").write_text(DEEP_JSON)
    pin = {"x": 0, "y": 0, "w": 1, "h": 1}
    (tmp_path / "many.json").write_text(json.dumps({f"k{i}": pin for i in range(100_000)}))
    return tmp_path


def test_compile_options(case_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for extra, message in OPTION_CASES:
        argv = ["compile", str(GPT2), *FAST, *extra]
        argv += [] if "-o" in extra else ["-o", "out"]
        err = refused(argv, case_dir, capsys)
        assert message in err, (extra, err)


# ---- target files ---------------------------------------------------------------------------


def _target(edit: Callable[[str], str]) -> Callable[[Path], str]:
    def make(where: Path) -> str:
        (where / "t.toml").write_text(edit(WSE2.read_text()))
        return "t.toml"

    return make


def _line(key: str, value: str) -> Callable[[str], str]:
    """wse2.toml with the first `key = ...` line's value replaced."""

    def edit(text: str) -> str:
        lines = text.splitlines()
        i = next(i for i, ln in enumerate(lines) if ln.split("=")[0].strip() == key)
        lines[i] = f"{key} = {value}"
        return "\n".join(lines)

    return edit


def _raw(content: bytes | None) -> Callable[[Path], str]:
    def make(where: Path) -> str:
        if content is None:
            (where / "t.toml").mkdir()
        else:
            (where / "t.toml").write_bytes(content)
        return "t.toml"

    return make


TARGET_CASES: list[tuple[Callable[[Path], str], str]] = [
    (_target(_line("width", "1000000000")), "fabric.width 1,000,000,000 is over"),
    (_target(_line("height", "5000")), "fabric.height 5,000 is over"),
    (_target(_line("bytes_per_pe", "1000000000000000")), "sram.bytes_per_pe"),
    (_target(_line("hz", "1e-300")), "clock.hz 1e-300 is outside"),
    (_target(_line("hz", "nan")), "clock.hz"),
    (_target(_line("total", "-1")), "colors.total"),
    (_target(_line("width", '"wide"')), "fabric.width must be a positive integer"),
    (_target(lambda t: t + "\n[extra]\nx = 1\n"), "unknown field extra"),
    (_target(lambda t: t[: len(t) // 2]), "t.toml"),
    (_raw(b"\x00\xff\xfe" * 100), "t.toml"),
    (_raw(b""), "missing field"),
    (_raw(None), "t.toml"),
    (_raw(DEEP_TOML.encode()), "nested too deeply"),
]


def test_target_files(case_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for make, message in TARGET_CASES:
        path = make(case_dir)
        for command in ("compile", "check"):
            err = refused([command, str(GPT2), "--target", path, "--seq", "16"], case_dir, capsys)
            assert message in err, (message, err)
        p = case_dir / path
        shutil.rmtree(p) if p.is_dir() else p.unlink()


# ---- saved products (view, simulate, diff) -----------------------------------------------


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("hostile-products") / "gpt2.wsecc"
    assert main(["compile", str(GPT2), *FAST, "-o", str(out)]) == 0
    return out


def _json_edit(name: str, edit: Callable[[Any], None]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        doc = json.loads((folder / name).read_text())
        edit(doc)
        (folder / name).write_text(json.dumps(doc))

    return apply


def _first_rect(doc: Any) -> dict[str, int]:
    return doc["rects"][sorted(doc["rects"])[0]]  # type: ignore[no-any-return]


def _copy_off(doc: Any) -> None:
    """Two copies, the second's tile past the program rectangle's right edge."""
    doc["replicas"].update(k=2, tile={"w": 100, "h": 100}, origins=[[0, 0], [700, 0]])


def _overlap(doc: Any) -> None:
    a, b = (doc["rects"][n] for n in sorted(doc["rects"])[:2])
    b["x"], b["y"] = a["x"], a["y"]


PRODUCT_CASES: list[tuple[str, Callable[[Path], None], str]] = [
    ("overlap", _json_edit("placement.json", _overlap), "overlap"),
    ("x -50", _json_edit("placement.json", lambda d: _first_rect(d).update(x=-50)), "leaves"),
    (
        "off fabric",
        _json_edit("placement.json", lambda d: _first_rect(d).update(y=99999)),
        "leaves",
    ),
    ("unplaced", _json_edit("placement.json", lambda d: d["rects"].popitem()), "is not placed"),
    ("x text", _json_edit("placement.json", lambda d: _first_rect(d).update(x="a")), "integers"),
    ("rects list", _json_edit("placement.json", lambda d: d.update(rects=[])), "placement.json"),
    ("color", _json_edit("routing.json", lambda d: d["lanes"][0].update(color=999)), "budget"),
    ("lane lost", _json_edit("routing.json", lambda d: d["lanes"].pop(0)), "is missing"),
    ("moves", _json_edit("routing.json", lambda d: d["lanes"][0].update(moves="Q7")), "routing"),
    (
        "sram",
        _json_edit("sizing.json", lambda d: d["kernels"][0]["sram"].update(weights=10**7)),
        "B/PE",
    ),  # fmt: skip
    ("sizing list", lambda f: (f / "sizing.json").write_text("[]"), "sizing.json"),
    (
        "report type",
        _json_edit("report.json", lambda d: d["sizing"].update(pes_used="x")),
        "pes_used",
    ),  # fmt: skip
    ("report key", _json_edit("report.json", lambda d: d.pop("target")), "missing key 'target'"),
    ("binary", lambda f: (f / "kernels.json").write_bytes(bytes(range(256))), "kernels.json"),
    (
        "folder",
        lambda f: ((f / "routing.json").unlink(), (f / "routing.json").mkdir()),
        "a folder",
    ),  # fmt: skip
    ("missing", lambda f: (f / "sizing.json").unlink(), "sizing.json: missing"),
    ("deep", lambda f: (f / "placement.json").write_text(DEEP_JSON), "nested too deeply"),
    (
        "copies",
        _json_edit("report.json", lambda d: d["replicas"].update(k=2, tile=None)),
        "2 copies need 2 origins",
    ),  # fmt: skip
    ("copy off", _json_edit("report.json", _copy_off), "leaves the"),
]


def test_saved_products(compiled: Path, case_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, damage, message in PRODUCT_CASES:
        folder = case_dir / "c.wsecc"
        shutil.copytree(compiled, folder)
        damage(folder)
        for argv in (["view", "c.wsecc"], ["simulate", "c.wsecc", "--sim", "l0"]):
            err = refused(argv, case_dir, capsys)
            assert message in err, (name, argv, err)
        if name.startswith("report"):  # diff reads report.json alone
            err = refused(["diff", str(compiled), "c.wsecc"], case_dir, capsys)
            assert message in err, (name, "diff", err)
        shutil.rmtree(folder)


@pytest.fixture(scope="module")
def compiled_systems(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A compile over two systems (llama_dynamo, one layer each): system 1's products in
    systems/1/."""
    out = tmp_path_factory.mktemp("hostile-systems") / "llama.wsecc"
    argv = ["--mode", "generate", "--systems", "2", "--context", "32", "--new-tokens", "4"]
    assert main(["compile", str(LLAMA), *argv, *FAST[2:], "-o", str(out)]) == 0
    assert (out / "systems" / "1" / "placement.json").is_file()
    return out


S1 = "systems/1/"
SYSTEM_CASES: list[tuple[str, Callable[[Path], None], str]] = [
    ("s1 overlap", _json_edit(S1 + "placement.json", _overlap), "1/placement.json: kernels"),
    (
        "s1 off fabric",
        _json_edit(S1 + "placement.json", lambda d: _first_rect(d).update(y=99999)),
        "leaves",
    ),
    ("s1 unplaced", _json_edit(S1 + "placement.json", lambda d: d["rects"].popitem()), "placed"),
    (
        "s1 color",
        _json_edit(S1 + "routing.json", lambda d: d["lanes"][0].update(color=999)),
        "budget",
    ),
    ("s1 lane lost", _json_edit(S1 + "routing.json", lambda d: d["lanes"].pop(0)), "is missing"),
    (
        "s1 sram",
        _json_edit(S1 + "sizing.json", lambda d: d["kernels"][0]["sram"].update(weights=10**7)),
        "1/sizing.json: kernel",
    ),  # fmt: skip
    ("s1 missing", lambda f: (f / S1 / "routing.json").unlink(), "1/routing.json: missing"),
    (
        "s1 kernels",
        _json_edit(S1 + "kernels.json", lambda d: d["kernels"].pop()),
        "kernels.json) do not agree",
    ),  # fmt: skip
    (
        "model kernels",
        lambda f: (f / "systems" / "model-kernels.json").unlink(),
        "model-kernels.json: missing",
    ),  # fmt: skip
    ("s1 deep", lambda f: (f / S1 / "placement.json").write_text(DEEP_JSON), "nested too deeply"),
]


def test_saved_systems(
    compiled_systems: Path, case_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tampered product of system 1 of a compile over two systems is refused by view and
    simulate as system 0's are; a file wsecc did not write in systems/ keeps -o off the folder."""
    for name, damage, message in SYSTEM_CASES:
        folder = case_dir / "c.wsecc"
        shutil.copytree(compiled_systems, folder)
        damage(folder)
        for argv in (["view", "c.wsecc"], ["simulate", "c.wsecc", "--no-validate"]):
            err = refused(argv, case_dir, capsys)
            assert message in err, (name, argv, err)
        shutil.rmtree(folder)
    folder = case_dir / "c.wsecc"
    shutil.copytree(compiled_systems, folder)
    (folder / "systems" / "1" / "notes.txt").write_text("the user's")
    err = refused(["compile", str(LLAMA), *FAST, "-o", "c.wsecc"], case_dir, capsys)
    assert "'systems/1/notes.txt', which wsecc did not write" in err
    shutil.rmtree(folder)


def test_diff_refuses_a_report_of_the_wrong_shape(
    compiled: Path, case_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = {
        "list.json": "not a wsecc report",
        "binary.bin": "cannot read",
    }
    (case_dir / "nan.json").write_text(
        (compiled / "report.json").read_text().replace('"seed": 0', '"seed": NaN', 1)
    )
    bad["nan.json"] = "NaN is not JSON"
    for path, message in bad.items():
        err = refused(["diff", str(compiled), path], case_dir, capsys)
        assert message in err, (path, err)


# ---- sweep specs and journals ---------------------------------------------------------------

SPEC_CASES = [
    ("[fixed]\ntime-budget = nan\n", "time-budget = nan: must be a finite number"),
    ("[fixed]\nseed = -1\n", "seed = -1: must be from 0"),
    ('[fixed]\npins = "list.json"\n', "must be a JSON object"),
    ("[axes]\nseed = [" + ",".join(map(str, range(20_000))) + "]\n", "seed lists 20,000 values"),
    (
        "[axes]\nseed = ["
        + ",".join(map(str, range(400)))
        + "]\nbatch = ["
        + ",".join(map(str, range(1, 401)))
        + "]\n",
        "160,000 points",
    ),
    ('[fixed]\ntarget = "huge.toml"\n', "fabric.width"),
    ("[axes]\nseq = [16, 2147483648]\n", "must be from 1 to 2,147,483,647"),
    ("[axes]\n" + DEEP_TOML.replace("x", "seq"), "nested too deeply"),
]


def _spec(where: Path, body: str) -> Path:
    (where / "huge.toml").write_text(_line("width", "100000")(WSE2.read_text()))
    path = where / "s.toml"
    path.write_text(f'[[models]]\npath = "{GPT2}"\n' + body)
    return path


def test_sweep_specs(case_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for body, message in SPEC_CASES:
        _spec(case_dir, body)
        err = refused(["sweep", "s.toml", "-o", "s.sweep"], case_dir, capsys)
        assert message in err, (body[:40], err)


JOURNALS: list[tuple[Callable[[Path], None], str]] = [
    (lambda p: p.write_bytes(b"\x00\xff" * 64 + b"\n"), "line 1 is not text"),
    (lambda p: p.write_text("[1, 2]\n"), "line 1 is a JSON list"),
    (lambda p: p.write_text('{"config_hash": 5, "status": "ok"}\n'), "config_hash 5"),
    (lambda p: p.write_text('{"config_hash": "a", "status": 1}\n'), "has status 1"),
    (lambda p: p.write_text('{"config_hash": "a", "status": "ok", "x": [1]}\n'), "has x = [1]"),
    (lambda p: p.write_text('garbage\n{"config_hash": "a", "status": "ok"}\n'), "is not JSON"),
    (lambda p: p.mkdir(), "not a file"),
    (lambda p: p.write_text(DEEP_JSON + "\n"), "line 1 is nested too deeply"),
]


def test_sweep_journals(case_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec(case_dir, '[fixed]\nplacer = "greedy"\n')
    for damage, message in JOURNALS:
        folder = case_dir / "s.sweep"
        folder.mkdir()
        shutil.copy(spec, folder / "spec.toml")
        damage(folder / "points.jsonl")
        err = refused(["sweep", "s.toml", "-o", "s.sweep"], case_dir, capsys)
        assert message in err, (message, err)
        shutil.rmtree(folder)


# ---- sweep tables and golden files ----------------------------------------------------------

ROWS = [
    {
        "model": "gpt2",
        "seq": s,
        "config_hash": f"h{s}",
        "status": "ok",
        "samples_per_s": 10.0 * s,
        "tokens_per_s": 160.0 * s,
        "pes_used": 100 * s,
        "wall_s": 1.0,
    }  # fmt: skip
    for s in (16, 32)
]


@pytest.fixture
def swept(case_dir: Path) -> Path:
    folder = case_dir / "t.sweep"
    folder.mkdir()
    write_table(folder, ROWS)
    return folder


GOLDENS = [
    ("", "no rows"),
    ("model,seq,config_hash,status,samples_per_s\n", "no rows"),
    ("model,seq,config_hash,status,warp\ngpt2,16,h16,ok,1\n", "column 'warp' is not in"),
    ("seq,config_hash,samples_per_s\n16,h16,160\n", "no 'model' column"),
    ("model,seq,config_hash,status,samples_per_s\ngpt2,16,h16,ok,fast\n", "'fast' is not a finite"),
    ("model,seq,config_hash,status,samples_per_s\ngpt2,16,h16,ok,nan\n", "nan is not a finite"),
    ("model,seq\ngpt2,16,extra\n", "more cells than the header"),
]


def test_golden_files(swept: Path, case_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    golden = case_dir / "golden.csv"
    for text, message in GOLDENS:
        golden.write_text(text)
        argv = ["sweep", "report", "t.sweep", "--check-golden", "golden.csv"]
        err = refused(argv, case_dir, capsys)
        assert message in err, (text, err)
    golden.write_bytes(b"\xff\xfe\x00" * 50)
    refused(["sweep", "report", "t.sweep", "--check-golden", "golden.csv"], case_dir, capsys)
    for tol in ("samples_per_s=nan", "samples_per_s=inf", "samples_per_s=-1", "x", "warp=0.1"):
        (swept / "results.csv").rename(golden)
        shutil.copy(golden, swept / "results.csv")
        argv = ["sweep", "report", "t.sweep", "--check-golden", "golden.csv", "--tolerance", tol]
        err = refused(argv, case_dir, capsys)
        assert "--tolerance" in err, (tol, err)
        assert not (swept / "report.html").exists()


MEASURED = [
    ("model,seq,batch,tokens_per_s\ngpt2,16,,abc\n", "'abc' is not a positive number"),
    ("model,seq,batch,tokens_per_s\ngpt2,16,,nan\n", "nan is not a positive number"),
    ("model,seq,batch,tokens_per_s\ngpt2,16,,-5\n", "-5 is not a positive number"),
    ("a,b\n", "needs a header with model"),
]


def test_measured_files(swept: Path, case_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for text, message in MEASURED:
        (case_dir / "m.csv").write_text(text)
        err = refused(["sweep", "report", "t.sweep", "--measured", "m.csv"], case_dir, capsys)
        assert message in err, (text, err)


def test_unwritable_paths(compiled: Path, case_dir: Path, capsys) -> None:
    """A path wsecc cannot write is the environment's problem, said in one line."""
    shutil.copytree(compiled, case_dir / "c.wsecc")
    (case_dir / "c.wsecc" / "viewer.html").unlink()
    (case_dir / "c.wsecc" / "viewer.html").mkdir()
    assert "viewer.html: Is a directory" in refused(["view", "c.wsecc"], case_dir, capsys)
    argv = ["compile", str(GPT2), *FAST, "--dump-dir", "/proc/wsecc-nope", "-o", "out"]
    assert "cannot be made" in refused(argv, case_dir, capsys)


def test_a_golden_that_can_fail_fails(swept: Path, case_dir: Path, capsys) -> None:
    golden = case_dir / "golden.csv"
    shutil.copy(swept / "results.csv", golden)
    argv = ["sweep", "report", str(swept), "--check-golden", str(golden)]
    assert main(argv) == 0
    golden.write_text(golden.read_text().replace("2560.0", "2600.0"))
    assert main(argv) == 1
    assert "tokens_per_s 2,600 -> 2,560" in capsys.readouterr().out


def test_damaged_tables(swept: Path, case_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (swept / "results.parquet").write_bytes(b"PAR1" + bytes(range(256)) + b"PAR1")
    err = refused(["sweep", "report", "t.sweep"], case_dir, capsys)
    assert "results.parquet: not a readable Parquet table" in err
    (swept / "results.parquet").unlink()
    (swept / "results.parquet").mkdir()
    refused(["sweep", "report", "t.sweep"], case_dir, capsys)


CASES = {
    "compile options": len(OPTION_CASES),
    "target files": 2 * len(TARGET_CASES),
    "saved products": 2 * len(PRODUCT_CASES) + 2 + 3,
    "saved systems": 2 * len(SYSTEM_CASES) + 1,
    "sweep specs": len(SPEC_CASES),
    "sweep journals and tables": len(JOURNALS) + 2,
    "golden and measured files": len(GOLDENS) + 1 + 5 + len(MEASURED),
    "unwritable paths": 2,
    "bombs and multitudes": 2,
}
"""Refused cases by surface (the report of issue 35 quotes these)."""


def test_the_schema_check_agrees_with_jsonschema(compiled: Path) -> None:
    """`wsecc.report.products.schema_errors` (no dependency) finds what jsonschema finds."""
    jsonschema = pytest.importorskip("jsonschema")
    from wsecc.report.products import report_schema, schema_errors

    report = json.loads((compiled / "report.json").read_text())
    edits: list[Callable[[Any], None]] = [
        lambda d: None,
        lambda d: d["sizing"].update(pes_used="x"),
        lambda d: d["sizing"].update(pes_used=-1),
        lambda d: d.pop("numerics"),
        lambda d: d.update(mode="fly"),
        lambda d: d["performance"].update(samples_per_s=[1]),
        lambda d: d["kernels"].append(3),
        lambda d: d.update(replicas={"k": 0}),
    ]
    for edit in edits:
        doc = json.loads(json.dumps(report))
        edit(doc)
        ours = list(schema_errors(doc, report_schema()))
        theirs = list(jsonschema.Draft202012Validator(report_schema()).iter_errors(doc))
        assert bool(ours) == bool(theirs), (ours, [e.message for e in theirs])


def test_bombs_and_multitudes(
    case_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A compressed --inputs that unpacks past the tensor budget (here lowered to 1 MiB: the
    same rule at the scale of a test), and --workers past what memory holds."""
    import numpy as np

    import wsecc.frontend.bind as bind
    import wsecc.options

    monkeypatch.setattr(bind, "tensor_budget_bytes", lambda: 1 << 20)
    monkeypatch.setattr(wsecc.options, "tensor_budget_bytes", lambda: 1 << 20)
    np.savez_compressed(case_dir / "bomb.npz", input_ids=np.zeros((1, 8 << 20), dtype=np.int8))
    argv = ["compile", str(GPT2), *FAST, "--inputs", "bomb.npz", "-o", "out"]
    assert "unpack to 8.0 MiB, over the 1.0 MiB" in refused(argv, case_dir, capsys)
    _spec(case_dir, "")
    argv = ["sweep", "s.toml", "-o", "s.sweep", "--workers", "1000000000"]
    assert "1,000,000,000 workers" in refused(argv, case_dir, capsys)
