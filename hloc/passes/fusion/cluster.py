"""Growing a fusion cluster from a root: which producers join, per producer class.

A cluster starts at a consumer and pulls in producers users-first: candidates are taken in
decreasing post-order position, so when a producer is considered every user that could join
already has, and whether fusing it moves it (all users inside) or duplicates it (some user
outside keeps the original) is final. Each member carries two facts for the cost rules:
  * reused: some element of it is read several times per output element (it sits below a
    broadcast, a reduce-window, a gather, ... or a scalar operand of an elementwise op, or two
    paths read it at different indices), so an expensive producer there would be recomputed;
  * aligned: it is read exactly at the root's output index (only same-shape elementwise ops lie
    between it and the root), the one place a dot epilogue or a reduce may be fused.
Duplication is limited to cheap producers that drag at most `duplicate` instructions along (a
copy's cheap operands are copied too, since the original keeps reading them), so a copy never
drags a whole subgraph with it: without that bound, kernels cut by the size limit would each
recompute the shared part of a wide DAG (Threefry rounds, say). Splats of scalar constants
cost nothing in that count where the copy runs once per output element and is no dot's or
convolution's epilogue (a Mandelbrot step's |z|^2 <= 4 test is copied into each update, as
XLA does, which decides where its LLVM fuses multiply-adds). Nor is a producer duplicated
when it is stored anyway and reads more than it writes (`copy_only_costs`): the copy would
keep its operands alive next to its own buffer (an LSTM cell's gates next to its state).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import field
from typing import Protocol

from ...ir import Instruction, Opcode
from ...util.record import dataclass
from .cost import (
    can_root_fusion,
    identity_indexed,
    is_expensive,
    producer_class,
    reuses_operand,
    updated_in_place,
)

Op = Opcode


class FusionLimits(Protocol):
    """The knobs of the fusion pass: FusionPass's options (their defaults live there)."""

    max_ops: int
    output: bool
    reduce_epilogue: bool
    duplicate: int
    dot_slices: int
    emissions: int


@dataclass
class Cluster:
    """A root and the producers fused into it so far."""

    root: Instruction
    limits: FusionLimits
    members: dict[int, Instruction] = field(default_factory=dict)
    reused: dict[int, bool] = field(default_factory=dict)
    aligned: dict[int, bool] = field(default_factory=dict)
    moved: dict[int, bool] = field(default_factory=dict)  # no copy stays outside the fusion
    readers: dict[int, list[tuple[Instruction, int]]] = field(default_factory=dict)
    barriers: set[int] = field(default_factory=set)  # members whose operands stay outside
    buffers: set[int] = field(default_factory=set)  # never members: read from their buffers
    contractions: int = 0
    # Index computations: for each member, the members that compute a new index from theirs
    # to read it (_OUTPUT for the kernel's own index), and how many indices each is
    # evaluated at (`emissions`: the number of copies of its code the kernel holds).
    indexers: dict[int, frozenset[int]] = field(default_factory=dict)
    emissions: dict[int, int] = field(default_factory=lambda: {_OUTPUT: 1})

    def __post_init__(self) -> None:
        self.indexers[id(self.root)] = frozenset({_OUTPUT})
        self.emissions[id(self.root)] = 1
        self.add(self.root, reused=False, aligned=True)
        if self.root.opcode == Op.REDUCE:
            self.contractions = 1  # a reduction root leaves no room for a dot epilogue

    def add(self, instr: Instruction, *, reused: bool, aligned: bool) -> None:
        self.members[id(instr)] = instr
        self.reused[id(instr)] = reused
        self.aligned[id(instr)] = aligned
        self.moved[id(instr)] = instr is self.root or self.will_move(instr)
        for i, o in enumerate(instr.operands):
            self.readers.setdefault(id(o), []).append((instr, i))

    def __contains__(self, instr: Instruction) -> bool:
        return id(instr) in self.members

    def will_move(self, instr: Instruction) -> bool:
        """Fusing `instr` removes the original: every user is a member that moves too (below a
        duplicated member, a producer is duplicated as well)."""
        return not instr.is_root and all(self.moved.get(id(u), False) for u in instr.users)

    def real_members(self) -> int:
        """Members other than the root and fused scalar constants."""
        return sum(1 for m in self.members.values()
                   if m is not self.root and m.opcode != Op.CONSTANT)


_OUTPUT = 0  # never an id()


def index_uses(c: Cluster, instr: Instruction) -> tuple[frozenset[int], int]:
    """Who computes the indices `instr` is read at, and at how many it is evaluated, were it
    to join (XLA's FusionNodeIndexingEvaluation): a reader of its shape (or a transpose)
    passes on its own indices, any other computes a new one per index it is read at."""
    users: set[int] = set()
    for u, _ in c.readers.get(id(instr), ()):
        same = u.shape.is_array and instr.shape.is_array and u.shape.dims == instr.shape.dims
        if same or u.opcode == Op.TRANSPOSE:
            users |= c.indexers[id(u)]
        else:
            users.add(id(u))
    return frozenset(users), sum(c.emissions[x] for x in users)


