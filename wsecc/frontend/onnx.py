"""The ONNX frontend: the package that imports `onnx` (with `wsecc.check.numerics`).

load_model(path)            hardened read (`load.py`): external data confined to the
                            model's folder, the file checked before anything reads it
read_as_float32(model)      float16 and bfloat16 read as float32 (`widen.py`);
narrow_floats(model)        which of them a model holds (its data not read)
load_as_compiled(path)      load_model, then read_as_float32: the model every stage sees, and
                            onnxruntime's numerics reference of a float16 file (this module)
resolve_bindings, bind_dims every symbolic input dim bound to an int, or one error naming
                            all (`bind.py`)
generation_io,              a decoder with past key/values: its cache interface, bound as a
bind_generation             fresh prompt with an empty past (`generation.py`)
fold(model)                 constants and shape subgraphs folded by onnxscript's optimizer;
                            the weights are taken out of `model` and returned beside it
                            (`fold.py`)
to_graph(model, weights)    ONNX -> wsecc Graph; one error lists every unsupported op
                            (`convert.py`)
weight_inputs(model)        graph inputs that are weights without data, for
                            `--weights inputs` (`weights.py`)
import_model(path, ...)     load_as_compiled, bind, fold, convert, in that order (this module)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from wsecc.errors import FrontendError
from wsecc.frontend.bind import (
    BATCH_NAMES,
    DEFAULT_SEQ,
    SEQ_NAMES,
    bind_dims,
    binding_sources,
    default_seq,
    resolve_bindings,
    symbolic_dims,
)
from wsecc.frontend.common import DTYPES
from wsecc.frontend.convert import raw_op_histogram, to_graph, unsupported_ops
from wsecc.frontend.fold import fold
from wsecc.frontend.generation import CacheLayer, GenerationIO, bind_generation, generation_io
from wsecc.frontend.load import dtype_name, load_model
from wsecc.frontend.weights import check_weights, placeholders, weight_inputs
from wsecc.frontend.widen import narrow_floats, read_as_float32
from wsecc.ir.core import Graph
from wsecc.vocab import Weights, parse

if TYPE_CHECKING:
    import onnx

__all__ = [
    "BATCH_NAMES",
    "DEFAULT_SEQ",
    "SEQ_NAMES",
    "CacheLayer",
    "GenerationIO",
    "ModelInfo",
    "bind_dims",
    "bind_generation",
    "default_seq",
    "fold",
    "generation_io",
    "import_model",
    "load_as_compiled",
    "load_model",
    "narrow_floats",
    "read_as_float32",
    "resolve_bindings",
    "symbolic_dims",
    "to_graph",
    "unsupported_ops",
    "weight_inputs",
]


@dataclass(frozen=True)
class ModelInfo:
    """What the frontend learned about the file: opsets, bindings, input/output names."""

    path: str
    opset: int
    producer: str
    bindings: dict[str, int] = field(default_factory=dict)
    raw_ops: dict[str, int] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # dim name -> where its value came from
    weight_inputs: int = 0  # graph inputs taken as weights without data (--weights inputs)
    generation: GenerationIO | None = None  # a decoder with past key/values, as it was bound
    widened: tuple[str, ...] = ()  # the file's float types read as float32 ('float16', ...)

    def describe_bindings(self) -> str:
        """'batch=1 (--batch), sequence=64 (position table)': each value and its source; for a
        generation graph also the inputs bound as a fresh prompt ('position_ids=arange(64) per
        row')."""
        parts = [
            f"{k}={v} ({self.sources[k]})" if k in self.sources else f"{k}={v}"
            for k, v in self.bindings.items()
        ]
        if self.generation is not None:
            bound = self.generation.bound.items()
            parts += [f"{k}={v}" for k, v in bound if k not in self.bindings]
        return ", ".join(parts)


def load_as_compiled(
    path: str | os.PathLike[str], *, lazy_weights: bool = False
) -> tuple[onnx.ModelProto, tuple[str, ...]]:
    """The file as every stage of a compile reads it: `load_model` (`lazy_weights`: its large
    inline weights left in the file, as `import_model` reads it), then its float16 and bfloat16
    read as float32 (`read_as_float32`); and the names of the types read so. The numerics'
    onnxruntime reference runs a float16 file as this model (`wsecc.check.numerics`), so that it
    computes what the compiled program computes."""
    return read_as_float32(load_model(path, lazy_weights=lazy_weights))


def import_model(
    path: str | os.PathLike[str],
    *,
    batch: int | None = None,
    seq: int | None = None,
    dims: Mapping[str, int] | None = None,
    weights: Weights | str = Weights.CONSTANTS,
) -> tuple[Graph, ModelInfo]:
    """Load, bind, fold and convert. Returns the graph and what was learned on the way.

    `seq=None` binds the sequence to the model's own context where the graph shows it (its
    position table's rows, less the offset its lookup adds: `default_seq`), else
    `DEFAULT_SEQ`; `ModelInfo.sources` says where each bound value came from.

    `weights="inputs"`: the graph inputs that are weights (`weight_inputs`) become constants
    without data (`placeholders`); the folder sees them as typed inputs, as it sees every large
    weight, so nothing ever reads or allocates them. Without it, a file whose weights are such
    inputs fails in one line that names the flag (`check_weights`).

    A file that computes in float16 or bfloat16 is read as float32 (`load_as_compiled`);
    `ModelInfo.widened` names the types."""
    model, widened = load_as_compiled(path, lazy_weights=True)  # converted, never saved
    gen = generation_io(model)
    found = weight_inputs(model)
    as_inputs = parse(Weights, weights, "weights") is Weights.INPUTS
    check_weights(model, found, as_inputs, Path(path).name)
    if not as_inputs:
        found = []
    names = {i.name for i in found}
    seq_source = "--seq"
    if seq is None:
        seq, seq_source = default_seq(model, names)
    dims = dict(dims or {})
    bindings = resolve_bindings(model, batch, seq, dims, names)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    raw_ops = raw_op_histogram(model)
    bind_dims(model, bindings)
    if gen is not None:
        gen = bind_generation(model, gen)
    info = ModelInfo(
        path=str(path),
        opset=opset,
        producer=f"{model.producer_name} {model.producer_version}".strip(),
        bindings=bindings,
        raw_ops=raw_ops,
        sources=binding_sources(bindings, dims, seq_source, gen),
        weight_inputs=len(found),
        generation=gen,
        widened=widened,
    )
    declared = {o.name: o.type.tensor_type.elem_type for o in model.graph.output}
    folded, stored = fold(model)
    del model
    graph = to_graph(folded, stored, placeholders(found))
    for v in graph.outputs:  # folding re-infers output types: compare with what the file said
        want = declared.get(v.name, 0)
        if want and DTYPES.get(want) is not v.type.dtype:
            raise FrontendError(
                f"output {v.name!r} is declared {dtype_name(want)} but computes "
                f"{v.type.dtype.value}; the file is inconsistent"
            )
    del stored, folded  # the weights now live in the graph's constants only
    return graph, info
