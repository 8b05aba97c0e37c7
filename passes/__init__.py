"""Graph passes, one per file, registered explicitly (name -> function). Installed as
`wsecc.passes`. Every pass is a pure `(Graph, PassContext) -> Graph`."""

from __future__ import annotations

from collections.abc import Callable

from wsecc.passes.canonicalize import canonicalize
from wsecc.passes.context import PassContext
from wsecc.passes.fuse_attention import fuse_attention
from wsecc.passes.fuse_embedding import fuse_embedding
from wsecc.passes.fuse_gelu import fuse_gelu
from wsecc.passes.fuse_layernorm import fuse_layernorm
from wsecc.passes.fuse_linear import fuse_linear
from wsecc.passes.fuse_lm_head import fuse_lm_head

from wsecc.ir.core import Graph

Pass = Callable[[Graph, PassContext], Graph]

PASSES: dict[str, Pass] = {
    "canonicalize": canonicalize,
    "fuse-embedding": fuse_embedding,
    "fuse-linear": fuse_linear,
    "fuse-layernorm": fuse_layernorm,
    "fuse-gelu": fuse_gelu,
    "fuse-attention": fuse_attention,
    "fuse-lm-head": fuse_lm_head,
}

# The default pipeline, in order: fusions assume canonical forms; GELU folds into Linear.
DEFAULT_PIPELINE: tuple[str, ...] = tuple(PASSES)

__all__ = ["DEFAULT_PIPELINE", "PASSES", "Pass", "PassContext"]
