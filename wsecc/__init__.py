"""wsecc: compile ONNX transformer graphs for a wafer-scale dataflow engine.

The Python API (loaded on first use, so `import wsecc` stays light)::

    import wsecc
    c = wsecc.compile("model.onnx", seq=128, target="wse2")   # -> wsecc.Compilation
    c.report()                                                # the report.json dictionary
"""

from __future__ import annotations

from typing import Any

from wsecc.version import __version__

__all__ = ["Compilation", "Options", "WseccError", "__version__", "compile"]


def __getattr__(name: str) -> Any:
    if name in ("compile", "Compilation", "Options"):
        from wsecc import compiler

        return getattr(compiler, name)
    if name == "WseccError":
        from wsecc.errors import WseccError

        return WseccError
    raise AttributeError(f"module 'wsecc' has no attribute {name!r}")