def access(c: Cluster, instr: Instruction) -> tuple[bool, bool]:
    """(reused, aligned) for `instr` given every read of it by members. Two reads at different
    indices count as reuse: the element would be computed twice."""
    edges = c.readers.get(id(instr), ())
    reused = any(c.reused[id(u)] or reuses_operand(u, i) for u, i in edges)
    aligned = all(c.aligned[id(u)] and identity_indexed(u) for u, _ in edges)
    if len(edges) > 1 and not aligned:
        reused = True
    return reused, aligned and not reused


# ---- producer rules, per producer class -----------------------------------------------------
Rule = Callable[[Cluster, Instruction, bool, bool], bool]


def duplication_cost(instr: Instruction, budget: int, free_splats: bool = False) -> int:
    """How many instructions a copy of `instr` brings along: itself plus its cheap fusible
    operands (copied too, since the original keeps reading them; not a reduce's epilogue,
    which stays a buffer), recursively; stops counting past `budget`. With `free_splats`,
    broadcasts of a scalar constant count for nothing (a register splat per kernel)."""
    cost = 1
    for o in dict.fromkeys(instr.operands):
        if cost > budget:
            break
        if free_splats and o.opcode == Op.BROADCAST and o.operands[0].opcode == Op.CONSTANT \
                and o.operands[0].shape.num_elements <= 1:
            continue
        cls = producer_class(o)
        if cls in ("elementwise", "index") and not is_expensive(o) and not epilogue_of_reduce(o):
            cost += duplication_cost(o, budget - cost, free_splats)
    return cost


def duplicable(instr: Instruction, budget: int, free_splats: bool = False) -> bool:
    """A cheap op whose copy (with what it drags along) costs at most `budget` instructions."""
    return budget > 0 and not is_expensive(instr) and \
        duplication_cost(instr, budget, free_splats) <= budget


def _reads_contraction(instr: Instruction) -> bool:
    return any(producer_class(o) == "contraction" for o in instr.operands)


def copy_only_costs(instr: Instruction) -> bool:
    """Duplicating `instr` into a kernel would only cost: it gets a buffer anyway (it is its
    computation's root, or a user can never read it through a fused copy: a tuple, a dot or
    convolution operand, ...) and it reads more bytes than it writes,
    so the copy reads more than the kernel reading its buffer would and keeps those operands
    alive longer. XLA's fusion likewise duplicates such a producer only when it can fuse into
    every user."""
    operand_bytes = sum(o.shape.byte_size for o in dict.fromkeys(instr.operands))
    if operand_bytes <= instr.shape.byte_size:
        return False
    return instr.is_root or any(producer_class(u) in (None, "contraction")
                                and not can_root_fusion(u) for u in instr.users)


def _elementwise(c: Cluster, producer: Instruction, reused: bool, aligned: bool) -> bool:
    if reused and is_expensive(producer):
        return False
    if c.will_move(producer):
        return True
    if epilogue_of_reduce(producer):
        return False
    # Splats of constants are free in a copy that runs once per output element (a Mandelbrot
    # step's |z|^2 <= 4 test, copied into each update as XLA does); not where a gather or a
    # window reads the copy many times, nor for a dot's or convolution's epilogue.
    free = not reused and not _reads_contraction(producer)
    return duplicable(producer, c.limits.duplicate, free_splats=free) and \
        not copy_only_costs(producer)


def epilogue_of_reduce(instr: Instruction) -> bool:
    """`instr` is a same-shape elementwise op and the one reader of a reduce (a mean's
    multiply by 1/n, say): it fuses with the reduce into one kernel, which its copies
    elsewhere would leave behind as a kernel of its own, and its value is small, so it stays
    a buffer its readers share."""
    return producer_class(instr) == "elementwise" and any(
        o.opcode == Op.REDUCE and len(o.users) == 1 and o.shape.dims == instr.shape.dims
        for o in instr.operands)


def _constant(c: Cluster, producer: Instruction, reused: bool, aligned: bool) -> bool:
    return True  # scalar constants are free to copy into every kernel


def _reduce(c: Cluster, producer: Instruction, reused: bool, aligned: bool) -> bool:
    """A reduce read only by aligned elementwise members: computed once per output element
    (XLA CPU's reduce + epilogue loop fusion)."""
    if not c.limits.reduce_epilogue or c.contractions:
        return False
    return aligned and c.will_move(producer)


