"""Expert parallelism over systems: how many shards each mixture-of-experts block is split into.

A `moe` kernel keeps every expert resident (`wsecc.kernels.kinds.moe`). One Llama 4 Maverick
block holds 128 x 3 x 5120 x 8192 x 2 B = 32.2 GB of experts, more than one WSE-3 system's
data SRAM at sizing's fill, and a split over systems between layers cannot help it. The
`split-moe` pass (`wsecc.passes.split_moe`) cuts such a block into S shards of E/S experts,
each a moe kernel of its own, so that the pipeline over systems (`wsecc.core.partition`) can put
one block's shards on different systems.

`expert_shards` chooses S: the user's `--expert-shards N` for every block, else, when the
compile may span several systems (`--systems auto` or N > 1, infer and generate modes), for
each block the fewest S dividing E whose largest shard (shard 0, with the shared expert)
fits one system: its smallest shape's PEs (`smallest_region` of the shard) within sizing's
first fill of the usable PEs (`FILL_STEPS[0]`). A block that fits is left whole, so a model
whose blocks fit compiles as before.

A decode step over a block's shards (`decode_charges`). A token passes every shard of its
block in sequence (the running sum) and makes exactly k choices in all, at most min(k, E_s)
among shard s's experts, so the block's step is sum_s step_s(c_s) for some split c_1 + ... +
c_S = k, step_s(c) being the moe kind's step with c choices among the shard's experts on its
placed region (`wsecc.kernels.kinds.moe.moe_step`). The step charged is the worst split that
can happen (`worst_split`, a small DP: k <= 8 and S small), so the bound is one a real token
reaches and holds for every token; the B tokens of a step take the same split (exact for
B = 1, one user). Each shard kernel is charged its c_s of that split (`choices`), its decode
flops and bytes read with it, so the roofline's points are the charged step's. Beside it,
`ShardCharge.uniform_cycles` is the block's step a router choosing k of the R experts
uniformly at random gives on average (each shard's c_s hypergeometric; the block's step is a
sum over shards, so its mean is the sum of theirs): a figure for the docs, not the charge. An
unsplit block (S = 1) has one split, c = k, and is charged as before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from wsecc.core.flow import FILL_STEPS
from wsecc.core.partition import ONE_TOKEN, PartitionError, bytes_text
from wsecc.core.program import Program
from wsecc.ir.core import Graph, Node, Op
from wsecc.kernels import (
    CostContext,
    Kernel,
    KernelGraph,
    KernelKind,
    smallest_region,
)
from wsecc.kernels.kinds import lower_node
from wsecc.kernels.kinds.moe import moe_step, routed
from wsecc.modes.generate import decode_sequences
from wsecc.options import Options
from wsecc.targets import Target
from wsecc.vocab import Mode, Precision


def shard_kernel(n: Node, batch: int, shards: int) -> Kernel:
    """Shard 0 of moe node `n` split `shards` ways as a kernel: E/shards experts, the router's
    R = E, the shared expert (the largest shard)."""
    kind, params = lower_node(n, batch)
    experts = n.inputs[2].type.shape[0]
    params = {**params, "E": experts // shards, "R": experts}
    return Kernel(f"{n.name}.shard", kind, params, n.origin)


def fewest_shards(n: Node, batch: int, target: Target, precision: Precision, chunk: int) -> int:
    """The fewest shards S (dividing E) of moe node `n` whose largest fits one system (module
    doc); raises PartitionError, one line, when even one expert a shard does not."""
    experts = n.inputs[2].type.shape[0]
    room = int(FILL_STEPS[0] * target.usable_pes)
    need = 0
    for s in (d for d in range(1, experts + 1) if experts % d == 0):
        smallest = smallest_region(shard_kernel(n, batch, s), CostContext(target, precision, chunk))
        if smallest is None:
            continue
        need = smallest.area
        if need <= room:
            return s
    held = bytes_text(shard_kernel(n, batch, experts).weight_bytes(precision))
    at = f"{need:,} PEs at its smallest shape" if need else "no shape on the fabric fits it"
    raise PartitionError(
        f"moe {n.name!r}: one expert with its router ({held} in {precision}) does not fit "
        f"one {target.name} system ({at}, against {FILL_STEPS[0]:.0%} of "
        f"{target.usable_pes:,} usable PEs): use a larger target or a lower precision"
    )


def expert_shards(graph: Graph, target: Target, options: Options) -> int | dict[str, int]:
    """The shard count of each moe op of the fused `graph` (module doc): the user's
    `--expert-shards` for all, else moe node name -> the fewest that fit one system when the
    compile may span several systems, else {} (no split)."""
    if options.expert_shards is not None:
        return options.expert_shards
    if options.mode is Mode.TRAIN or options.systems == 1:
        return {}
    moes = [n for n in graph.nodes if n.op is Op.MOE]
    if not moes:
        return {}
    batch = graph.inputs[0].type.shape[0] if graph.inputs and graph.inputs[0].type.rank else 1
    chunk = ONE_TOKEN if options.mode is Mode.GENERATE else options.chunk_tokens
    memo: dict[tuple[object, ...], int] = {}
    out = {}
    for n in moes:
        key = (tuple(v.type for v in n.inputs), repr(sorted(n.attr_dict.items())))
        if key not in memo:
            memo[key] = fewest_shards(n, batch, target, options.precision, chunk)
        if memo[key] > 1:
            out[n.name] = memo[key]
    return out


def worst_split(steps: Sequence[Sequence[int]], k: int) -> tuple[int, ...]:
    """The split (c_1, ..., c_S) of k choices over S shards, shard s taking c_s < len(steps[s])
    of them, that maximises sum_s steps[s][c_s] (module doc), the one giving earlier shards
    more choices on a tie; a DP over the shards and the choices placed so far. Raises
    ValueError when the shards cannot take k choices between them."""
    best: dict[int, tuple[int, tuple[int, ...]]] = {0: (0, ())}
    for row in steps:
        nxt: dict[int, tuple[int, tuple[int, ...]]] = {}
        for placed, (cycles, split) in best.items():
            for c in range(min(len(row), k - placed + 1)):
                cand = (cycles + row[c], (*split, c))
                nxt[placed + c] = max(nxt.get(placed + c, cand), cand)
        best = nxt
    if k not in best:
        raise ValueError(f"{len(steps)} shards cannot take {k} choices between them")
    return best[k][1]


def uniform_odds(held: int, routed_: int, k: int) -> tuple[float, ...]:
    """P(c) for c = 0..min(k, held): the odds that c of a token's k choices fall among a
    shard's `held` experts of the router's `routed_` when the router picks k distinct experts
    uniformly at random (hypergeometric)."""
    total = math.comb(routed_, k)
    return tuple(
        math.comb(held, c) * math.comb(routed_ - held, k - c) / total
        for c in range(min(k, held) + 1)
    )


@dataclass(frozen=True)
class ShardCharge:
    """One moe block's shards in a decode step (module doc): their names (the whole graph's,
    in sum order), each one's experts E_s, the router's R and k, each shard's step cycles at
    c = 0..min(k, E_s) choices on its placed region, and the split charged (the worst)."""

    shards: tuple[str, ...]
    experts: tuple[int, ...]
    routed: int
    k: int
    steps: tuple[tuple[int, ...], ...]
    split: tuple[int, ...]

    @property
    def cycles(self) -> int:
        """The block's charged step: the worst split's."""
        return sum(row[c] for row, c in zip(self.steps, self.split, strict=True))

    @property
    def all_on_each_cycles(self) -> int:
        """Each shard charged all min(k, E_s) choices (the charge before the split)."""
        return sum(row[-1] for row in self.steps)

    @property
    def uniform_cycles(self) -> float:
        """The block's step a uniform router gives on average (module doc): not the charge."""
        return sum(
            sum(p * c for p, c in zip(uniform_odds(e, self.routed, self.k), row, strict=True))
            for e, row in zip(self.experts, self.steps, strict=True)
        )

    def describe(self) -> str:
        """One line: the split charged and the block's step against the other two figures."""
        split = " + ".join(
            f"{c} in {name}" for name, c in zip(self.shards, self.split, strict=True)
        )
        return (
            f"{split}: {self.cycles:,} cycles (each shard all {self.k}: "
            f"{self.all_on_each_cycles:,}; a uniform router's mean: {self.uniform_cycles:,.0f})"
        )


