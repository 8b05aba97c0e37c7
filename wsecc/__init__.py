"""wsecc: compile ONNX transformer graphs for a wafer-scale dataflow engine."""

__version__ = "0.1.0"
