"""Where wsecc's compiled loops are cached (`cache_dir`): the simulator's
(`wsecc.sim.compiled`) and the router's (`wsecc.route.compiled`) share one folder
(`use_for_numba`). No numba import here, so that either can ask without loading the other's
loops."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def cache_dir(env: Mapping[str, str] = os.environ) -> Path:
    """Where the compiled loops are cached: `WSECC_CACHE_DIR`, else `$XDG_CACHE_HOME/wsecc`,
    else `~/.cache/wsecc` (the XDG convention), each with a `numba` folder; the temporary
    directory when none of them can be written (a read-only home: numba refuses to cache with
    nowhere to write)."""
    if env.get("WSECC_CACHE_DIR"):
        roots = [Path(env["WSECC_CACHE_DIR"])]
    else:
        xdg = env.get("XDG_CACHE_HOME")
        roots = [Path(xdg) / "wsecc"] if xdg else []
        roots.append(Path.home() / ".cache" / "wsecc")
    for root in roots:
        path = root / "numba"
        try:
            path.mkdir(parents=True, exist_ok=True)
            tempfile.TemporaryFile(dir=path).close()
            return path
        except OSError:
            continue
    return Path(tempfile.gettempdir()) / "wsecc-numba-cache"


def use_for_numba(config: Any) -> None:
    """Make numba (its `config` module, which the caller imports: only the compiled modules
    import numba) cache the compiled loops in `cache_dir`, unless the user named a folder with
    NUMBA_CACHE_DIR (theirs wins)."""
    if not config.CACHE_DIR:
        config.CACHE_DIR = str(cache_dir())
