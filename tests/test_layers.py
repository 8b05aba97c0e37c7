"""One layer finder (`wsecc.core.layers.find_layers`) for placement, training and generation: the
tiled placer's layers (`wsecc.place.tiled.repeating_layers`) and training's streamed units
(`wsecc.modes.train.streamed_units`, which generation's per-layer decode figures use too) are the same
kernels on GPT-2-, BERT-, RoBERTa/MPNet- and Llama-shaped graphs."""

from __future__ import annotations

from functools import cache

import pytest
from conftest import SAMPLES

from wsecc.core import chain
from wsecc.core.layers import find_layers
from wsecc.core.stages import Sized
from wsecc.modes.train import streamed_units
from wsecc.place.from_kernels import placement_problem
from wsecc.place.tiled import repeating_layers


@cache
def _sized(sample: str) -> Sized:
    return chain.size(chain.fuse(chain.load(chain.job(SAMPLES / f"{sample}.onnx", seq=16))))


@pytest.mark.parametrize(
    ("sample", "lead"),
    [
        ("gpt2_legacy_op17", ["embedding"]),
        ("bert_legacy_op17", ["embedding"]),
        # RoBERTa-style position ids computed from the token ids: fuse-embedding takes them in
        # (`padded_positions`); kernels left before the embedding: test_layers_by_structure
        ("mpnet_legacy_op17", ["embedding"]),
        ("llama_dynamo", ["embedding"]),
    ],
)
def test_placement_and_training_find_the_same_layers(sample: str, lead: list[str]) -> None:
    sized = _sized(sample)
    kg = sized.kernel_graph
    units = dict(streamed_units(kg))
    trained = [[k.name for k in ks] for name, ks in units.items() if name.startswith("L")]
    problem = placement_problem(kg, sized.sizing, sized.job.target, "mixed")
    before, placed, _ = repeating_layers(problem)
    assert len(trained) == 2  # the samples have two layers
    assert [sorted(layer) for layer in placed] == [sorted(layer) for layer in trained]
    assert [k.name for k in units["input"]] == lead
    assert sorted(before) == sorted(lead)
    for layer in trained:  # one attention per layer, none before or after
        assert sum(kg.kernel(n).kind == "attention" for n in layer) == 1


def test_layers_by_structure() -> None:
    """By hand: the layers start after the last embedding before the first attention, and
    each starts as far before its attention as the first does."""
    gpt2 = ["embedding"] + ["layernorm", "linear", "attention", "linear"] * 3 + ["lm_head"]
    found = find_layers(gpt2)
    assert found is not None and found.spans == [(1, 5), (5, 9), (9, 13)]
    roberta = ["generic", "elementwise", "embedding", "layernorm", "attention", "linear"]
    roberta += ["layernorm", "attention", "linear", "generic"]
    found = find_layers(roberta)
    assert found is not None and found.start == 3 and found.spans == [(3, 6), (6, 9)]
    one = ["embedding", "layernorm", "attention", "linear", "lm_head", "lm_head"]
    found = find_layers(one)
    assert found is not None and found.spans == [(1, 4)]
    assert find_layers(["embedding", "linear", "linear"]) is None
