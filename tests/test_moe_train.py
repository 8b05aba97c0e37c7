"""Mixture-of-experts models train (issue 30): the moe op's gradient with the router's choice
held (`wsecc.ir.rules._moe_vjp`) against a hand derivation and numpy's differences, the moe
kind's backward cost (`wsecc.kernels.kinds.moe.MOE_GRAD`) by hand, and the gradient check on
the bundled MoE samples: it passes, holds the routers' choices (a step that changes a token's
top k is left out and counted), and fails a broken rule or a scaled gradient."""

from __future__ import annotations

import dataclasses
import json
import math
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from test_gradcheck import fused

from wsecc.check.numerics import OrtWithWeights
from wsecc.cli import main
from wsecc.compiler import Compilation
from wsecc.ir import Graph, Op, rules
from wsecc.ir.grad import choose_loss
from wsecc.kernels.kinds.matmul import GATE_OPS
from wsecc.kernels.kinds.moe import MOE_GRAD, SIGMOID_OPS
from wsecc.modes import gradcheck
from wsecc.modes.gradcheck import GradCheck, check_gradients
from wsecc.options import Options

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
MOE_SAMPLES = ("mixtral", "qwen2moe", "qwen3moe", "gptoss", "llama4")
FAST = 6  # coordinates per tensor in the default run


def _sample(name: str) -> Path:
    return SAMPLES / f"{name}_dynamo.onnx"


# ---------------------------------------------------------------- the rule, by hand and numpy


def _silu(z: float) -> float:
    return z / (1 + math.exp(-z))


def _dsilu(z: float) -> float:
    s = 1 / (1 + math.exp(-z))
    return s * (1 + z * (1 - s))


def test_the_moe_gradient_of_one_token_by_hand() -> None:
    """H = F = 1, two experts, top 1, softmax not renormalised: x = 0.5 and W_router = [1, -1]
    choose expert 0 with weight s0 = σ(1) (a softmax of two logits is the sigmoid of their
    difference). With y = s0·silu(x g)·(x u)·d and dy = 1, by hand: dd = s0 h; dh = s0 d,
    dg = x dh (x u) silu'(x g), du = x dh silu(x g); dl0 = −dl1 = s0 (1 − s0) y0 (y0 the
    unweighted output); dW_router = x dl; dx = dh (g (x u) silu'(x g) + u silu(x g)) + dl·W_router.
    Expert 1, not chosen, gets zero gradients."""
    x, g, u, d = 0.5, 0.8, -1.2, 0.7
    xs = [
        np.array([[x]]),
        np.array([[1.0, -1.0]]),
        np.array([[[g]], [[0.3]]]),
        np.array([[[u]], [[0.4]]]),
        np.array([[[d]], [[0.9]]]),
    ]
    a: dict[str, Any] = dict(k=1, router="softmax", normalize=False, activation="silu")
    dx, dwr, dwg, dwu, dwd = rules._moe_vjp(xs, [], [np.ones((1, 1))], a)
    s0 = 1 / (1 + math.exp(-1.0))
    h = _silu(x * g) * (x * u)
    y0 = h * d
    dh = s0 * d
    dl0 = s0 * (1 - s0) * y0
    assert dwd[0, 0, 0] == pytest.approx(s0 * h, rel=1e-12)
    assert dwg[0, 0, 0] == pytest.approx(x * dh * (x * u) * _dsilu(x * g), rel=1e-12)
    assert dwu[0, 0, 0] == pytest.approx(x * dh * _silu(x * g), rel=1e-12)
    assert dwr[0] == pytest.approx([x * dl0, -x * dl0], rel=1e-12)
    want_dx = dh * (g * (x * u) * _dsilu(x * g) + u * _silu(x * g)) + dl0 * 1.0 - dl0 * -1.0
    assert dx[0, 0] == pytest.approx(want_dx, rel=1e-12)
    assert not dwg[1].any() and not dwu[1].any() and not dwd[1].any()
    # renormalised top 1: the kept weight is 1 whatever the logits, so the router gets exactly 0
    dwr_norm = rules._moe_vjp(xs, [], [np.ones((1, 1))], {**a, "normalize": True})[1]
    assert not np.any(dwr_norm)


