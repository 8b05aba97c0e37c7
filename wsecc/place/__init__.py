"""Placement: kernels' rectangles on the usable fabric.

`problem` holds the solver-free schemas and validators; placers (greedy, CP-SAT, manual) are
strategies behind one interface. Only `wsecc.place.cpsat` imports ortools.
"""
