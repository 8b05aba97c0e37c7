"""Tiny random-weight Hugging Face exports for tests, built once and cached.

``export_path("gpt2lm", "dynamo")`` returns the path of a perturbed tiny GPT2LMHeadModel exported
with the dynamo exporter, exporting it first if the cache does not have it. The recipe (configs,
perturbation, exporters, the torch-vs-onnxruntime check every file passes before it is cached)
is ``samples/make_samples.py``. Tests that use it skip cleanly when torch or transformers is not
installed (``pip install -e '.[export]'``).

Cache: ``$WSECC_EXPORT_CACHE`` or ``~/.cache/wsecc/hf-exports/``, in a folder named after
EXPORT_VERSION and the torch, transformers and onnxscript versions, so that a change to any of
them gives fresh files. Bump EXPORT_VERSION when the recipe changes. Parallel test processes
are safe: one process exports under a file lock, into a temporary name that is then renamed.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

EXPORT_VERSION = 1
FAMILIES = (
    "gpt2lm", "gpt2", "gptneo", "opt", "bert", "bertseq", "distilbert", "roberta", "mpnet",
    "bloom",
)  # fmt: skip
ROTARY_FAMILIES = ("llama", "gptj", "gptj_partial", "gptneox", "gptneox_serial")
EXPORTERS = ("legacy14", "legacy17", "dynamo")
_SAMPLES_DIR = Path(__file__).resolve().parents[1] / "samples"


def export_path(family: str, exporter: str, attn: str = "eager") -> Path:
    """Path of the cached export of ``family`` (one of FAMILIES or ROTARY_FAMILIES) by
    ``exporter`` (EXPORTERS), with the ``attn`` attention implementation ("eager" or "sdpa")."""
    known = FAMILIES + ROTARY_FAMILIES
    if family not in known or exporter not in EXPORTERS:
        raise ValueError(f"unknown export {family!r}/{exporter!r}; expected {known} x {EXPORTERS}")
    recipe = _recipe()
    suffix = "" if attn == "eager" else f"_{attn}"
    path = cache_dir() / f"{family}_{exporter}{suffix}.onnx"
    if path.exists():
        return path
    from filelock import FileLock  # a torch dependency

    with FileLock(f"{path}.lock"):
        if not path.exists():  # another process may have made it while we waited
            spec = {**recipe.FAMILIES, **recipe.ROTARY_FAMILIES}[family]
            module = recipe.build_family(spec, attn=attn)
            example = recipe.make_inputs(spec, 2, 16, pad_last_row=True)
            partial = path.with_name(f".{path.stem}.{os.getpid()}.onnx")
            try:
                recipe.export_onnx(module, example, spec.outputs, partial, exporter)
                recipe.check_export(module, spec, partial)
                partial.replace(path)
            finally:
                partial.unlink(missing_ok=True)
    return path


def example_inputs(
    family: str, batch: int, sequence: int, pad_last_row: bool = True, seed: int = 0
) -> dict[str, np.ndarray]:
    """int64 inputs for ``family``'s graph; ``pad_last_row`` right-pads the last row by 4."""
    recipe = _recipe()
    tensors = recipe.make_inputs(recipe.FAMILIES[family], batch, sequence, pad_last_row, seed)
    return {name: tensor.numpy() for name, tensor in tensors.items()}


def cache_dir() -> Path:
    root = os.environ.get("WSECC_EXPORT_CACHE") or Path.home() / ".cache" / "wsecc" / "hf-exports"
    versions = "-".join(
        f"{dist}{importlib.metadata.version(dist)}"
        for dist in ("torch", "transformers", "onnxscript")
    )
    path = Path(root) / f"v{EXPORT_VERSION}-{versions}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _recipe() -> ModuleType:
    """samples/make_samples.py, imported once torch and transformers are known to be there."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if str(_SAMPLES_DIR) not in sys.path:
        sys.path.insert(0, str(_SAMPLES_DIR))
    import make_samples

    recipe = (tuple(make_samples.FAMILIES), tuple(make_samples.ROTARY_FAMILIES))
    assert recipe == (FAMILIES, ROTARY_FAMILIES), "tests/hf_exports.py and the recipe disagree"
    return make_samples
