"""The ISPD 2020 wafer-scale placement contest (Cerebras CS-1, 633×633) as wsecc's yardstick.

`kgraph` reads benchmarks; `perf` turns them into `wsecc.kernels` kernel graphs (the contest's
cost model is the conv/dblock/cblock kinds of `wsecc.kernels.conv`); `size` (frontiers, and the
area bound by the shared sizing) and `floorplan` choose kernel shapes and a packing; `solve`
searches Δt and refines with the shared placer (`wsecc.place`); `score` reads, writes and scores
contest solutions; `cli` is `wsecc ispd2020`. Conventions for the contest's open points:
docs/ispd2020.md.
"""