VARIANTS: dict[str, tuple[str, bool, str, str, str, bool]] = {
    # shared, bias, activation, scale, router, normalize
    "mixtral": ("none", False, "silu", "output", "softmax", True),
    "qwen2moe": ("sigmoid", False, "silu", "output", "softmax", False),
    "plain_shared": ("plain", False, "silu", "output", "softmax", True),
    "gptoss": ("none", True, "clamped_silu", "output", "softmax", True),
    "llama4": ("plain", False, "silu", "input", "sigmoid", False),
}


def _tiny_moe(variant: str, rng: np.random.Generator) -> tuple[list[np.ndarray], dict[str, Any]]:
    """A tiny float64 moe (T 5, H 6, F 4, E 4, k 2, S 3) of `VARIANTS[variant]`."""
    shared, bias, act, scale, router, normalize = VARIANTS[variant]
    T, H, F, E, S = 5, 6, 4, 4, 3

    def n(*shape: int, s: float = 0.5) -> np.ndarray:
        return rng.standard_normal(shape) * s

    xs = [n(1, T, H, s=1.0), n(H, E, s=1.0), n(E, H, F), n(E, H, F), n(E, F, H)]
    if shared != "none":
        xs += [n(H, S), n(H, S), n(S, H)]
    if shared == "sigmoid":
        xs.append(n(H, 1, s=1.0))
    if bias:
        xs += [n(E, s=1.0), n(E, F, s=0.3), n(E, F, s=0.3), n(E, H, s=0.3)]
    a: dict[str, Any] = dict(
        k=2, router=router, normalize=normalize, activation=act, shared=shared, bias=bias,
        scale=scale,
    )  # fmt: skip
    if act == "clamped_silu":  # a limit inside the values' range: both clamps bind somewhere
        a.update(alpha=1.702, limit=0.7)
    return xs, a


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_moe_gradient_matches_numpys_differences(variant: str) -> None:
    """Every operand's gradient of Σ dy·moe(...) against float64 central differences of the
    forward rule (`rules.moe`), h = 1e-6, with the routing checked unchanged at every step (so
    the differences are of the branch the rule differentiates). Their error is float64's
    rounding of the loss over 2h, ~1e-16·|L|/1e-6 ≈ 1e-9 of the largest derivative here, and
    h²·f'''/6 ≈ 1e-12: a tolerance of 1e-6 of the largest derivative is a thousand times that,
    and far below any rule's mistake (a missing term is O(1))."""
    rng = np.random.default_rng(7)
    xs, a = _tiny_moe(variant, rng)
    dy = rng.standard_normal(xs[0].shape)
    br = xs[rules.moe_bias_start(a)] if a["bias"] else None
    H = xs[0].shape[-1]

    def routing(args: list[np.ndarray]) -> np.ndarray:
        b = args[rules.moe_bias_start(a)] if a["bias"] else None
        return rules.moe_routing(args[0].reshape(-1, H), args[1], a, b)[0]

    chosen = rules.moe_routing(xs[0].reshape(-1, H), xs[1], a, br)[0]
    grads = rules._moe_vjp(xs, [], [dy], a)
    h = 1e-6
    for i, x in enumerate(xs):
        fd = np.zeros(x.size)
        for j in range(x.size):
            sides = []
            for sign in (1, -1):
                moved = [v.copy() for v in xs]
                moved[i].reshape(-1)[j] += sign * h
                assert np.array_equal(routing(moved), chosen)
                sides.append(float(np.sum(rules.moe(moved, a)[0] * dy)))
            fd[j] = (sides[0] - sides[1]) / (2 * h)
        got = grads[i]
        assert got is not None and got.shape == x.shape
        scale = max(float(np.max(np.abs(fd))), 1e-12)
        assert float(np.max(np.abs(got.reshape(-1) - fd))) <= 1e-6 * scale, (variant, i)


