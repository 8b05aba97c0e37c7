"""`wsecc export CONFIG.json`: a config.json becomes a weightless export that compiles with
`--weights inputs`; a config it cannot use is a one-line error (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from wsecc.cli import main


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("not json", "is not JSON"),
        ('["a list"]', "an object at the top"),
        ('{"model_type": "llama"}', 'names no architecture: add "architectures"'),
        ('{"architectures": ["LlamaForCausalLM"]}', 'has no "model_type"'),
        (
            '{"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4"}',
            'needs its "text_config"',
        ),
    ],
)
def test_a_config_it_cannot_use_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, says: str
) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(text)
    out = tmp_path / "model.onnx"
    assert main(["export", str(cfg), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1
    assert not out.exists()


@pytest.mark.slow
def test_a_tiny_mixtral_config_exports_weightless_and_compiles(tmp_path: Path) -> None:
    """The bundled Mixtral sample's config, weightless: the same parameters as the sample with
    its weights, two moe kernels and no generic one (minutes under load: the dynamo export)."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    import wsecc

    cfg = transformers.MixtralConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=256, intermediate_size=96, num_local_experts=4, num_experts_per_tok=2,
        max_position_embeddings=128,
    ).to_dict()  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "architectures": ["MixtralForCausalLM"]}))
    out = tmp_path / "mixtral.onnx"
    run = subprocess.run(
        [sys.executable, "-m", "wsecc.cli", "export", str(path), "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert "MixtralForCausalLM" in run.stdout and "--weights inputs" in run.stdout
    c = wsecc.compile(out, weights="inputs", seq=16, placer="greedy", validate=False)
    kinds = [k.kind.value for k in c.kernel_graph.kernels]
    assert kinds.count("moe") == 2 and "generic" not in kinds
    sample = wsecc.compile(
        Path(__file__).parents[2] / "samples" / "mixtral_dynamo.onnx",
        seq=16, placer="greedy", validate=False,
    )  # fmt: skip
    assert c.report()["model"]["params"] == sample.report()["model"]["params"]


@pytest.mark.slow
def test_a_tiny_gpt_oss_config_exports_weightless_and_compiles(tmp_path: Path) -> None:
    """The bundled gpt-oss sample's config, weightless: two moe kernels (router bias, expert
    biases, the clamped gate), sink attention, no generic kernel, and the sample's parameters."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    import wsecc

    cfg = transformers.GptOssConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, vocab_size=256, intermediate_size=48, num_local_experts=4,
        num_experts_per_tok=2, max_position_embeddings=128, sliding_window=8,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 150000.0},
    ).to_dict()  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "architectures": ["GptOssForCausalLM"]}))
    out = tmp_path / "gptoss.onnx"
    run = subprocess.run(
        [sys.executable, "-m", "wsecc.cli", "export", str(path), "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    c = wsecc.compile(out, weights="inputs", seq=16, placer="greedy", validate=False)
    kinds = [k.kind.value for k in c.kernel_graph.kernels]
    assert kinds.count("moe") == 2 and "generic" not in kinds
    moe = next(k for k in c.kernel_graph.kernels if k.kind.value == "moe")
    assert moe.params["bias"] and moe.params["activation"] == "clamped_silu"
    sample = wsecc.compile(
        Path(__file__).parents[2] / "samples" / "gptoss_dynamo.onnx",
        seq=16, placer="greedy", validate=False,
    )  # fmt: skip
    assert c.report()["model"]["params"] == sample.report()["model"]["params"]


def test_real_rotary_turns_as_llama4s_complex_rotary() -> None:
    """`real_rotary` (Llama 4 exported without complex tensors) computes what transformers'
    complex product computes: the same q and k, to float32 rounding, with attention_scaling."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama4 import modeling_llama4 as m

    from wsecc.frontend.hf_export import real_rotary

    cfg = transformers.Llama4TextConfig(hidden_size=64, num_attention_heads=4, head_dim=16)
    rotary = m.Llama4TextRotaryEmbedding(cfg)
    rotary.attention_scaling = 1.25  # scaled tables (YaRN-like) must scale both ways alike
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 7, 4, 16, generator=g), torch.randn(2, 7, 2, 16, generator=g)
    pos = torch.arange(7).expand(2, 7)
    want = m.apply_rotary_emb(q, k, rotary(q, pos))
    with real_rotary():
        got = m.apply_rotary_emb(q, k, rotary(q, pos))
    assert m.apply_rotary_emb is not None and rotary(q, pos).is_complex()  # restored after
    for w, r in zip(want, got, strict=True):
        torch.testing.assert_close(r, w, rtol=0, atol=1e-5)
