"""The ISPD 2020 kernel cost model: `convperf`, `dblockperf`, `cblockperf`.

For a conv with formal arguments (H, W, R, S, C, K, T, U) and execution parameters (h', w', c', k'):

    height = h'·w'·(c'+1)
    width  = 3·k'
    time   = ceil( ceil(H/h')·ceil(W/w')·ceil(C/c')·ceil(K/k')·R·S / (T·U) )
    memory = (C/c')·(K/k')·R·S + ((W+S−1)/w')·((H+R−1)/h')·(K/k')        (real division)

A dblock/cblock is a group of convs sharing h' and w' (each conv i has its own c_i', k_i'):

    height = max_i height_i     width = Σ_i width_i     time = max_i time_i     memory = max_i memory_i

    dblock(H, W, F):  conv(H, W, 1, 1, F,   F/4, 1), conv(H, W, 3, 3, F/4, F/4, 1),
                      conv(H, W, 1, 1, F/4, F,   1)
    cblock(H, W, F):  conv(H, W, 1, 1, F/2, F/4, 1), conv(H, W, 3, 3, F/4, F/4, 2),
                      conv(H/2, W/2, 1, 1, F/4, F, 1), conv(H, W, 1, 1, F/2, F, 2)

Our conventions for what the handout leaves open (docs/ispd2020.md §Conventions):
- *stride*: the handout divides by T·T; a kgraph conv carries T and U and we divide by T·U (all
  benchmarks have T = U, so this is the same number).
- *fractional time*: a stride-2 time that is not an integer is rounded **up** (a tile cannot finish
  a fraction of a step), so `time` is always an integer and so is Δt.
- *memory*: real (exact rational) division as printed, kept as a `Fraction`; compared with memlimit
  exactly.
- *parameter bounds*: positive integers with h' ≤ H, w' ≤ W (the kernel's formal H, W), and for
  every internal conv c_i' ≤ C_i, k_i' ≤ K_i. Without them real-division memory would reward
  absurdly oversized parameters.
- *halving*: cblock's conv3 works on ceil(H/2) × ceil(W/2) (all benchmarks have even H, W); F must
  be divisible by 4.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from wsecc.ispd2020.kgraph import KNode


@dataclass(frozen=True)
class Conv:
    """Formal arguments of one convolution: input H×W×C, K filters of R×S, strides T (rows), U."""

    H: int
    W: int
    R: int
    S: int
    C: int
    K: int
    T: int = 1
    U: int = 1


@dataclass(frozen=True)
class Perf:
    """What a kernel's execution parameters cost: its rectangle, its time and per-tile memory."""

    height: int
    width: int
    time: int
    memory: Fraction

    @property
    def area(self) -> int:
        return self.height * self.width


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def conv_time(conv: Conv, h: int, w: int, c: int, k: int) -> int:
    """ceil(ceil(H/h')·ceil(W/w')·ceil(C/c')·ceil(K/k')·R·S / (T·U))."""
    work = _cdiv(conv.H, h) * _cdiv(conv.W, w) * _cdiv(conv.C, c) * _cdiv(conv.K, k)
    return _cdiv(work * conv.R * conv.S, conv.T * conv.U)


def conv_memory(conv: Conv, h: int, w: int, c: int, k: int) -> Fraction:
    """(C/c')·(K/k')·R·S + ((W+S−1)/w')·((H+R−1)/h')·(K/k'), exact."""
    weights = Fraction(conv.C * conv.K * conv.R * conv.S, c * k)
    activations = Fraction((conv.W + conv.S - 1) * (conv.H + conv.R - 1) * conv.K, w * h * k)
    return weights + activations


def convperf(conv: Conv, h: int, w: int, c: int, k: int) -> Perf:
    """The handout's convperf(H,W,R,S,C,K,T; h',w',c',k'): (h'·w'·(c'+1), 3·k', time, memory)."""
    return Perf(
        height=h * w * (c + 1),
        width=3 * k,
        time=conv_time(conv, h, w, c, k),
        memory=conv_memory(conv, h, w, c, k),
    )


def dblock_convs(H: int, W: int, F: int) -> tuple[Conv, ...]:
    """The three convs of a ResNet identity block (bottleneck F → F/4 → F/4 → F)."""
    _check_divisible(F)
    q = F // 4
    return (Conv(H, W, 1, 1, F, q), Conv(H, W, 3, 3, q, q), Conv(H, W, 1, 1, q, F))


def cblock_convs(H: int, W: int, F: int) -> tuple[Conv, ...]:
    """The four convs of a ResNet projection block: F/2 channels in, stride 2, F channels out."""
    _check_divisible(F)
    q, half = F // 4, F // 2
    return (
        Conv(H, W, 1, 1, half, q),
        Conv(H, W, 3, 3, q, q, 2, 2),
        Conv(_cdiv(H, 2), _cdiv(W, 2), 1, 1, q, F),
        Conv(H, W, 1, 1, half, F, 2, 2),
    )


