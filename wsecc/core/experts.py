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
"""

from __future__ import annotations

from wsecc.core.flow import FILL_STEPS
from wsecc.core.partition import ONE_TOKEN, PartitionError, bytes_text
from wsecc.ir.core import Graph, Node, Op
from wsecc.kernels import CostContext, Kernel, smallest_region
from wsecc.kernels.kinds import lower_node
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


__all__ = ["expert_shards", "fewest_shards", "shard_kernel"]