def _contraction(c: Cluster, producer: Instruction, reused: bool, aligned: bool) -> bool:
    """Output fusion: a dot/convolution under an epilogue of same-shape elementwise ops."""
    if not c.limits.output or c.contractions or any(
            m.opcode == Op.REDUCE for m in c.members.values()):
        return False
    return aligned and c.will_move(producer)


RULES: dict[str, Rule] = {
    "elementwise": _elementwise,
    "index": _elementwise,
    "constant": _constant,
    "reduce": _reduce,
    "contraction": _contraction,
}


def dot_macs(dot: Instruction) -> int:
    """Multiply-adds of a dot: every output element sums over the contracting dims."""
    lhs = dot.operands[0].shape
    return dot.shape.num_elements * math.prod(
        lhs.dims[d] for d in dot.attrs.dot_dnums.lhs_contracting_dimensions)


def reads_slices(dot: Instruction, limit: int) -> bool:
    """`dot` may read a dynamic-slice operand inside its kernel: a dot of at most `limit`
    multiply-adds (the `dot-slices` option: small dots, whose launch costs more than a
    library call saves, as in a loop step's matrix-vector products)."""
    return limit > 0 and dot.opcode == Op.DOT and dot_macs(dot) <= limit


def _slice_into_dot(c: Cluster, producer: Instruction, edges) -> list[Instruction] | None:
    """A dynamic-slice (maybe under reshapes) read by nothing but a small dot of the cluster
    joins it (XLA feeds such a slice to its GEMM by address): the kernel computes the
    slice's start and reads the sliced operand directly, so a loop step launches one kernel
    fewer. The chain from `producer` down to the slice, or None."""
    if not all(reads_slices(u, c.limits.dot_slices) for u, _ in edges):
        return None
    chain = [producer]
    while chain[-1].opcode in (Op.RESHAPE, Op.BITCAST):
        chain.append(chain[-1].operands[0])
    if chain[-1].opcode != Op.DYNAMIC_SLICE or \
            any(x.parent is not c.root.parent or len(x.users) != 1 for x in chain):
        return None
    return chain if c.will_move(producer) else None


# ---- growth -----------------------------------------------------------------------------------
def _try_add(c: Cluster, producer: Instruction) -> bool:
    cls = producer_class(producer)
    if cls is None or producer.parent is not c.root.parent or producer in c or \
            id(producer) in c.buffers:
        return False
    edges = c.readers.get(id(producer), ())
    if any(updated_in_place(u, i) for u, i in edges):
        return False
    if c.root.opcode == Op.DYNAMIC_UPDATE_SLICE and c.root.operands[0] in producer.operands:
        # It reads the buffer the root updates: fused, that buffer would have two readers in
        # the kernel and could no longer be updated in place (a whole copy per update).
        return False
    if edges and all(u.opcode == Op.DOT for u, _ in edges):
        # Pushed by a dot that may read slices (its other operands stay buffers).
        chain = _slice_into_dot(c, producer, edges)
        if chain is None:
            return False
        # The chain's reshapes and the slice follow by the usual rules (each has one user, a
        # member); the sliced array stays a buffer, the slice's start computation may join.
        c.indexers[id(producer)], c.emissions[id(producer)] = index_uses(c, producer)
        c.add(producer, reused=True, aligned=False)
        c.buffers.add(id(chain[-1].operands[0]))
        return True
    indexers, emissions = index_uses(c, producer)
    if emissions > c.limits.emissions and producer.opcode not in (Op.BROADCAST, Op.CONSTANT):
        return False  # its code would be emitted that many times: it is stored once instead
    reused, aligned = access(c, producer)
    if not RULES[cls](c, producer, reused, aligned):
        return False
    c.indexers[id(producer)], c.emissions[id(producer)] = indexers, emissions
    c.add(producer, reused=reused, aligned=aligned)
    if cls == "contraction":
        c.contractions += 1
        if not reads_slices(producer, c.limits.dot_slices):
            c.barriers.add(id(producer))  # a dot's operands stay buffers (the Gemm reads them)
    return True


def grow(root: Instruction, limits: FusionLimits, position: dict[int, int]) -> Cluster:
    """The cluster of producers to fuse into `root` (possibly just the root). `position` is
    the post-order index of every instruction of the computation."""
    c = Cluster(root, limits)
    heap: list[tuple[int, int, Instruction]] = []
    queued: set[int] = set()

    def push_operands(user: Instruction) -> None:
        for o in user.operands:
            if id(o) not in queued and id(o) in position:
                queued.add(id(o))
                heapq.heappush(heap, (-position[id(o)], id(o), o))

    push_operands(root)
    while heap and len(c.members) < limits.max_ops:
        _, _, producer = heapq.heappop(heap)
        if _try_add(c, producer) and id(producer) not in c.barriers:
            push_operands(producer)
    return c
