"""Wafer targets: one TOML file per target, every number with its source, and the `Target` type.

from wsecc.targets import load_target
t = load_target("wse2")          # or a path to your own .toml
t.usable_pes, t.peak_flops_per_s(Precision.MIXED), t.color_budget  # wsecc.vocab.Precision
"""

from wsecc.targets.target import (
    PRECISIONS,
    Target,
    TargetError,
    check_precision,
    list_targets,
    load_target,
    parse_target,
    target_source,
)

DEFAULT_TARGET = "wse2"

__all__ = [
    "DEFAULT_TARGET",
    "PRECISIONS",
    "Target",
    "TargetError",
    "check_precision",
    "list_targets",
    "load_target",
    "target_source",
    "parse_target",
]