def charges_text(charges: Sequence[ShardCharge]) -> str:
    """One line for a compile's summary: how many split blocks a decode step charges their
    worst split, and the blocks' cycles against every shard charged all k and against a
    uniform router's mean ("" without split blocks)."""
    if not charges:
        return ""
    ks = sorted({c.k for c in charges})
    return (
        f"expert shards: {len(charges)} moe block(s) charged the worst split of a token's "
        f"k = {', '.join(map(str, ks))} choices over their shards: "
        f"{sum(c.cycles for c in charges):,} cycles a step (all k on every shard: "
        f"{sum(c.all_on_each_cycles for c in charges):,}; a uniform router's mean: "
        f"{sum(c.uniform_cycles for c in charges):,.0f})"
    )


def shard_blocks(kg: KernelGraph) -> list[list[str]]:
    """The moe blocks of `kg` split into shards, each as its shards' names in sum order: a
    shard that `accumulate`s follows the moe kernel whose running sum it reads."""
    moes = {k.name: k for k in kg.kernels if k.kind is KernelKind.MOE}
    block_of: dict[str, list[str]] = {}
    blocks: list[list[str]] = []
    for k in moes.values():
        if not k.params.get("accumulate"):
            block_of[k.name] = [k.name]
            blocks.append(block_of[k.name])
            continue
        (before,) = (f.src for f in kg.flows if f.dst == k.name and f.src in moes)
        block_of[k.name] = block_of[before]
        block_of[k.name].append(k.name)
    return [b for b in blocks if len(b) > 1]


