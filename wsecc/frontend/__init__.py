"""The ONNX frontend: load (`load.py`), bind (`bind.py`), fold (`fold.py`), convert
(`convert.py`), and `import_model`, all four in order (`onnx.py`)."""
