"""`wsecc export CONFIG.json -o model.onnx`: a Hugging Face `config.json` becomes a weightless ONNX
export, without downloading a weight.

The model is built from its configuration with transformers on torch's meta device (shapes, no
data: a 405B model costs nothing), its buffers made real on the CPU by the model's own
initializer (rotary frequencies and position ids are computed, not learned, and the graph reads
them as data), and exported with the dynamo exporter, every parameter a graph input with a
static shape and no data, batch and sequence dynamic (docs/frontend.md, "Models bigger than
this machine"). Compile the result with `--weights inputs`.

Mixture-of-experts models export their experts as batched matmuls
(`set_experts_implementation("batched_mm")`: TopK, Gather of the expert weight stacks, MatMul,
which `fuse-moe` matches); transformers' default experts loop over the experts a batch hits,
which no exporter writes. A multimodal checkpoint (Llama 4: `text_config` inside) exports its
text decoder.

Llama 4's rotary embedding multiplies complex tensors (torch.polar, view_as_complex), which
the dynamo exporter does not translate; `real_rotary` computes the same rotation of each
(even, odd) pair of features with real cos and sin tables while a model exports.

torch and transformers are imported here only (pip install 'wsecc[export]').
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wsecc.errors import WseccError

_TEXT_MODELS = {"Llama4ForConditionalGeneration": ("Llama4ForCausalLM", "llama4_text")}
"""Multimodal architectures whose text decoder is exported: architecture -> (causal LM class,
text config's model_type); the text config is `config["text_config"]`."""
_INPUTS = ("input_ids", "attention_mask")


@dataclass(frozen=True)
class Exported:
    """What `export_config` wrote: the model class, its parameter inputs and parameters."""

    path: Path
    model_class: str
    weight_inputs: int
    parameters: int

    def summary(self) -> str:
        return (
            f"{self.path}: {self.model_class}, {self.parameters:,} parameters in "
            f"{self.weight_inputs} weight inputs without data; compile it with --weights inputs"
        )


def read_config(path: Path) -> tuple[str, str, dict[str, Any]]:
    """(model class, model_type, config fields) of a Hugging Face config.json, or a one-line
    WseccError naming what is missing."""
    try:
        raw = json.loads(path.read_text())
    except OSError as e:
        raise WseccError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise WseccError(f"{path} is not JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(raw, dict):
        raise WseccError(f"{path} is not a Hugging Face config.json (an object at the top)")
    archs = raw.get("architectures")
    model_type = raw.get("model_type")
    if not (isinstance(archs, list) and archs and isinstance(archs[0], str)):
        raise WseccError(f'{path} names no architecture: add "architectures": ["...ForCausalLM"]')
    if not isinstance(model_type, str):
        raise WseccError(f'{path} has no "model_type"')
    arch = archs[0]
    if arch in _TEXT_MODELS:
        text = raw.get("text_config")
        if not isinstance(text, dict):
            raise WseccError(f'{path}: {arch} needs its "text_config"')
        arch, model_type = _TEXT_MODELS[arch]
        raw = {**text, "model_type": model_type}
    return arch, model_type, raw


def _meta_model(arch: str, model_type: str, fields: dict[str, Any]) -> Any:
    import torch
    import transformers

    model_cls = getattr(transformers, arch, None)
    if model_cls is None:
        raise WseccError(
            f"transformers {transformers.__version__} has no model class {arch!r}: "
            'upgrade transformers or check "architectures"'
        )
    try:
        config_cls = transformers.CONFIG_MAPPING[model_type]
    except KeyError:
        raise WseccError(
            f"transformers {transformers.__version__} does not know model_type {model_type!r}"
        ) from None
    keep = {k: v for k, v in fields.items() if k not in ("architectures", "model_type")}
    keep["use_cache"] = False
    keep.pop("quantization_config", None)  # shapes of the unquantized model (16-bit weights)
    cfg = config_cls(**keep)
    with torch.device("meta"):
        model = model_cls._from_config(cfg, attn_implementation="eager")
    if hasattr(model, "set_experts_implementation") and _has_experts(model):
        model.set_experts_implementation("batched_mm")
    for module in model.modules():
        if module._buffers:
            for name, buf in module._buffers.items():
                if buf is not None:
                    module._buffers[name] = torch.empty_like(buf, device="cpu")
            model._init_weights(module)  # fills the buffers; the parameters stay on meta
    return model.eval()


@contextmanager
def real_rotary() -> Iterator[None]:
    """Within: Llama 4's rotary as real arithmetic. Its rotary module returns [cos, sin] stacked
    on a last axis of 2 (attention_scaling applied) in place of the complex freqs_cis, and
    `apply_rotary_emb` turns each pair (x[2i], x[2i+1]) by it: (x0 cos - x1 sin, x0 sin + x1
    cos), what the complex product computes; the interleaved rotary form fuse-attention reads."""
    import torch
    from transformers.models.llama4 import modeling_llama4 as m

    def tables(self: Any, x: Any, position_ids: Any) -> Any:
        inv = self.inv_freq.to(device=x.device, dtype=torch.float)
        freqs = position_ids[..., None].float() * inv
        return torch.stack([freqs.cos(), freqs.sin()], dim=-1) * self.attention_scaling

    def rotate(xq: Any, xk: Any, cis: Any) -> tuple[Any, Any]:
        cos, sin = cis[:, :, None, :, 0], cis[:, :, None, :, 1]

        def turn(x: Any) -> Any:
            pairs = x.float().reshape(*x.shape[:-1], -1, 2)
            x0, x1 = pairs[..., 0], pairs[..., 1]
            out = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)
            return out.flatten(3).type_as(x)

        return turn(xq), turn(xk)

    saved = (m.Llama4TextRotaryEmbedding.forward, m.apply_rotary_emb)
    setattr(m.Llama4TextRotaryEmbedding, "forward", tables)  # noqa: B010 (a method patched while exporting)
    setattr(m, "apply_rotary_emb", rotate)  # noqa: B010
    try:
        yield
    finally:
        setattr(m.Llama4TextRotaryEmbedding, "forward", saved[0])  # noqa: B010
        setattr(m, "apply_rotary_emb", saved[1])  # noqa: B010


def _has_experts(model: Any) -> bool:
    return any(type(m).__name__.endswith("Experts") for m in model.modules())


def export_config(config_path: str | Path, out: str | Path) -> Exported:
    """Export the model a config.json describes to `out`, weightless (module doc)."""
    config_path, out = Path(config_path), Path(out)
    arch, model_type, fields = read_config(config_path)
    try:
        import torch
    except ImportError:
        raise WseccError(
            "wsecc export needs torch and transformers: pip install 'wsecc[export]'"
        ) from None
    model = _meta_model(arch, model_type, fields)

    class _Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.model(input_ids=input_ids, attention_mask=attention_mask).logits

    ids = torch.ones(2, 16, dtype=torch.int64)
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    with warnings.catch_warnings(), real_rotary():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            _Logits().eval(),
            (ids, torch.ones_like(ids)),
            dynamo=True,
            optimize=False,
            verbose=False,
            input_names=list(_INPUTS),
            output_names=["logits"],
            dynamic_shapes={name: {0: batch, 1: sequence} for name in _INPUTS},
        )
    if program is None:  # dynamo=True always returns one; the type allows None
        raise WseccError(f"{config_path}: torch.onnx.export returned no program")
    graph = program.model.graph
    weights = [v for v in graph.initializers.values() if _is_meta(v.const_value)]
    for v in weights:  # every parameter: a graph input, its shape, no data
        graph.initializers.pop(str(v.name))
        v.const_value = None
    graph.inputs.extend(weights)
    program.optimize()  # the exporter's own optimizer, now that it cannot read them
    for node in program.model.graph.all_nodes():
        node.metadata_props.pop("pkg.torch.onnx.stack_trace", None)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".onnx", dir=out.parent)  # nothing half-written
    os.close(fd)
    try:
        program.save(tmp)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    params = sum(_elements(v.shape) for v in weights)
    return Exported(out, arch, len(weights), int(params))


def cmd_export(args: argparse.Namespace) -> int:
    """`wsecc export CONFIG.json -o model.onnx`."""
    print(export_config(args.config, args.out).summary())
    return 0


def _elements(shape: Any) -> int:
    """Elements of a static shape (a parameter's: every dim a number)."""
    n = 1
    for d in shape or ():
        n *= int(d)
    return n


def _is_meta(tensor: object) -> bool:
    raw = getattr(tensor, "raw", None)
    return bool(getattr(raw, "is_meta", False))
