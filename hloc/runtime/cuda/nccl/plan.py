"""Which Collective thunks run as NCCL calls, and as which calls: the mapping from HLO
collectives to NCCL, shared by the real library and its emulation.

`plan_collective(instr, thunk, ctx)` gives a `NcclPlan` (NCCL calls on slices of device
memory, plus device-local zero fills and copies) or `HostStaged(reason)`: the thunk keeps the
host-staged path (download, MPI communicator, upload; hloc.runtime.cuda.collectives).
A decision never depends on which device plans it (only on the instruction, its shapes and
layouts, the slices and the run options), so every rank decides alike and a collective is
never NCCL on one rank and MPI on another.

What maps (each rule below is one lowering function):
- all-reduce (and all-reduce-start): one ncclAllReduce per array leaf, on the group's
  communicator, when the reducer is add / multiply / min / max on a type NCCL reduces
  (s8 u8 s32 u32 s64 u64; f16 bf16 f32 f64 for add and multiply; pred as u8, add/or = max,
  multiply/and = min). Host-staged: float min/max (NCCL's fminf/fmaxf drop a NaN, XLA's
  maximum propagates it), and/or on integers, s16/u16/f8/complex, other reducers, and every
  reduction under --deterministic-collectives (the ordered reduction is host-staged);
- all-gather: one ncclAllGather per leaf (bytes) when the gathered dimension is the
  major-most non-trivial one of the result's layout and the operand's bytes are laid out as
  one rank chunk (so NCCL's contiguous concatenation is the HLO result);
- reduce-scatter: one ncclReduceScatter per leaf under the all-reduce rules, when the
  scattered dimension is the major-most non-trivial one of the operand's layout;
- all-to-all: grouped ncclSend/ncclRecv on the group's communicator: the tuple form (operand
  j to member j, result j from member j), the array form when the split dimension is the
  major-most non-trivial one (piece j is then a contiguous byte range); a device's own
  piece is a device copy;
- collective-permute: grouped ncclSend/ncclRecv on the communicator of every rank (peer =
  MPI rank); a device no source targets is zero-filled, a self pair is a device copy;
- collective-broadcast: ncclBroadcast from the group's first member (its root).
Everything else is host-staged: async -start/-done pairs other than all-reduce-start
(all-gather-start, collective-permute-start), async-start wrappers, the in-place permute,
tiled layouts, mismatched layouts, groups of unequal sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ....buffers.assignment import Slice
from ....collectives.groups import (
    Device,
    DeviceGrid,
    instruction_participants,
    permute_domain,
)
from ....collectives.reducers import reducer_of
from ....errors import UnsupportedError
from ....ir import Instruction, Shape
from ....ir.opcodes import Opcode as O  # noqa: N817 - the opcode tables' usual alias
from ....util.record import dataclass
from ...layouts import memory_order
from .api import DataType, RedOp

WORLD: tuple[int, ...] = ()  # the communicator key of every rank (point-to-point)

_INTS = {"s8": DataType.INT8, "u8": DataType.UINT8, "s32": DataType.INT32,
         "u32": DataType.UINT32, "s64": DataType.INT64, "u64": DataType.UINT64}
_FLOATS = {"f16": DataType.FLOAT16, "bf16": DataType.BFLOAT16, "f32": DataType.FLOAT32,
           "f64": DataType.FLOAT64}
_ARITH = {"add": RedOp.SUM, "multiply": RedOp.PROD}
_ORDER = {"minimum": RedOp.MIN, "maximum": RedOp.MAX}
# pred values are 0 or 1: XLA's add and or are max, multiply and and are min.
_PRED = {"add": RedOp.MAX, "or": RedOp.MAX, "maximum": RedOp.MAX,
         "multiply": RedOp.MIN, "and": RedOp.MIN, "minimum": RedOp.MIN}


# ---- the plan --------------------------------------------------------------------------------

@dataclass(frozen=True)
class AllReduce:
    send: Slice
    recv: Slice
    count: int
    dtype: DataType
    op: RedOp

    def issue(self, api, comm, at: Callable[[Slice], int], stream) -> None:
        api.all_reduce(at(self.send), at(self.recv), self.count, self.dtype, self.op, comm,
                       stream)


@dataclass(frozen=True)
class AllGather:
    send: Slice
    recv: Slice
    count: int  # per rank
    dtype: DataType

    def issue(self, api, comm, at, stream) -> None:
        api.all_gather(at(self.send), at(self.recv), self.count, self.dtype, comm, stream)


@dataclass(frozen=True)
class ReduceScatter:
    send: Slice
    recv: Slice
    count: int  # per rank (the result's elements)
    dtype: DataType
    op: RedOp

    def issue(self, api, comm, at, stream) -> None:
        api.reduce_scatter(at(self.send), at(self.recv), self.count, self.dtype, self.op, comm,
                           stream)


@dataclass(frozen=True)
class Broadcast:
    send: Slice
    recv: Slice
    count: int
    dtype: DataType
    root: int

    def issue(self, api, comm, at, stream) -> None:
        api.broadcast(at(self.send), at(self.recv), self.count, self.dtype, self.root, comm,
                      stream)


@dataclass(frozen=True)
class Send:
    buffer: Slice
    count: int
    dtype: DataType
    peer: int

    def issue(self, api, comm, at, stream) -> None:
        api.send(at(self.buffer), self.count, self.dtype, self.peer, comm, stream)


@dataclass(frozen=True)
class Recv:
    buffer: Slice
    count: int
    dtype: DataType
    peer: int

    def issue(self, api, comm, at, stream) -> None:
        api.recv(at(self.buffer), self.count, self.dtype, self.peer, comm, stream)


Call = AllReduce | AllGather | ReduceScatter | Broadcast | Send | Recv


@dataclass(frozen=True)
class NcclPlan:
    """A Collective thunk as NCCL calls on communicator `comm` (a group of global device ids
    in participant order, or WORLD), after device-local `zeros` and `copies`."""

    thunk: str
    opcode: str
    comm: tuple[int, ...]
    calls: tuple[Call, ...]
    zeros: tuple[Slice, ...] = ()
    copies: tuple[tuple[Slice, Slice], ...] = ()

    @property
    def grouped(self) -> bool:
        """Issued between ncclGroupStart/End: several calls, or point-to-point ones."""
        return len(self.calls) > 1 or any(isinstance(c, Send | Recv) for c in self.calls)


@dataclass(frozen=True)
class HostStaged:
    """A Collective thunk left to the host-staged path, and why."""

    thunk: str
    opcode: str
    reason: str


@dataclass(frozen=True)
class PlanContext:
    """What a plan depends on besides the thunk: the grid, the planning device, its peers'
    MPI ranks (global device id -> rank) and --deterministic-collectives."""

    grid: DeviceGrid
    device: Device
    rank_of: Mapping[int, int]
    deterministic: bool = False


@dataclass(frozen=True)
class Leaves:
    """A Collective thunk's array leaves: (shape, slice) of every operand and result leaf."""

    thunk: str
    ins: tuple[tuple[Shape, Slice], ...]
    outs: tuple[tuple[Shape, Slice], ...]


