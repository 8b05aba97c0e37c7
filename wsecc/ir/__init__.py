"""The graph-level IR of record: typed values, nodes with an `Op`, graphs in topological order."""

from wsecc.ir.core import (
    FUSED_OPS,
    DType,
    Graph,
    IRError,
    Node,
    Op,
    TensorType,
    Value,
)
from wsecc.ir.verify import VerificationError, verify

__all__ = [
    "FUSED_OPS",
    "DType",
    "Graph",
    "IRError",
    "Node",
    "Op",
    "TensorType",
    "Value",
    "VerificationError",
    "verify",
]
