"""What limits a compile's throughput, read from its report: the one statement the summary
table, the viewer's header and the placement PNG all make.

When the performance simulation ran, its figures (`performance`): the bottleneck over every
stage with its kind (a kernel, a routed flow or host I/O), and the on-wafer limit (the slowest
kernel or flow, host I/O left out) with what it achieves against sizing's balanced pipeline
(`sizing.samples_per_s`). When only a placement exists (a folder written before simulating),
sizing's slowest kernel, said to be sizing's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KERNEL, FLOW, HOST = "kernel", "flow", "host"  # as wsecc.sim.perf names stage kinds
STEP = "step"  # train mode: the bottleneck is a term of the step (wsecc.modes.train)
DECODE = (
    "decode"  # generate mode: the bottleneck is a phase of the decode step (wsecc.modes.generate)
)


def si(x: float, unit: str) -> str:
    """`x` with a k/M/G prefix and three significant digits: `si(885416, "samples/s")` is
    "885 ksamples/s"."""
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def stage_kind(name: str) -> str:
    """The kind of a pipeline stage from its name, for reports written before they carried
    `on_wafer_bottleneck_kind`: host I/O is `host-in`/`host-out`, a flow is `src->dst`."""
    if name in ("host-in", "host-out"):
        return HOST
    return FLOW if "->" in name else KERNEL


@dataclass(frozen=True)
class Limits:
    """The bottleneck and the on-wafer limit of one compile (module doc)."""

    bottleneck: str
    bottleneck_kind: str  # KERNEL, FLOW, HOST; STEP in train mode, DECODE in generate mode
    simulated: bool  # False: sizing's slowest kernel, nothing simulated
    balanced_samples_per_s: float | None = None  # sizing's balanced pipeline
    on_wafer: str = ""  # the slowest kernel or flow, host I/O left out; "" when not simulated
    on_wafer_kind: str = ""  # KERNEL or FLOW
    on_wafer_samples_per_s: float | None = None  # what the placed, routed program sustains
    copies: int = (
        1  # data-parallel copies (`wsecc.core.replicas`): the figures above are one copy's
    )

    @classmethod
    def from_report(cls, report: Mapping[str, Any]) -> Limits | None:
        """From a report's `performance` and `sizing` objects (docs/report-schema.md); None
        when it has neither."""
        perf, sizing = report.get("performance"), report.get("sizing")
        balanced = sizing.get("samples_per_s") if sizing else None
        if perf:
            on_wafer = str(perf.get("on_wafer_bottleneck", ""))
            return cls(
                bottleneck=str(perf["bottleneck"]),
                bottleneck_kind=str(perf.get("bottleneck_kind") or stage_kind(perf["bottleneck"])),
                simulated=True,
                balanced_samples_per_s=balanced,
                on_wafer=on_wafer,
                on_wafer_kind=str(perf.get("on_wafer_bottleneck_kind") or stage_kind(on_wafer))
                if on_wafer
                else "",
                on_wafer_samples_per_s=perf.get("on_wafer_samples_per_s"),
                copies=int((report.get("replicas") or {}).get("k", 1)),
            )
        if sizing:
            return cls(str(sizing["bottleneck"]), KERNEL, False, balanced)
        return None

    @property
    def highlight(self) -> tuple[str, str] | None:
        """(name, kind) of what a picture of the fabric should pick out: the on-wafer limit,
        else sizing's slowest kernel when nothing was simulated; None for host I/O or a
        training step (nothing on the fabric to point at)."""
        if self.on_wafer:
            return self.on_wafer, self.on_wafer_kind
        if self.bottleneck_kind in (KERNEL, FLOW):
            return self.bottleneck, self.bottleneck_kind
        return None

    @property
    def highlight_label(self) -> str:
        """What the highlight is, for a legend: "on-wafer limit" or "sizing's bottleneck"."""
        if self.on_wafer:
            return "on-wafer limit"
        return "bottleneck" if self.simulated else "sizing's bottleneck"

    def bottleneck_text(self) -> str:
        """`L0.attention (kernel)`; `L0.layer_norm (sizing's slowest kernel; not simulated)`."""
        if not self.simulated:
            return f"{self.bottleneck} (sizing's slowest kernel; not simulated)"
        if self.bottleneck_kind == STEP:
            return f"{self.bottleneck} (the training step's largest term)"
        if self.bottleneck_kind == DECODE:
            return f"{self.bottleneck} (the decode step's largest phase)"
        return f"{self.bottleneck} ({self.bottleneck_kind})"

    def on_wafer_text(self) -> str:
        """`L0.attention (kernel): 885 ksamples/s achieved (L0) of 1.61 Msamples/s balanced (55.0%)`;
        "" when there is no on-wafer figure."""
        if not self.on_wafer:
            return ""
        text = f"{self.on_wafer} ({self.on_wafer_kind})"
        achieved, balanced = self.on_wafer_samples_per_s, self.balanced_samples_per_s
        if achieved is None:
            return text
        text += f": {si(achieved, 'samples/s')} achieved (L0)"
        if balanced:
            text += f" of {si(balanced, 'samples/s')} balanced ({achieved / balanced:.1%})"
        return text + (", per copy" if self.copies > 1 else "")

    def lines(self) -> list[str]:
        """The statement as short lines: `bottleneck ...`, then `on-wafer limit ...`."""
        out = [f"bottleneck {self.bottleneck_text()}"]
        if self.on_wafer:
            out.append(f"on-wafer limit {self.on_wafer_text()}")
        elif not self.simulated and self.balanced_samples_per_s:
            out.append(f"balanced {si(self.balanced_samples_per_s, 'samples/s')}")
        return out
