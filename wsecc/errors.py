"""User-facing errors: the CLI prints their one-line message and exits with code 2.

Every error a user can cause derives from `WseccError`: the frontend's, the pass manager's
(`PassError`), kernel graphs' (`KernelGraphError`), sizing's (`SizingError`), targets'
(`TargetError`), placement's and routing's (`PlacementError`, `RoutingError`), the
simulators' (`SimulationError` and its kinds), the ISPD 2020 readers' (`KGraphError`,
`SolutionError`). Those that were `ValueError`s stay `ValueError`s too."""


class WseccError(Exception):
    """An error in the user's input or request (not a bug in wsecc)."""


class FrontendError(WseccError):
    """The ONNX file cannot be read, bound or converted."""


class SimulationError(WseccError, ValueError):
    """The products do not describe one program (a kernel not placed, a flow not routed, inputs
    that do not fit it), or a simulation cannot finish; the message names what is wrong."""


def one_line(text: str) -> str:
    """`text` as one printable line: line breaks become spaces (a verifier message quotes the
    IR on a second line) and other control characters are escaped, since names in a hostile
    file can hold newlines or terminal escape sequences."""
    flat = " ".join(part.strip() for part in text.splitlines() if part.strip())
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in flat)