Lowering = Callable[[Instruction, Leaves, PlanContext], NcclPlan | str]
LOWERINGS: dict[O, Lowering] = {}


def lowers(*opcodes: O) -> Callable[[Lowering], Lowering]:
    def register(fn: Lowering) -> Lowering:
        for op in opcodes:
            LOWERINGS[op] = fn
        return fn
    return register


def plan_collective(instr: Instruction, thunk, ctx: PlanContext) -> NcclPlan | HostStaged:
    """The NCCL plan of Collective `thunk` (of `instr`) on ctx.device, or why there is none."""
    def staged(reason: str) -> HostStaged:
        return HostStaged(thunk.name, instr.opcode.value, reason)

    lower = LOWERINGS.get(instr.opcode)
    if lower is None:
        return staged(f"{instr.opcode.value} has no NCCL mapping")
    ins = [leaf for op in instr.operands for _, leaf in op.shape.leaves() if leaf.is_array]
    outs = [leaf for _, leaf in instr.shape.leaves() if leaf.is_array]
    if len(ins) != len(thunk.operands) or len(outs) != len(thunk.outputs):
        return staged("the thunk's slices do not match the instruction's leaves")
    if _overlap(thunk.operands, thunk.outputs):
        return staged("operands and results share bytes")
    leaves = Leaves(thunk.name, tuple(zip(ins, thunk.operands, strict=True)),
                    tuple(zip(outs, thunk.outputs, strict=True)))
    if any(s.size != shape.byte_size for shape, s in leaves.ins + leaves.outs):
        return staged("a slice is not its array's dense bytes")
    try:
        planned = lower(instr, leaves, ctx)
    except UnsupportedError as e:  # a tiled layout
        return staged(str(e))
    return staged(planned) if isinstance(planned, str) else planned


