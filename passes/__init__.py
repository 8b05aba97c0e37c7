"""Graph passes, one per file, each declaring its `Pass` (`wsecc.passdef`: name, function, the IR
level it requires and produces); registered here by name. Installed as `wsecc.passes`.

`DEFAULT_PIPELINE` is the compile's fusion stage (Graph -> fused Graph); `LOWERING` runs
lowering as a pass (fused Graph -> KernelGraph)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from wsecc.passes import (
    canonicalize,
    fuse_attention,
    fuse_embedding,
    fuse_gelu,
    fuse_layernorm,
    fuse_linear,
    fuse_lm_head,
    fuse_moe,
    fuse_swiglu,
    lower,
    split_moe,
)

from wsecc.passdef import Pass, PassContext

PASSES: Mapping[str, Pass] = MappingProxyType(
    {
        m.PASS.name: m.PASS
        for m in (
            canonicalize,
            fuse_embedding,
            fuse_linear,
            fuse_moe,
            fuse_swiglu,
            fuse_layernorm,
            fuse_gelu,
            fuse_attention,
            fuse_lm_head,
            split_moe,
            lower,
        )
    }
)

# The default pipeline, in order: fusions assume canonical forms; GELU folds into Linear.
DEFAULT_PIPELINE: tuple[str, ...] = (
    "canonicalize",
    "fuse-embedding",
    "fuse-linear",
    "fuse-moe",
    "fuse-swiglu",
    "fuse-layernorm",
    "fuse-gelu",
    "fuse-attention",
    "fuse-lm-head",
)
LOWERING: tuple[str, ...] = ("lower",)
EXPERT_SHARDS: tuple[str, ...] = ("split-moe",)
"""Run on the fused graph when a moe op's experts are split over shards
(`wsecc.core.experts`): not part of the default pipeline, which does not know the target."""

__all__ = ["DEFAULT_PIPELINE", "EXPERT_SHARDS", "LOWERING", "PASSES", "Pass", "PassContext"]
