"""load_outdir: a compile folder's products come back equal to what was written."""

from __future__ import annotations

import json
import shutil

import pytest
from wsecc.targets import TargetError

from wsecc.errors import WseccError
from wsecc.view import load_outdir


def _json(folder, name):
    return json.loads((folder / name).read_text())


def test_round_trip(compiled_outdir):
    v = load_outdir(compiled_outdir)
    assert v.program.kg.to_json() == _json(compiled_outdir, "kernels.json")
    assert v.program.sizing.to_json() == _json(compiled_outdir, "sizing.json")
    assert v.program.placement.to_json(include_timing=False) == _json(
        compiled_outdir, "placement.json"
    )
    assert v.program.routing.to_json() == _json(compiled_outdir, "routing.json")
    report = _json(compiled_outdir, "report.json")
    assert v.program.target.name == report["target"]["name"]
    assert v.program.target.fabric.program_width == report["target"]["fabric"]["width"]
    assert v.title == "gpt2_legacy_op17.onnx on wse2"
    assert set(v.program.placement.rects) == {k.name for k in v.program.kg.kernels}


def test_missing_file_is_named(compiled_outdir, tmp_path):
    folder = tmp_path / "partial"
    shutil.copytree(compiled_outdir, folder)
    (folder / "routing.json").unlink()
    with pytest.raises(WseccError, match=r"routing\.json: missing \(is .* a `wsecc compile` "):
        load_outdir(folder)


def test_unreadable_json_is_named(compiled_outdir, tmp_path):
    folder = tmp_path / "bad"
    shutil.copytree(compiled_outdir, folder)
    (folder / "placement.json").write_text("{ not json")
    with pytest.raises(WseccError, match=r"placement\.json: cannot read"):
        load_outdir(folder)


def test_saved_target_is_used_and_else_the_name(compiled_outdir, tmp_path):
    folder = tmp_path / "odd"
    shutil.copytree(compiled_outdir, folder)
    assert load_outdir(folder).program.target.name == "wse2"  # from the folder's target.toml
    (folder / "target.toml").write_text((folder / "target.toml").read_text().replace(
        'name = "wse2"', 'name = "my-wafer"'))  # fmt: skip
    assert load_outdir(folder).program.target.name == "my-wafer"
    (folder / "target.toml").unlink()
    report = _json(folder, "report.json")
    report["target"]["name"] = "wse9"
    (folder / "report.json").write_text(json.dumps(report))
    with pytest.raises(TargetError, match="unknown target 'wse9'"):
        load_outdir(folder)