def decode_charges(
    kg: KernelGraph, systems: Sequence[tuple[Program, KernelGraph]]
) -> tuple[tuple[ShardCharge, ...], tuple[dict[str, int], ...]]:
    """Each split block of `kg` (`shard_blocks`) charged its worst split in a decode step
    (module doc), over `systems`: system i's program placing the kernels of its part of `kg`
    (a graph with `kg`'s names) in order, under its own names when it shares another system's
    placement. Returns the blocks' charges and, for each system, its program's shard kernels'
    charged `choices` (what `wsecc.modes.generate.plan_generation` takes)."""
    where: dict[str, tuple[int, Kernel, Program]] = {}
    for i, (program, part) in enumerate(systems):
        for own, k in zip(program.kg.kernels, part.kernels, strict=True):
            where[k.name] = (i, own, program)
    charges: list[ShardCharge] = []
    choices: tuple[dict[str, int], ...] = tuple({} for _ in systems)
    for block in shard_blocks(kg):
        steps = []
        for name in block:
            _, k, program = where[name]
            r = program.placement.rects[k.name]
            ctx = CostContext(program.target, program.precision, program.chunk_tokens)
            B = decode_sequences(program.kg)
            top = min(int(k.params["k"]), int(k.params["E"]))
            steps.append(
                tuple(moe_step(k.params, r.h, r.w, ctx, B, c).latency for c in range(top + 1))
            )
        first = where[block[0]][1].params
        charge = ShardCharge(
            tuple(block),
            tuple(int(where[name][1].params["E"]) for name in block),
            routed(first),
            int(first["k"]),
            tuple(steps),
            worst_split(steps, int(first["k"])),
        )
        charges.append(charge)
        for name, c in zip(block, charge.split, strict=True):
            i, k, _ = where[name]
            choices[i][k.name] = c
    return tuple(charges), choices


__all__ = [
    "ShardCharge",
    "charges_text",
    "decode_charges",
    "expert_shards",
    "fewest_shards",
    "shard_blocks",
    "shard_kernel",
    "uniform_odds",
    "worst_split",
]
