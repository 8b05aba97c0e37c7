"""wsecc's version, in a module of its own: the package, the CLI, the report and the viewer read
it here, and `pyproject.toml` takes it from here too."""

__version__ = "0.1.0"
