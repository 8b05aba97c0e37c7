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
    assert "samples/s" in out and "True" in out
