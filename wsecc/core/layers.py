"""The transformer layers of a kernel sequence, found by structure: the one finder placement
(`wsecc.place.tiled`), training (`wsecc.modes.train.streamed_units`) and generation
(`wsecc.modes.generate`) use, so that they split a model into the same layers.

Exporters name nodes every which way, so layers are found from the kernels' kinds alone: each
layer holds one attention kernel; the first layer starts after the last embedding before the
first attention (RoBERTa and MPNet compute their position ids from the token ids in kernels of
their own, before the embedding; GPT-2, BERT and Llama start right after theirs), and layer i
starts as far before its attention as the first does; the last layer is as long as the one
before it (a single layer runs up to the LM head).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

ATTENTION, EMBEDDING, LM_HEAD = "attention", "embedding", "lm_head"


@dataclass(frozen=True)
class Layers:
    """Layer i is positions `bounds[i]:bounds[i + 1]` of the sequence; positions before
    `bounds[0]` lead (embeddings, position ids), positions from `bounds[-1]` follow (final norm,
    head)."""

    bounds: tuple[int, ...]

    @property
    def start(self) -> int:
        return self.bounds[0]

    @property
    def end(self) -> int:
        return self.bounds[-1]

    @property
    def spans(self) -> list[tuple[int, int]]:
        return list(zip(self.bounds, self.bounds[1:], strict=False))

    def __len__(self) -> int:
        return len(self.bounds) - 1


def find_layers(kinds: Sequence[str]) -> Layers | None:
    """The layers of a sequence of kernel kinds (in topological or flow order; `KernelKind`
    values or their strings), or None when it holds no attention kernel (module doc)."""
    kinds = [str(k) for k in kinds]
    att = [i for i, k in enumerate(kinds) if k == ATTENTION]
    if not att:
        return None
    lead = max((i + 1 for i, k in enumerate(kinds[: att[0]]) if k == EMBEDDING), default=0)
    starts = [a - (att[0] - lead) for a in att]
    if len(starts) > 1:
        end = min(len(kinds), starts[-1] + starts[-1] - starts[-2])
    else:  # one layer: it runs up to the head
        end = len(kinds)
        while end > att[0] + 1 and kinds[end - 1] == LM_HEAD:
            end -= 1
    return Layers((*starts, max(end, att[-1] + 1)))