# ---- facts the rules use ---------------------------------------------------------------------

def _overlap(a, b) -> bool:
    return any(x.allocation == y.allocation and x.offset < y.offset + y.size
               and y.offset < x.offset + x.size and x.size and y.size for x in a for y in b)


def _order(shape: Shape, keep: int | None = None) -> list[int]:
    """Dimensions major to minor, those of size 1 left out (they do not move bytes)."""
    return [d for d in memory_order(shape) if shape.dims[d] != 1 or d == keep]


def same_bytes(a: Shape, b: Shape) -> bool:
    """`a` and `b` hold the same elements at the same byte offsets."""
    return a.element_type == b.element_type and a.dims == b.dims and _order(a) == _order(b)


def chunked(whole: Shape, part: Shape, dim: int) -> bool:
    """`whole` is parts concatenated along `dim`, each a contiguous byte range of `whole`
    laid out as `part`: `dim` is whole's major-most non-trivial dimension."""
    order = _order(whole, keep=dim)
    if whole.element_type != part.element_type or not order or order[0] != dim:
        return False
    return _order(part) == [d for d in order if d != dim or part.dims[dim] != 1]


def reduction(kind: str | None, shape: Shape) -> tuple[DataType, RedOp] | str:
    """The NCCL datatype and operator computing XLA's reduction `kind` on `shape`'s type."""
    name = shape.dtype.name
    if kind is None:
        return "the reducer is not a standard add/multiply/min/max"
    if name == "pred":
        return (DataType.UINT8, _PRED[kind]) if kind in _PRED else f"pred {kind}"
    if name in _INTS:
        op = {**_ARITH, **_ORDER}.get(kind)  # (RedOp.SUM is 0: no `or` chains here)
        return (_INTS[name], op) if op is not None else f"NCCL has no {kind} on {name}"
    if name in _FLOATS:
        if kind in _ORDER:
            return (f"{name} {kind}: NCCL's fminf/fmaxf drop a NaN where XLA propagates it")
        return (_FLOATS[name], _ARITH[kind]) if kind in _ARITH else f"{name} {kind}"
    return f"NCCL does not reduce {name}"


def _group(instr: Instruction, ctx: PlanContext) -> tuple[tuple[int, ...], int] | str:
    """(this device's group as global ids, its position), or why groups are unusable."""
    sizes = {len(instruction_participants(instr, ctx.grid, d)[0]) for d in ctx.grid.devices()}
    if len(sizes) != 1:
        return f"replica groups of unequal sizes {sorted(sizes)}"
    devices, position = instruction_participants(instr, ctx.grid, ctx.device)
    return tuple(ctx.grid.device_id(d) for d in devices), position


