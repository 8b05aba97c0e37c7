"""The table of kernel kinds, `KernelKind` -> `KindDef`, as the kernel IR and the cost
machinery look kinds up.

The kinds' definitions (`wsecc.kernels.kinds`) are built on the IR and the cost machinery, and
a kernel's defaults and costs are its kind's: the IR cannot import the definitions without an
import cycle. So this module is a leaf both import, and the definitions `register` themselves
here when `wsecc.kernels` (which every use of a kernel imports first) imports them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wsecc.kernels.ir import KernelKind
    from wsecc.kernels.kind import KindDef

_KINDS: dict[KernelKind, KindDef] = {}
KINDS: Mapping[KernelKind, KindDef] = MappingProxyType(_KINDS)
"""Every registered kind's definition (read-only; `register` fills it)."""


def register(defs: Iterable[KindDef]) -> None:
    """Add kind definitions to `KINDS`; a kind defined twice is an error."""
    for d in defs:
        if d.kind in _KINDS and _KINDS[d.kind] is not d:
            raise ValueError(f"kind {d.kind} is defined twice")
        _KINDS[d.kind] = d