def _check_divisible(F: int) -> None:
    if F % 4:
        raise ValueError(f"block width F={F} is not divisible by 4")


def blockperf(
    convs: tuple[Conv, ...], h: int, w: int, cs: tuple[int, ...], ks: tuple[int, ...]
) -> Perf:
    """Aggregate convs sharing h', w': max height, Σ width, max time, max memory."""
    if not (len(convs) == len(cs) == len(ks)):
        raise ValueError(f"{len(convs)} convs need {len(convs)} c' and k' values")
    parts = [convperf(conv, h, w, c, k) for conv, c, k in zip(convs, cs, ks, strict=True)]
    return Perf(
        height=max(p.height for p in parts),
        width=sum(p.width for p in parts),
        time=max(p.time for p in parts),
        memory=max(p.memory for p in parts),
    )


def dblockperf(
    H: int, W: int, F: int, h: int, w: int, cs: tuple[int, ...], ks: tuple[int, ...]
) -> Perf:
    """dblockperf(H,W,F; h',w',c1',c2',c3',k1',k2',k3')."""
    return blockperf(dblock_convs(H, W, F), h, w, cs, ks)


def cblockperf(
    H: int, W: int, F: int, h: int, w: int, cs: tuple[int, ...], ks: tuple[int, ...]
) -> Perf:
    """cblockperf(H,W,F; h',w',c1'..c4',k1'..k4')."""
    return blockperf(cblock_convs(H, W, F), h, w, cs, ks)


@dataclass(frozen=True)
class ExecParams:
    """Execution parameters of a kernel: shared h', w' and one (c_i', k_i') per internal conv."""

    h: int
    w: int
    c: tuple[int, ...]
    k: tuple[int, ...]


@dataclass(frozen=True)
class KernelSpec:
    """A kernel to size: its kind, formal arguments, and the convs its cost is made of.

    `formal` is what the solution line repeats before the parameters: (H, W, C, K, R, S, T, U)
    for a conv, (H, W, F) for a block.
    """

    name: str
    kind: str
    formal: tuple[int, ...]
    convs: tuple[Conv, ...]

    @property
    def H(self) -> int:
        return self.formal[0]

    @property
    def W(self) -> int:
        return self.formal[1]

    def perf(self, p: ExecParams) -> Perf:
        return blockperf(self.convs, p.h, p.w, p.c, p.k)

    def param_errors(self, p: ExecParams) -> list[str]:
        """Why `p` is not a legal parameter choice (positive integers within our bounds)."""
        n = len(self.convs)
        if len(p.c) != n or len(p.k) != n:
            return [f"{self.name}: {self.kind} needs {n} c' and {n} k' values"]
        errors = []
        bounds = [("h'", p.h, self.H), ("w'", p.w, self.W)]
        for i, (conv, c, k) in enumerate(zip(self.convs, p.c, p.k, strict=True), start=1):
            tag = "" if n == 1 else str(i)
            bounds += [(f"c{tag}'", c, conv.C), (f"k{tag}'", k, conv.K)]
        for label, value, upper in bounds:
            if not isinstance(value, int) or not 1 <= value <= upper:
                errors.append(f"{self.name}: {label}={value} is not an integer in [1, {upper}]")
        return errors

    def solution_args(self, p: ExecParams) -> tuple[int, ...]:
        """Numbers inside `kind( ... )` of a solution line: conv `H W C K R S T U h w c k`,
        blocks `H W F h w c1.. k1..`."""
        return self.formal + (p.h, p.w) + p.c + p.k

    def params_from_args(self, args: tuple[int, ...]) -> ExecParams:
        """Inverse of `solution_args`; raises ValueError if the formal part does not match."""
        n, f = len(self.convs), len(self.formal)
        if len(args) != f + 2 + 2 * n:
            raise ValueError(f"{self.kind} takes {f + 2 + 2 * n} numbers, got {len(args)}")
        if args[:f] != self.formal:
            raise ValueError(
                f"formal arguments {' '.join(map(str, args[:f]))} do not match the kgraph's "
                f"{' '.join(map(str, self.formal))}"
            )
        rest = args[f:]
        return ExecParams(rest[0], rest[1], tuple(rest[2 : 2 + n]), tuple(rest[2 + n :]))


def kernel_spec(node: KNode) -> KernelSpec:
    """The cost model of a kgraph kernel node."""
    a = node.arg
    if node.kind == "conv":
        conv = Conv(a("H"), a("W"), a("R"), a("S"), a("C"), a("K"), a("T"), a("U"))
        formal = (conv.H, conv.W, conv.C, conv.K, conv.R, conv.S, conv.T, conv.U)
        return KernelSpec(node.name, "conv", formal, (conv,))
    builders = {"dblock": dblock_convs, "cblock": cblock_convs}
    if node.kind not in builders:
        raise ValueError(f"{node.kind}[{node.index}] is not a kernel")
    H, W, F = a("h"), a("w"), a("f")
    return KernelSpec(node.name, node.kind, (H, W, F), builders[node.kind](H, W, F))