@pytest.mark.parametrize("variant", ["mixtral", "gptoss", "qwen2moe", "llama4"])
def test_two_shards_gradients_add_up_to_the_whole_blocks(variant: str) -> None:
    """A block split in two shards (`split-moe`: experts 0-1 with the shared expert, then 2-3
    adding to the running sum) differentiates to the whole block's gradients: x's and the
    router's are the shards' sums, the experts' their concatenation, the running sum's dy."""
    rng = np.random.default_rng(11)
    xs, a = _tiny_moe(variant, rng)
    dy = rng.standard_normal(xs[0].shape)
    whole = rules._moe_vjp(xs, [], [dy], a)
    x, wr, wg, wu, wd = xs[:5]
    shared = xs[5 : rules.moe_bias_start(a)] if a["bias"] else xs[5:]
    br, bg, bu, bd = xs[rules.moe_bias_start(a) :] if a["bias"] else (None,) * 4

    def shard(lo: int, hi: int) -> list[np.ndarray]:
        out = [x, wr, wg[lo:hi], wu[lo:hi], wd[lo:hi]] + (list(shared) if lo == 0 else [])
        if a["bias"]:
            out += [br, bg[lo:hi], bu[lo:hi], bd[lo:hi]]
        return out

    first = shard(0, 2)
    second_attrs = {**a, "first": 2, "shared": "none", "accumulate": True}
    second = [*shard(2, 4), rules.moe(first, a)[0]]
    np.testing.assert_allclose(
        rules.moe(second, second_attrs)[0], rules.moe(xs, a)[0], rtol=1e-12, atol=1e-12
    )
    g2 = rules._moe_vjp(second, [], [dy], second_attrs)
    g1 = rules._moe_vjp(first, [], [g2[-1]], a)
    np.testing.assert_array_equal(g2[-1], dy)
    np.testing.assert_allclose(whole[0], g1[0] + g2[0], rtol=1e-12, atol=1e-12)  # x
    np.testing.assert_allclose(whole[1], g1[1] + g2[1], rtol=1e-12, atol=1e-12)  # router
    for i in (2, 3, 4):  # the experts' weights
        np.testing.assert_array_equal(whole[i], np.concatenate([g1[i], g2[i]]))
    n_shared = len(shared)
    for i in range(5, 5 + n_shared):  # the shared expert's, in the first shard only
        np.testing.assert_array_equal(whole[i], g1[i])
    if a["bias"]:
        b1, b2, bw = 5 + n_shared, 5, rules.moe_bias_start(a)
        np.testing.assert_allclose(whole[bw], g1[b1] + g2[b2], rtol=1e-12, atol=1e-12)
        for j in (1, 2, 3):
            np.testing.assert_array_equal(whole[bw + j], np.concatenate([g1[b1 + j], g2[b2 + j]]))


def test_experts_no_token_chose_get_zero_gradients() -> None:
    """Four tokens routed (top 1) to expert 0 or 1 only: experts 2 and 3 get exact zeros."""
    rng = np.random.default_rng(3)
    xs, a = _tiny_moe("mixtral", rng)
    xs[1][:, 2:] = -100.0  # logits of experts 2 and 3 far below the others' for every x here
    xs[0] = np.abs(xs[0])
    a = {**a, "k": 1}
    idx = rules.moe_routing(xs[0].reshape(-1, 6), xs[1], a)[0]
    assert set(idx.reshape(-1)) <= {0, 1}
    _, _, dwg, dwu, dwd = rules._moe_vjp(xs, [], [np.ones(xs[0].shape)], a)
    for d in (dwg, dwu, dwd):
        assert not d[2:].any() and d[:2].any()


# ---------------------------------------------------------------- the backward's cost


