"""The checks against onnxruntime a compile runs, as functions of its stage values: the tiled
functional simulation's numerics (infer), the gradient check (train), greedy generation
(generate), and when they run at all (`should_validate`, `numerics_skipped`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from wsecc.check.numerics import make_inputs, ort_generate, vocab_sizes
from wsecc.errors import WseccError
from wsecc.frontend.common import MAX_TENSOR_BYTES
from wsecc.modes.gradcheck import check_gradients as check
from wsecc.options import DEFAULT_NEW_TOKENS
from wsecc.vocab import Precision, Weights

if TYPE_CHECKING:
    import numpy as np

    from wsecc.core.stages import Fused, Job
    from wsecc.ir.core import Graph
    from wsecc.kernels import KernelGraph, Sizing
    from wsecc.modes.generate import GenerationPerf  # noqa: F401
    from wsecc.modes.gradcheck import GradCheck
    from wsecc.sim.functional import NumericsResult
    from wsecc.sim.generate import GenerationResult

NUMERICS_SKIPPED_WEIGHTLESS = (
    "skipped: the weights are graph inputs without data (--weights inputs)"
)
"""The report's `numerics_skipped` (and the summary's numerics line) under `--weights inputs`."""
VALIDATE_AUTO_MAX_PARAMS = 50_000_000
"""`validate=None` (auto) runs the numerics when the model has at most this many parameters:
the functional simulation then takes seconds, not minutes."""
GRAD_SAMPLES = 200
"""Coordinates per weight tensor the train-mode gradient check perturbs (`wsecc.modes.gradcheck`)."""


def too_large(graph: Graph | None) -> str | None:
    """ "'NAME', X GiB at this binding (over 16 GiB)" when the largest tensor `graph` (the
    unfused graph: what onnxruntime holds when the numerics run) computes is too large."""
    if graph is None:
        return None
    sizes = ((v.type.size * v.type.dtype.itemsize, v.name) for n in graph.nodes for v in n.outputs)
    size, name = max(sizes, default=(0, ""))
    if size <= MAX_TENSOR_BYTES:
        return None
    return f"{name!r}, {size / 2**30:,.1f} GiB at this binding (over {MAX_TENSOR_BYTES >> 30} GiB)"


def numerics_skipped(job: Job, graph: Graph | None) -> str | None:
    """Why numerics cannot run at all (the report's `numerics_skipped`), or None."""
    if job.options.weights == Weights.INPUTS:
        return NUMERICS_SKIPPED_WEIGHTLESS
    large = too_large(graph)
    return None if large is None else f"skipped: onnxruntime would hold {large}"


def should_validate(job: Job, graph: Graph | None, params: int, *, by_default: bool = True) -> bool:
    """Whether the check runs: asked for, or (auto) when the mode checks by default
    (`by_default`), numerics can run and the model has at most `VALIDATE_AUTO_MAX_PARAMS`
    parameters (`params`)."""
    o = job.options
    if o.weights == Weights.INPUTS:  # no values to compute with
        return False
    if o.inject_fault is not None:  # a fault is there to be caught
        return True
    if o.validate is not None:
        return o.validate
    if not by_default:
        return False
    if numerics_skipped(job, graph) is not None:
        return False
    return params <= VALIDATE_AUTO_MAX_PARAMS


def check_fit(graph: Graph | None) -> None:
    large = too_large(graph)
    if large is not None:
        raise WseccError(
            f"--validate: onnxruntime and the functional simulation would hold {large}; "
            "bind a shorter --seq or smaller --batch to check numerics, or --no-validate"
        )


def model_inputs(job: Job, graph: Graph) -> dict[str, Any]:
    """The inputs the numerics run on: `options.inputs`, else generated (seeded, padded)."""
    if job.options.inputs:
        return load_inputs(job.options.inputs, graph)
    return make_inputs(graph, seed=job.options.seed, padded=True)


def load_inputs(path: str, graph: Graph) -> dict[str, Any]:
    """Model inputs from an .npz keyed by the ONNX input names, checked against the graph."""
    from wsecc.sim.functional import load_npz

    try:
        feeds = load_npz(path)
    except (OSError, ValueError) as e:
        raise WseccError(f"--inputs {path}: cannot read an .npz ({e})") from None
    for v in graph.inputs:
        if v.name not in feeds:
            raise WseccError(
                f"--inputs {path}: no array {v.name!r} (the model's inputs: "
                f"{', '.join(i.name for i in graph.inputs)})"
            )
        if tuple(feeds[v.name].shape) != tuple(v.type.shape):
            raise WseccError(
                f"--inputs {path}: {v.name!r} has shape {tuple(feeds[v.name].shape)}, the "
                f"bound model expects {tuple(v.type.shape)} (bind with --batch/--seq)"
            )
        feeds[v.name] = feeds[v.name].astype(v.type.dtype.numpy, copy=False)
    return feeds


def check_numerics(
    fused: Fused, kg: KernelGraph, sizing: Sizing
) -> tuple[NumericsResult, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The tiled functional simulation against onnxruntime: (verdict, inputs, outputs)."""
    from wsecc.sim.functional import simulate_functional, verdict

    job, o = fused.job, fused.job.options
    check_fit(fused.loaded.graph)
    inputs = model_inputs(job, fused.loaded.graph)
    fault = o.inject_fault
    outputs = simulate_functional(fused.graph, kg, sizing, o.precision, inputs, fault=fault)
    exact = (  # the structure check: the same tiled program in fp32
        outputs
        if o.precision == Precision.FP32
        else simulate_functional(fused.graph, kg, sizing, Precision.FP32, inputs, fault=fault)
    )
    result = verdict(
        job.model_path, fused.graph, inputs, outputs, o.precision, exact, fault=fault,
        widened=fused.loaded.info.widened,
    )  # fmt: skip
    return result, inputs, outputs


def check_gradients(fused: Fused) -> GradCheck:
    """The gradient of the loss for every weight against central finite differences of
    onnxruntime on the original file (`wsecc.modes.gradcheck`), in the options' precision (fp32 or
    mixed)."""
    o = fused.job.options
    if o.precision == Precision.FP16:
        raise WseccError("the gradient check runs in fp32 or mixed; use --precision mixed")
    check_fit(fused.loaded.graph)
    inputs = model_inputs(fused.job, fused.loaded.graph)
    return check(
        fused.job.model_path, fused.graph, inputs, o.precision, seed=o.seed,
        fault=o.inject_fault, samples=GRAD_SAMPLES,
    )  # fmt: skip


def check_generation(
    fused: Fused, kg: KernelGraph, sizing: Sizing, prompt: int
) -> tuple[GenerationResult, dict[str, np.ndarray]]:
    """Greedy generation of `options.new_tokens` tokens after a prompt of random ids (seeded),
    through the tiled functional simulator on the K/V cache it keeps (`wsecc.sim.generate`),
    against onnxruntime running the same file step by step (`wsecc.check.numerics.ort_generate`):
    ids and every step's logits, the simulation fed onnxruntime's ids (teacher forcing) so that
    every step is compared; in mixed or fp16 also the same program's fp32 generation, the
    structure check. Returns the verdict and the simulator's own greedy generation
    (prompt_ids, generated_ids, logits)."""
    from wsecc.sim.generate import generation_verdict, ids_input, simulate_generation

    o = fused.job.options
    check_fit(fused.loaded.graph)
    P, N, C = prompt, o.new_tokens, kg.tokens_per_sample
    if P + N - 1 > C and o.validate is None and N == DEFAULT_NEW_TOKENS:  # auto: what fits
        N = C - P + 1
    if P + N - 1 > C:
        raise WseccError(
            f"--validate generates {N} tokens after a {P}-token prompt: that needs a context "
            f"of {P + N - 1}, the graph is bound at {C}; raise --context or lower --prompt "
            "or --new-tokens"
        )
    ids = ids_input(fused.graph)
    vocab = vocab_sizes(fused.graph)[ids.name]
    rng = np.random.default_rng(o.seed)
    prompt_ids = rng.integers(0, vocab, size=(ids.type.shape[0], P), dtype=np.int64)
    program = (fused.graph, kg, sizing)
    ref = ort_generate(fused.job.model_path, prompt_ids, N, fused.loaded.info.generation)
    # fed onnxruntime's ids, so every step's logits are comparable even where the two would
    # choose differently (teacher forcing); the free run only when they do
    fault, forced = o.inject_fault, ref[0]
    sim = simulate_generation(*program, o.precision, prompt_ids, N, fault=fault, forced=forced)
    exact = (  # the structure check: the same tiled program in fp32
        None
        if o.precision == Precision.FP32
        else simulate_generation(
            *program, Precision.FP32, prompt_ids, N, fault=fault, forced=forced
        )
    )
    result = generation_verdict(
        *sim, *ref, o.precision, exact=exact, fault=o.inject_fault, forced=True
    )
    if not result.ids_equal:
        sim = simulate_generation(*program, o.precision, prompt_ids, N, fault=o.inject_fault)
    return result, {"prompt_ids": prompt_ids, "generated_ids": sim[0], "logits": sim[1]}
