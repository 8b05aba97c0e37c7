"""The worked examples in docs/python-api.md run as written."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_python_api_page_runs(capsys):
    text = (ROOT / "docs" / "python-api.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 4
    here = os.getcwd()
    os.chdir(ROOT)
    try:
        namespace: dict[str, object] = {}
        for i, block in enumerate(blocks):
            exec(compile(block, f"docs/python-api.md block {i + 1}", "exec"), namespace)
    finally:
        os.chdir(here)
    out = capsys.readouterr().out
    assert "samples/s" in out
    # what the page shows a user: a compile that checks out, a staged one, another precision
    assert namespace["c"].numerics.passed and namespace["report"]["schema"] == "wsecc.report/1"
    assert namespace["s"].perf.samples_per_s > 0 and namespace["s"].numerics is None
    assert namespace["fp32"].numerics.precision == "fp32" and namespace["fp32"].numerics.passed


def test_the_sweep_pages_spec_is_the_sample_and_loads():
    from wsecc.sweep import load_spec

    readme = (ROOT / "docs" / "sweep.md").read_text()
    sample = (ROOT / "samples" / "sweep.toml").read_text()
    assert f"```toml\n{sample}```" in readme
    points = load_spec(ROOT / "samples" / "sweep.toml").points()
    assert len(points) == 12 and {p.model.name for p in points} == {"gpt2", "bert"}
