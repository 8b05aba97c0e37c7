"""Helpers the kind definitions share."""

from __future__ import annotations

from wsecc.ir.core import Value


def rows_per_sample(v: Value, batch: int) -> int:
    """Rows (tokens) of one sample in a [batch, ..., features] value."""
    return v.type.size // max(v.type.shape[-1], 1) // batch if v.type.rank else 1