def _part(s: Slice, index: int, size: int) -> Slice:
    return Slice(s.allocation, s.offset + index * size, size)


# ---- the rules -------------------------------------------------------------------------------

def _reductions(instr: Instruction, leaves: Leaves, ctx: PlanContext):
    """(datatype, operator) of every leaf of a reducing collective, or why not."""
    if ctx.deterministic:
        return "--deterministic-collectives: the ordered reduction is host-staged"
    kind = reducer_of(instr.called[0]).kind
    found = [reduction(kind, shape) for shape, _ in leaves.ins]
    return next((f for f in found if isinstance(f, str)), found)


@lowers(O.ALL_REDUCE, O.ALL_REDUCE_START)
def _all_reduce(instr: Instruction, leaves: Leaves, ctx: PlanContext) -> NcclPlan | str:
    types = _reductions(instr, leaves, ctx)
    if isinstance(types, str):
        return types
    group = _group(instr, ctx)
    if isinstance(group, str):
        return group
    if not all(same_bytes(a, b) for (a, _), (b, _) in zip(leaves.ins, leaves.outs, strict=True)):
        return "an operand and its result are laid out differently"
    calls = tuple(AllReduce(s, o, shape.num_elements, dt, op) for ((shape, s), (_, o), (dt, op))
                  in zip(leaves.ins, leaves.outs, types, strict=True) if shape.num_elements)
    return NcclPlan(leaves.thunk, instr.opcode.value, group[0], calls)


@lowers(O.ALL_GATHER)
def _all_gather(instr: Instruction, leaves: Leaves, ctx: PlanContext) -> NcclPlan | str:
    group = _group(instr, ctx)
    if isinstance(group, str):
        return group
    (dim,) = instr.attrs.dimensions
    for (op, s), (res, o) in zip(leaves.ins, leaves.outs, strict=True):
        if not chunked(res, op, dim) or o.size != len(group[0]) * s.size:
            return (f"all-gather dimension {dim} is not the major-most one of {res} "
                    f"(rank chunks are not contiguous)")
    calls = tuple(AllGather(s, o, s.size, DataType.UINT8)
                  for (_, s), (_, o) in zip(leaves.ins, leaves.outs, strict=True) if s.size)
    return NcclPlan(leaves.thunk, instr.opcode.value, group[0], calls)


@lowers(O.REDUCE_SCATTER)
def _reduce_scatter(instr: Instruction, leaves: Leaves, ctx: PlanContext) -> NcclPlan | str:
    types = _reductions(instr, leaves, ctx)
    if isinstance(types, str):
        return types
    group = _group(instr, ctx)
    if isinstance(group, str):
        return group
    (dim,) = instr.attrs.dimensions
    for (op, s), (res, o) in zip(leaves.ins, leaves.outs, strict=True):
        if not chunked(op, res, dim) or s.size != len(group[0]) * o.size:
            return (f"reduce-scatter dimension {dim} is not the major-most one of {op} "
                    f"(rank blocks are not contiguous)")
    calls = tuple(ReduceScatter(s, o, res.num_elements, dt, red)
                  for ((_, s), (res, o), (dt, red)) in zip(leaves.ins, leaves.outs, types,
                                                           strict=True) if o.size)
    return NcclPlan(leaves.thunk, instr.opcode.value, group[0], calls)


@lowers(O.COLLECTIVE_BROADCAST)
def _broadcast(instr: Instruction, leaves: Leaves, ctx: PlanContext) -> NcclPlan | str:
    group = _group(instr, ctx)
    if isinstance(group, str):
        return group
    if not all(same_bytes(a, b) for (a, _), (b, _) in zip(leaves.ins, leaves.outs, strict=True)):
        return "an operand and its result are laid out differently"
    calls = tuple(Broadcast(s, o, s.size, DataType.UINT8, 0)
                  for (_, s), (_, o) in zip(leaves.ins, leaves.outs, strict=True) if s.size)
    return NcclPlan(leaves.thunk, instr.opcode.value, group[0], calls)


