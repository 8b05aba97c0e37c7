"""Simulation of a compiled program: performance (analytical L0, event-level L1), SRAM map,
roofline.

    from wsecc.sim.perf import simulate_l0          # PerfResult: throughput, latency, bounds
    from wsecc.sim.events import simulate_l1        # EventResult: contention, buffers, trace
    from wsecc.sim.sram import sram_map             # SramMap: bytes per PE, checked
    from wsecc.sim.roofline import roofline          # Roofline: the target's roofs

Every simulator reads the compile products (KernelGraph, Sizing, Placement, Routing) and the
Target; none mutates them. Their pictures are drawn by `wsecc.view.png`.
"""
