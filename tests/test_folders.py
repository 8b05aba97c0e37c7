"""A saved compile over several systems holds every system's products (issue 30): `wsecc simulate`
re-simulates the whole program from the folder with the compile's figures, `wsecc view` draws
every system's panel, `wsecc diff` compares per-system rows; a one-system folder is unchanged."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from wsecc.cli import main
from wsecc.report.diff import diff_reports
from wsecc.view import load_outdir

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
LLAMA = SAMPLES / "llama_dynamo.onnx"  # two layers: one per system over two
SMALL = ["--placer", "greedy", "--no-validate"]
GENERATE = ["--mode", "generate", "--context", "32", "--new-tokens", "4", *SMALL]
PRODUCTS = ("kernels.json", "sizing.json", "placement.json", "routing.json")


def _compile(out: Path, *argv: str) -> dict[str, Any]:
    assert main(["compile", str(LLAMA), *argv, "-o", str(out)]) == 0
    return json.loads((out / "report.json").read_text())


def _panels(folder: Path) -> list[dict[str, Any]]:
    html = (folder / "viewer.html").read_text()
    data = re.search(r'id="wsecc-data">(.*?)</script>', html, re.S)
    assert data is not None
    return json.loads(data.group(1))["systems"]


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """llama_dynamo in generate mode over two systems, saved, and its report."""
    out = tmp_path_factory.mktemp("folders") / "two.wsecc"
    return out, _compile(out, *GENERATE, "--systems", "2")


def test_the_folder_holds_every_systems_products(two: tuple[Path, dict[str, Any]]) -> None:
    folder, report = two
    assert len(report["systems"]) == 2
    for name in PRODUCTS:
        assert (folder / name).is_file()  # system 0's, at the top as before
        assert (folder / "systems" / "1" / name).is_file()
    assert not (folder / "systems" / "2").exists()
    model = json.loads((folder / "systems" / "model-kernels.json").read_text())
    s0 = json.loads((folder / "kernels.json").read_text())
    s1 = json.loads((folder / "systems" / "1" / "kernels.json").read_text())
    names = [k["name"] for k in model["kernels"]]
    on_systems = [k["name"] for k in s0["kernels"]] + [k["name"] for k in s1["kernels"]]
    held = [n for n in names if n not in on_systems]  # the host holds the embedding's table
    assert [k["kind"] for k in model["kernels"] if k["name"] in held] == ["embedding"]
    assert [n for n in names if n not in held] == on_systems
    rects = json.loads((folder / "systems" / "1" / "placement.json").read_text())["rects"]
    assert sorted(rects) == sorted(k["name"] for k in s1["kernels"])
    assert sum(r["w"] * r["h"] for r in rects.values()) == report["systems"][1]["pes"]
    loaded = load_outdir(folder)
    assert loaded.systems is not None and loaded.systems.systems.count == 2
    assert len(loaded.systems.systems.crossings) == len(report["partition"]["crossings"])


def test_simulate_gives_the_compiles_figures_for_every_system(
    two: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    folder = tmp_path / "again.wsecc"
    shutil.copytree(two[0], folder)
    compiled = two[1]
    assert main(["simulate", str(folder), "--no-validate"]) == 0
    again = json.loads((folder / "report.json").read_text())
    assert again["performance"] == compiled["performance"]  # tokens/s, first token, crossings
    assert again["systems"] == compiled["systems"]
    assert again["performance"]["systems"] == 2
    for name in PRODUCTS:  # the products survive the rewrite, unchanged
        assert (folder / "systems/1" / name).read_bytes() == (
            two[0] / "systems/1" / name
        ).read_bytes()


def test_simulate_in_another_precision_recosts_every_system(
    two: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    folder = tmp_path / "fp32.wsecc"
    shutil.copytree(two[0], folder)
    assert main(["simulate", str(folder), "--precision", "fp32", "--no-validate"]) == 0
    again = json.loads((folder / "report.json").read_text())
    assert again["precision"] == "fp32" and len(again["systems"]) == 2
    s1 = json.loads((folder / "systems/1/sizing.json").read_text())
    assert s1["precision"] == "fp32"
    # fp32 weights take more bytes than mixed's 16-bit ones, on every system
    for a, b in zip(again["systems"], two[1]["systems"], strict=True):
        assert a["resident_bytes"] > b["resident_bytes"]


def test_infer_mode_over_two_systems_simulates_again(tmp_path: Path) -> None:
    out = tmp_path / "infer.wsecc"
    compiled = _compile(out, "--mode", "infer", "--seq", "16", "--systems", "2", *SMALL)
    assert main(["simulate", str(out), "--no-validate"]) == 0
    again = json.loads((out / "report.json").read_text())
    assert again["performance"]["samples_per_s"] == compiled["performance"]["samples_per_s"]
    assert again["systems"] == compiled["systems"]


def test_view_draws_every_systems_panel(two: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    folder = tmp_path / "view.wsecc"
    shutil.copytree(two[0], folder)
    compiled = _panels(folder)
    (folder / "viewer.html").unlink()
    assert main(["view", str(folder)]) == 0
    drawn = _panels(folder)
    assert len(drawn) == 2 and drawn == compiled
    assert any(r[5] for r in drawn[1]["rects"])  # system 1's crossing ends are marked


def test_diff_compares_per_system_rows(two: tuple[Path, dict[str, Any]]) -> None:
    report = two[1]
    other = json.loads(json.dumps(report))
    other["systems"][1]["pes"] *= 2
    rows = {r["metric"]: r for r in diff_reports(report, other)}
    assert rows["system 1: PEs"]["ratio"] == 2.0 and rows["system 1: PEs"]["better"] == "a"
    assert rows["system 0: PEs"]["ratio"] == 1.0
    one = dict(report, systems=report["systems"][:1])
    assert not any(m.startswith("system ") for m in (r["metric"] for r in diff_reports(one, other)))


def test_a_one_system_folder_is_as_before(tmp_path: Path) -> None:
    out = tmp_path / "one.wsecc"
    report = _compile(out, *GENERATE)
    assert len(report["systems"]) == 1
    assert not (out / "systems").exists()
    assert load_outdir(out).systems is None
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.name.endswith(".json")}
    assert main(["simulate", str(out), "--no-validate"]) == 0
    for name in PRODUCTS:
        assert (out / name).read_bytes() == before[name]


@pytest.mark.slow
def test_a_shared_placement_is_saved_and_resimulated_with_numerics(tmp_path: Path) -> None:
    """A tiny four-layer Llama (torch's dynamo exporter) over four systems: the middle two have
    the same shapes and share system 1's placement, saved as system 1's files in systems/2/;
    re-simulated from the folder with numerics, the figures are the compile's and the generated
    ids onnxruntime's."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("onnxscript")
    cfg = transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()

    class Logits(torch.nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, input_ids: Any) -> Any:
            return self.m(input_ids=input_ids, use_cache=False).logits

    onnx = tmp_path / "llama4.onnx"
    ids = torch.randint(0, 256, (1, 16))
    seq = {"input_ids": {1: torch.export.Dim("seq", max=128)}}
    torch.onnx.export(
        Logits(), (ids,), str(onnx), dynamo=True, input_names=["input_ids"],
        output_names=["logits"], dynamic_shapes=seq,
    )  # fmt: skip
    out = tmp_path / "four.wsecc"
    argv = ["--mode", "generate", "--context", "32", "--new-tokens", "4", "--placer", "greedy"]
    assert main(["compile", str(onnx), *argv, "--systems", "4", "-o", str(out)]) == 0
    compiled = json.loads((out / "report.json").read_text())
    assert [r["placed_as"] for r in compiled["systems"]] == [0, 1, 1, 3]
    for name in ("sizing.json", "placement.json", "routing.json"):
        assert (out / "systems/2" / name).read_bytes() == (out / "systems/1" / name).read_bytes()
    assert main(["simulate", str(out), "--validate"]) == 0
    again = json.loads((out / "report.json").read_text())
    assert again["performance"] == compiled["performance"]
    assert again["systems"] == compiled["systems"]
    assert again["numerics"]["passed"] is True