def test_the_moe_backward_flops_by_hand() -> None:
    """tokens 2, H 4, F 3, E 2, k 1, no shared expert, no biases, SwiGLU (GATE_OPS 12):
    router 4·2·4·2 = 64 and 2 tokens × (4·2 + 4·1) = 24; a pair 12·4·3 + 3·(12 + 4) + 4·4 = 208,
    one a token: 416. Total 504. With a sigmoid-gated shared expert of S 5: a token adds
    12·4·5 + 5·(12 + 4) + 4 + 7·4 + SIGMOID_OPS (10) = 362."""
    assert GATE_OPS == 12 and SIGMOID_OPS == 10
    p: dict[str, Any] = dict(
        tokens=2, H=4, F=3, E=2, k=1, router="softmax", normalize=True, S=0, shared="none",
        bias=False, activation="silu",
    )  # fmt: skip
    assert MOE_GRAD.flops(p) == 504
    assert MOE_GRAD.flops({**p, "S": 5, "shared": "sigmoid"}) == 504 + 2 * 362
    # kept: x 4, logits 2, ids and weights 2, one pair's gate and up 6; the shared gate/up 10 + 1
    assert MOE_GRAD.saved_elems(p) == 2 * (4 + 2 + 2 + 6)
    assert MOE_GRAD.saved_elems({**p, "S": 5, "shared": "sigmoid"}) == 2 * (14 + 10 + 1)


def test_the_backward_of_wide_experts_is_twice_their_forward() -> None:
    """Experts much wider than the router (H F ≫ E): the backward's 12 H F a pair against the
    forward's 6 H F, a ratio that tends to 2, as a Linear's."""
    from wsecc.kernels.kinds.moe import MOE

    p: dict[str, Any] = dict(
        tokens=64, H=4096, F=14336, E=8, k=2, router="softmax", normalize=True, S=0,
        shared="none", bias=False, activation="silu",
    )  # fmt: skip
    assert MOE_GRAD.flops(p) / MOE.flops(p) == pytest.approx(2.0, rel=2e-3)


def test_a_moe_model_costs_a_training_step() -> None:
    """Train mode no longer refuses a MoE model: its step's work is the forward's and every
    kernel's backward, the moe kernels' by their rule."""
    from wsecc.targets import load_target

    from wsecc.core.flow import lower
    from wsecc.modes.train import plan_training

    kg = lower(Compilation.load(_sample("mixtral"), Options(mode="train", seq=16)).fuse().fused)
    moes = [k for k in kg.kernels if k.kind.value == "moe"]
    assert len(moes) == 2
    grad = sum(g.flops(k.params) for k in kg.kernels if (g := k.spec.grad) is not None)
    assert kg.train_flops_per_sample == kg.flops_per_sample + grad
    result = plan_training(
        kg, load_target("wse2"), "mixed", batch=64, chunk_tokens=16, execution="pipelined"
    )
    assert result.samples_per_s > 0


# ---------------------------------------------------------------- the gradient check


def _moe_rows_passed(check: GradCheck, graph: Graph) -> None:
    """Every row traced from a moe's operand (router, experts, shared expert, biases) passed."""
    operands = {v.name for n in graph.nodes if n.op is Op.MOE for v in n.inputs[1:]}
    rows = [r for r in check.rows if any(t.split()[0][1:] in operands for t in r.traced_from)]
    assert rows and all(r.passed for r in rows), [(r.name, r.status) for r in rows]


def _enough_measured(check: GradCheck) -> None:
    """A check that left most coordinates out is no evidence: at least 95% of the sampled ones
    measured, and every router watched."""
    sampled = sum(min(check.samples, math.prod(r.shape)) for r in check.rows)
    assert check.measured >= 0.95 * sampled, check.summary()
    assert check.measured + check.routing_excluded <= sampled
    assert check.routers >= 1


@pytest.mark.parametrize("name", MOE_SAMPLES)
def test_the_check_passes_on_the_moe_samples(name: str) -> None:
    g, feeds = fused(_sample(name))
    check = check_gradients(_sample(name), g, feeds, "fp32", samples=FAST, seed=1)
    assert check.passed and not check.untraced, check.summary()
    assert check.loss == pytest.approx(check.loss_onnxruntime, rel=1e-3)
    _moe_rows_passed(check, g)
    _enough_measured(check)
    assert "router" in check.summary() and "left out" in check.summary()


def test_the_check_passes_in_mixed() -> None:
    g, feeds = fused(_sample("qwen2moe"))
    check = check_gradients(_sample("qwen2moe"), g, feeds, "mixed", samples=FAST, seed=1)
    assert check.passed, check.summary()
    _moe_rows_passed(check, g)
    _enough_measured(check)


