"""The explicit context every pass receives (no module-level state)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PassContext:
    """Options for the passes, and where a pass records why its rules did not fire."""

    options: dict[str, object] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def note(self, pass_name: str, text: str) -> None:
        self.notes.append(f"{pass_name}: {text}")
