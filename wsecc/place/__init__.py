"""Placement: kernels' rectangles on the usable fabric.

`problem` holds the solver-free schemas and validators; placers (greedy, CP-SAT, manual) are
strategies behind one interface, `place(...)` in `wsecc.place.api`. Only `wsecc.place.cpsat`
imports ortools.
"""