@pytest.mark.parametrize("name", ["mixtral", "gptoss", "llama4"])
def test_a_router_without_its_gradient_fails_exactly_the_routers(name: str) -> None:
    g, feeds = fused(_sample(name))
    check = check_gradients(_sample(name), g, feeds, samples=FAST, seed=1, fault="moe_router")
    routers = {n.inputs[1].name for n in g.nodes if n.op is Op.MOE} | {
        n.inputs[rules.moe_bias_start(n.attr_dict)].name
        for n in g.nodes
        if n.op is Op.MOE and n.attr("bias", False)
    }
    failed = {t.split()[0][1:] for r in check.rows if r.status == "failed" for t in r.traced_from}
    assert not check.passed and failed == routers


def test_the_top_k_choices_are_watched_not_returned() -> None:
    """onnxruntime's session lists every TopK's indices (the routers' choices) beside the
    outputs, and `run` still returns the outputs alone."""
    ort = OrtWithWeights(_sample("mixtral"))
    _, feeds = fused(_sample("mixtral"))
    assert len(ort.choices) == 2 and ort.output_names == ["logits"]
    outputs, choices = ort.run_with_choices(feeds)
    assert list(outputs) == ["logits"] and list(ort.run(feeds)) == ["logits"]
    assert all(c.shape == (16, 2) for c in choices)  # 2 x 8 tokens, top 2


@cache
def near_tie(tmp: Path) -> Path:
    """The Mixtral sample with its routers' weights scaled by 0.002: every token's logits
    nearly tie, so fp32's steps (3e-4 to 1e-2) on a router weight change some token's choice."""
    model = onnx.load(_sample("mixtral"))
    for t in model.graph.initializer:
        if t.name.endswith("mlp.gate.weight"):
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * 0.002, t.name))
    path = tmp / "mixtral_near_tie.onnx"
    onnx.save(model, path)
    return path


def test_a_step_that_changes_a_choice_gives_no_difference(tmp_path: Path) -> None:
    """`_central` returns NaN exactly where w ± h changes some token's top k (checked here by
    running onnxruntime at both sides), and elsewhere the plain central difference."""
    path = near_tie(tmp_path)
    g, feeds = fused(path)
    ort = OrtWithWeights(path)
    _, chosen = ort.run_with_choices(feeds)
    name = "model.model.layers.1.mlp.gate.weight"
    coords = np.arange(24)
    loss = choose_loss(g, feeds, 0)
    step = 1e-4  # changes some tokens' choices here (6 of these 24 coordinates), not all
    held = gradcheck._central(ort, feeds, loss, (name,), coords, step, chosen)
    plain = gradcheck._central(ort, feeds, loss, (name,), coords, step)
    for i, j in enumerate(coords):
        changed = False
        for sign in (1, -1):
            w = ort.weights[name].copy()
            w.reshape(-1)[j] += np.float32(sign * step)
            changed |= gradcheck._changed(ort.run_with_choices(feeds, {name: w})[1], chosen)
        assert np.isnan(held[i]) == changed
        if not changed:
            assert held[i] == plain[i]
    assert np.isnan(held).any() and not np.isnan(held).all()