@lowers(O.ALL_TO_ALL)
def _all_to_all(instr: Instruction, leaves: Leaves, ctx: PlanContext) -> NcclPlan | str:
    group = _group(instr, ctx)
    if isinstance(group, str):
        return group
    ids, position = group
    n = len(ids)
    if instr.attrs.dimensions and len(leaves.ins) == 1 and not instr.shape.is_tuple:
        pieces = _array_pieces(instr, leaves, n)
    else:
        pieces = _tuple_pieces(leaves, n)
    if isinstance(pieces, str):
        return pieces
    calls: list[Call] = []
    copies = []
    for j, (send, recv) in enumerate(pieces):
        if j == position:
            copies.append((send, recv))
        elif send.size:
            calls += [Send(send, send.size, DataType.UINT8, j),
                      Recv(recv, recv.size, DataType.UINT8, j)]
    return NcclPlan(leaves.thunk, instr.opcode.value, ids, tuple(calls),
                    copies=tuple(c for c in copies if c[0].size))


def _array_pieces(instr: Instruction, leaves: Leaves, n: int):
    """(send piece j, receive piece j) of the array form, or why they are not contiguous."""
    (dim,) = instr.attrs.dimensions
    (op, s), (res, o) = leaves.ins[0], leaves.outs[0]
    if op.dims[dim] % n or not same_bytes(op, res):
        return "all-to-all operand and result differ"
    piece = op.with_dims(tuple(d // n if i == dim else d for i, d in enumerate(op.dims)))
    if not chunked(op, piece, dim):
        return (f"all-to-all dimension {dim} is not the major-most one of {op} "
                f"(pieces are not contiguous)")
    size = s.size // n
    return [(_part(s, j, size), _part(o, j, size)) for j in range(n)]


def _tuple_pieces(leaves: Leaves, n: int):
    if len(leaves.ins) != n or len(leaves.outs) != n:
        return f"all-to-all with {len(leaves.ins)} operands in groups of {n}"
    if not all(same_bytes(a, b) for (a, _), (b, _) in zip(leaves.ins, leaves.outs, strict=True)):
        return "an operand and its result are laid out differently"
    return [(s, o) for (_, s), (_, o) in zip(leaves.ins, leaves.outs, strict=True)]


@lowers(O.COLLECTIVE_PERMUTE)
def _permute(instr: Instruction, leaves: Leaves, ctx: PlanContext) -> NcclPlan | str:
    if len(leaves.ins) != 1 or len(leaves.outs) != 1:
        return "the in-place collective-permute"
    pairs = tuple(instr.attrs.source_target_pairs or ())
    domain = permute_domain(instr, ctx.grid, ctx.device)
    targets = [t for _, t in pairs]
    if len(set(targets)) != len(targets) or any(
            not (0 <= i < len(domain)) for pair in pairs for i in pair):
        return "source_target_pairs repeat a target or leave the domain"
    (op, s), (res, o) = leaves.ins[0], leaves.outs[0]
    if not same_bytes(op, res):
        return "the operand and the result are laid out differently"
    ids = [ctx.grid.device_id(d) for d in domain]
    me = domain.index(ctx.device)
    calls: list[Call] = []
    for src, dst in pairs:
        if src == dst or not s.size:
            continue
        if dst == me:
            calls.append(Recv(o, o.size, DataType.UINT8, ctx.rank_of[ids[src]]))
        elif src == me:
            calls.append(Send(s, s.size, DataType.UINT8, ctx.rank_of[ids[dst]]))
    zeros = () if me in targets or not o.size else (o,)
    copies = ((s, o),) if (me, me) in pairs and s.size else ()
    return NcclPlan(leaves.thunk, instr.opcode.value, WORLD, tuple(calls), zeros, copies)
