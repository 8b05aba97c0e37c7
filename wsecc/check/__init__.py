"""Checks against onnxruntime: the verdicts a compile reports (`checks`), numerics by level
(`numerics`) and the search for the first diverging node (`bisection`).
"""