def test_coordinates_whose_steps_change_a_choice_are_left_out_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Near a tie, without a float64 reference (disabled here), the routers' rows lose most of
    their coordinates to changed choices: those are counted, the rows are unchecked (not
    passed: what remains is no longer the sample drawn), and every other row still passes;
    the count is in the summary and the JSON. With float64's differences (h = 1e-5, steps too
    small to change the choices here) the same rows are measured and pass."""
    path = near_tie(tmp_path)
    g, feeds = fused(path)
    monkeypatch.setattr(gradcheck, "float64_session", lambda path, feeds: "disabled")
    check = check_gradients(path, g, feeds, "fp32", samples=FAST, seed=1)
    routers = [r for r in check.rows if r.name.endswith("mlp.gate.weight")]
    assert len(routers) == 2 and all(r.routing_excluded > r.sampled for r in routers)
    assert all(r.status == "unchecked" for r in routers)
    others = [r for r in check.rows if r not in routers]
    assert all(r.passed for r in others if not r.unchecked) and check.passed
    excluded = sum(r.routing_excluded for r in check.rows)
    assert check.routing_excluded == excluded > 0
    assert f"{excluded} left out" in check.summary()
    assert check.to_json()["routing_excluded"] == excluded
    monkeypatch.undo()
    check64 = check_gradients(path, g, feeds, "fp32", samples=FAST, seed=1)
    rows64 = [r for r in check64.rows if r.name.endswith("mlp.gate.weight")]
    assert all(r.passed and r.reference == "float64 FD" for r in rows64), check64.summary()
    _enough_measured(check64)


def test_a_row_passed_on_fewer_coordinates_than_left_out_is_unchecked() -> None:
    row = gradcheck.GradRow(
        ("w",), (4, 4), ("%w",), 3, 0.0, 1.0, 0.0, 0.0, 1.0, passed=True, status="passed",
        routing_excluded=4,
    )  # fmt: skip
    assert gradcheck._enough_measured(row).status == "unchecked"
    kept = gradcheck._enough_measured(dataclasses.replace(row, routing_excluded=3))
    assert kept.status == "passed"


# ---------------------------------------------------------------- the command line


def _train(name: str, tmp_path: Path, *extra: str, precision: str = "fp32") -> list[str]:
    return [
        "compile", str(_sample(name)), "--seq", "8", "--mode", "train", "--precision", precision,
        "--placer", "greedy", "--validate", "-o", str(tmp_path / "out"), *extra,
    ]  # fmt: skip


def test_cli_train_validate_passes_on_mixtral(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("wsecc.check.checks.GRAD_SAMPLES", 4)
    assert main(_train("mixtral", tmp_path)) == 0
    assert "gradients      PASS" in capsys.readouterr().out
    n = json.loads((tmp_path / "out" / "report.json").read_text())["numerics"]
    assert n["passed"] and not n["untraced"] and n["routers"] == 2
    assert n["measured"] >= 0.95 * sum(min(4, math.prod(r["shape"])) for r in n["rows"])


def test_cli_grad_scale_fault_fails_on_a_moe_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--inject-fault grad_scale=1.05` on the Mixtral sample: the verdict FAILs, exit 1."""
    monkeypatch.setattr("wsecc.check.checks.GRAD_SAMPLES", 4)
    assert main(_train("mixtral", tmp_path, "--inject-fault", "grad_scale=1.05")) == 1
    assert "gradients      FAIL" in capsys.readouterr().out
    rows = json.loads((tmp_path / "out" / "report.json").read_text())["numerics"]["rows"]
    failed = [r for r in rows if r["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["norm_ratio"] == pytest.approx(1.05, rel=2e-3)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "mixed"])
@pytest.mark.parametrize("name", MOE_SAMPLES)
def test_cli_train_validate_passes_on_every_moe_sample_with_the_full_budget(
    name: str, precision: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`wsecc compile SAMPLE --mode train --validate` as a user runs it (200 coordinates a
    tensor): PASS, every weight traced, at least 95% of the sampled coordinates measured."""
    assert main(_train(name, tmp_path, precision=precision)) == 0
    assert "gradients      PASS" in capsys.readouterr().out
    n = json.loads((tmp_path / "out" / "report.json").read_text())["numerics"]
    assert n["passed"] and not n["untraced"] and n["routers"] >= 1
    assert n["measured"] >= 0.95 * sum(min(200, math.prod(r["shape"])) for r in n["rows"])


@pytest.mark.parametrize("precision", ["fp32", "mixed"])
@pytest.mark.parametrize("name", MOE_SAMPLES)
def test_a_scaled_gradient_fails_on_every_moe_sample(name: str, precision: str) -> None:
    """grad_scale=1.05 (the last Linear's weight gradient × 1.05) fails on each MoE sample in
    each precision, on exactly that row, its |g|/|fd| 1.05 within the mixed arithmetic's 1e-3."""
    g, feeds = fused(_sample(name))
    check = check_gradients(
        _sample(name), g, feeds, precision, samples=FAST, seed=1, fault="grad_scale=1.05"
    )
    failed = [r for r in check.rows if r.status == "failed"]
    assert not check.passed and len(failed) == 1, check.summary()
    assert failed[0].norm_ratio == pytest.approx(1.05, rel=2e-3)
