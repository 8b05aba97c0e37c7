"""`--profile` (or WSECC_PROFILE=1): where the compile's time went, so the next speed-up is aimed.

Prints to stderr, after the command, the functions with the most cumulative time under cProfile
(the wall time per stage is report.json's `stage_seconds`, from the compile's one
`wsecc.core.instrument.Instrument`). `WSECC_PROFILE=path.prof` also saves the
raw profile for snakeviz / `python -m pstats`.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
from collections.abc import Callable
from typing import Any

TOP = 25


def wanted(flag: bool) -> bool:
    return flag or bool(os.environ.get("WSECC_PROFILE"))


def run_profiled(fn: Callable[[], int], stream: Any = None) -> int:
    """Run `fn` under cProfile; print the top functions by cumulative time to `stream`."""
    stream = stream if stream is not None else sys.stderr
    prof = cProfile.Profile()
    try:
        return prof.runcall(fn)
    finally:
        out = io.StringIO()
        stats = pstats.Stats(prof, stream=out)
        stats.sort_stats("cumulative").print_stats(TOP)
        print(f"wsecc profile: top {TOP} functions by cumulative time", file=stream)
        lines = out.getvalue().splitlines()
        start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
        print("\n".join(line for line in lines[start:] if line.strip()), file=stream)
        path = os.environ.get("WSECC_PROFILE", "")
        if path.endswith(".prof"):
            prof.dump_stats(path)
            print(f"wsecc profile: raw profile saved to {path}", file=stream)
