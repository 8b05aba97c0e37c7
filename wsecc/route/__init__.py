"""Routing: lanes of every flow as paths through the routers, one color per lane.

`problem` holds the solver-free schemas, lane geometry and `validate_routing`; `router` holds
the PathFinder router and the DSatur coloring.
"""
