"""User-facing errors: the CLI prints their one-line message and exits with code 2."""


class WseccError(Exception):
    """An error in the user's input or request (not a bug in wsecc)."""


class FrontendError(WseccError):
    """The ONNX file cannot be read, bound or converted."""
