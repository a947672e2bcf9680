"""Index-remapping lowerings: each reads its operand at a computed index, nothing more.

broadcast, reshape, bitcast, transpose, slice, pad, concatenate, reverse, iota, copy,
dynamic-slice (start indices clamped into bounds, as XLA does), dynamic-update-slice
(elemental form), constant, tuple and get-tuple-element.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from llvmlite import ir

from ...ir import Instruction, Opcode, PrimitiveType
from .compose import constant_generator
from .convert import convert_value, from_bits, to_bits
from .memory import literal_table, load_element, major_to_minor, row_major, split_of
from .registry import emits
from .scalar import const, out_type
from .types import I64, elem_type


def _nsw(b, op, x, y):
    return getattr(b, op)(x, y, flags=["nsw"])


def delinearize(b: ir.IRBuilder, linear: ir.Value, sizes: Sequence[int | ir.Value], *,
                fold_unit_dims: bool = True) -> list[ir.Value]:
    """The row-major multi-index of position `linear` in an array of `sizes` (major to minor).

    Sizes are ints or values known only at run time (of linear's type). The outermost digit is
    what is left of `linear` (its size is not read). A dimension of size 1 is the constant 0
    with no arithmetic, unless `fold_unit_dims` is False (the CPU emitters: they emit urem/udiv
    by 1, which LLVM folds, and keep doing so that their IR stays unchanged).
    """
    out: list[ir.Value] = [ir.Constant(linear.type, 0)] * len(sizes)
    for k in range(len(sizes) - 1, 0, -1):
        size = sizes[k]
        if not isinstance(size, ir.Value):
            if size == 1 and fold_unit_dims:
                continue
            size = ir.Constant(linear.type, int(size))
        out[k] = b.urem(linear, size)
        linear = b.udiv(linear, size)
    if sizes:
        out[0] = linear
    return out


@emits(Opcode.BROADCAST)
def broadcast(ctx, instr, gens):
    dims = instr.dimensions
    (gen,) = gens
    return lambda index: gen([index[d] for d in dims])


@emits(Opcode.TRANSPOSE)
def transpose(ctx, instr, gens):
    perm = instr.dimensions
    (gen,) = gens

    def generate(index):
        operand = [None] * len(perm)
        for i, d in enumerate(perm):
            operand[d] = index[i]
        return gen(operand)

    return generate


@emits(Opcode.COPY)
def copy(ctx, instr, gens):
    # Generators work on logical indices: a layout-changing copy is the identity here.
    return gens[0]


# ---- reshape / bitcast ---------------------------------------------------------------------------

def reshape_groups(src: tuple[int, ...], dst: tuple[int, ...]):
    """Pairs (src dims, dst dims) of minimal runs with equal products (size-1 dims left out)."""
    src_nz = [d for d, n in enumerate(src) if n != 1]
    dst_nz = [d for d, n in enumerate(dst) if n != 1]
    groups, gs, gd = [], [], []
    ps = pd = 1
    a = c = 0
    while a < len(src_nz) or c < len(dst_nz):
        if (ps <= pd and a < len(src_nz)) or c >= len(dst_nz):
            gs.append(src_nz[a])
            ps *= src[src_nz[a]]
            a += 1
        else:
            gd.append(dst_nz[c])
            pd *= dst[dst_nz[c]]
            c += 1
        if ps == pd:
            groups.append((gs, gd))
            gs, gd, ps, pd = [], [], 1, 1
    return groups


def reshape_index(ctx, src_dims, dst_dims, dst_index: list[ir.Value]) -> list[ir.Value]:
    """Map an index of the reshaped array (dims dst_dims) to the source array's index."""
    b = ctx.builder
    out: list[ir.Value] = [ctx.i64(0)] * len(src_dims)
    if 0 in src_dims or 0 in dst_dims:
        return out  # empty arrays: never read
    for gs, gd in reshape_groups(tuple(src_dims), tuple(dst_dims)):
        if len(gs) == 1 and len(gd) == 1:
            out[gs[0]] = dst_index[gd[0]]
            continue
        linear = dst_index[gd[0]]
        for d in gd[1:]:
            # x / n, x % n joined back is x itself (see memory.linear_offset, which needs
            # both sides of an in-place reshape to reach the same expression).
            joined = split_of(linear, dst_index[d])
            if joined is not None and joined[1] == dst_dims[d]:
                linear = joined[0]
            else:
                linear = _nsw(b, "add", _nsw(b, "mul", linear, ctx.i64(dst_dims[d])),
                              dst_index[d])
        digits = delinearize(b, linear, [src_dims[d] for d in gs])
        for d, v in zip(gs, digits, strict=True):
            out[d] = v
        # The quotient past the outermost dimension is never read: this unused udiv only keeps
        # the emitted IR (and so every bundle) byte-identical to before delinearize was shared.
        b.udiv(digits[0], ctx.i64(src_dims[gs[0]]))
    return out


@emits(Opcode.RESHAPE)
def reshape(ctx, instr, gens):
    src, dst = instr.operands[0].shape.dims, instr.shape.dims
    (gen,) = gens
    return lambda index: gen(reshape_index(ctx, src, dst, index))


def bitcast_index(ctx, src_shape, dst_shape, dst_index: list[ir.Value]) -> list[ir.Value]:
    """Map an index of a bitcast (shape dst_shape) to its operand's index: a reshape of the
    physical (layout-ordered) element sequence."""
    src_order, dst_order = major_to_minor(src_shape), major_to_minor(dst_shape)
    src_phys = [src_shape.dims[d] for d in src_order]
    dst_phys = [dst_shape.dims[d] for d in dst_order]
    phys = reshape_index(ctx, src_phys, dst_phys, [dst_index[d] for d in dst_order])
    operand: list[ir.Value] = [ctx.i64(0)] * len(src_order)
    for k, d in enumerate(src_order):
        operand[d] = phys[k]
    return operand


def source_index(ctx, value: Instruction, source: Instruction,
                 index: list[ir.Value]) -> list[ir.Value]:
    """The index of `source` holding element `index` of `value`, which reaches `source`
    through reshapes and bitcasts (sharing.update_source)."""
    while value is not source:
        operand = value.operands[0]
        if value.opcode == Opcode.RESHAPE:
            index = reshape_index(ctx, operand.shape.dims, value.shape.dims, index)
        else:
            index = bitcast_index(ctx, operand.shape, value.shape, index)
        value = operand
    return index


def target_index(ctx, value: Instruction, source: Instruction,
                 index: list[ir.Value]) -> list[ir.Value]:
    """The index of `value` holding element `index` of `source` (source_index's inverse: a
    reshape or bitcast keeps the element sequence, so each maps both ways)."""
    chain = []
    while value is not source:
        chain.append(value)
        value = value.operands[0]
    for instr in reversed(chain):
        operand = instr.operands[0]
        if instr.opcode == Opcode.RESHAPE:
            index = reshape_index(ctx, instr.shape.dims, operand.shape.dims, index)
        else:
            index = bitcast_index(ctx, instr.shape, operand.shape, index)
    return index


@emits(Opcode.BITCAST)
def bitcast(ctx, instr, gens):
    """A reshape of the physical (layout-ordered) element sequence, maybe changing type."""
    src_shape, dst_shape = instr.operands[0].shape, instr.shape
    (gen,) = gens
    src_et, dst_et = elem_type(src_shape.element_type), elem_type(dst_shape.element_type)

    def generate(index):
        value = gen(bitcast_index(ctx, src_shape, dst_shape, index))
        if src_et.ptype == dst_et.ptype:
            return value
        return from_bits(ctx, dst_et, to_bits(ctx, src_et, value))

    return generate


# ---- slices and padding -----------------------------------------------------------------------------

@emits(Opcode.SLICE)
def slice_(ctx, instr, gens):
    (gen,) = gens
    b = ctx.builder
    spec = instr.attrs.slice

    def generate(index):
        operand = []
        for i, s in zip(index, spec, strict=True):
            scaled = i if s.stride == 1 else _nsw(b, "mul", i, ctx.i64(s.stride))
            operand.append(scaled if s.start == 0 else _nsw(b, "add", scaled, ctx.i64(s.start)))
        return gen(operand)

    return generate


@emits(Opcode.REVERSE)
def reverse(ctx, instr, gens):
    (gen,) = gens
    dims = set(instr.dimensions)
    sizes = instr.shape.dims
    b = ctx.builder
    return lambda index: gen([b.sub(ctx.i64(sizes[d] - 1), v) if d in dims else v
                              for d, v in enumerate(index)])


def clamp_index(ctx, v: ir.Value, lo: int, hi: int) -> ir.Value:
    v = ctx.call("llvm.smax.i64", [v, ctx.i64(lo)])
    return ctx.call("llvm.smin.i64", [v, ctx.i64(max(lo, hi))])


@emits(Opcode.PAD)
def pad(ctx, instr, gens):
    operand_gen, value_gen = gens
    cfg = instr.attrs.padding
    src = instr.operands[0].shape.dims
    b = ctx.builder
    if 0 in src:
        return lambda index: value_gen([])

    def generate(index):
        valid = ir.Constant(ir.IntType(1), 1)
        operand = []
        for i, p, n in zip(index, cfg, src, strict=True):
            t = b.sub(i, ctx.i64(p.low)) if p.low else i
            interior = p.interior
            if interior:
                m, r = ctx.value_residue(t)
                if m % (interior + 1) == 0 and r % (interior + 1):
                    return value_gen([])  # a residue class of interior padding alone
                if m % (interior + 1) == 0:
                    # A residue class of operand elements: the exact quotient, whose range
                    # is known where t's is (a loop split into regions and residues).
                    t, interior = ctx.exact_quotient(t, interior + 1), 0
            known = None if interior else ctx.value_range(t)
            if known is not None and (known[1] <= 0 or known[0] >= n):
                return value_gen([])  # a region of padding alone
            if known is not None and 0 <= known[0] and known[1] <= n:
                operand.append(t)  # a region inside the operand: no test, no clamp
                continue
            q = t
            valid = b.and_(valid, b.icmp_signed(">=", t, ctx.i64(0)))
            if interior:
                step = ctx.i64(interior + 1)
                q = b.sdiv(t, step)
                valid = b.and_(valid, b.icmp_signed("==", b.srem(t, step), ctx.i64(0)))
            valid = b.and_(valid, b.icmp_signed("<", q, ctx.i64(n)))
            clamped = clamp_index(ctx, q, 0, n - 1)
            ctx.carry_residue(q, clamped)  # the clamp matters only where `valid` is false
            operand.append(clamped)
        if isinstance(valid, ir.Constant):
            return operand_gen(operand)
        # Reading the operand at a clamped index and selecting keeps the loop branch-free.
        return b.select(valid, operand_gen(operand), value_gen([]))

    return generate


@emits(Opcode.CONCATENATE)
def concatenate(ctx, instr, gens):
    axis = instr.dimensions[0]
    sizes = [o.shape.dims[axis] for o in instr.operands]
    parts = [(g, sum(sizes[:i]), n) for i, (g, n) in enumerate(zip(gens, sizes, strict=True)) if n]
    b = ctx.builder

    def read(k, index):
        gen, start, _ = parts[k]
        shifted = list(index)
        shifted[axis] = b.sub(index[axis], ctx.i64(start)) if start else index[axis]
        return gen(shifted)

    def pick(k, last, index):
        if k == last:
            return read(k, index)
        end = parts[k][1] + parts[k][2]
        inside = b.icmp_signed("<", index[axis], ctx.i64(end))
        return ctx.select_branch(inside, lambda: read(k, index),
                                 lambda: pick(k + 1, last, index))

    def generate(index):
        # Only the parts that the index's known range (a loop split into regions) overlaps.
        first, last = 0, len(parts) - 1
        known = ctx.value_range(index[axis])
        if known is not None:
            inside = [k for k, (_, start, n) in enumerate(parts)
                      if start < known[1] and known[0] < start + n]
            if inside:
                first, last = inside[0], inside[-1]
        return pick(first, last, index)

    return generate


# ---- values from nothing -------------------------------------------------------------------------------

_S64 = elem_type(PrimitiveType.S64)


@emits(Opcode.IOTA)
def iota(ctx, instr, gens):
    axis = instr.dimensions[0]
    et = out_type(instr)
    return lambda index: convert_value(ctx, _S64, et, index[axis])


@emits(Opcode.CONSTANT)
def constant(ctx, instr, gens):
    shape = instr.shape
    literal = instr.attrs.literal
    if shape.num_elements == 1:
        return constant_generator(scalar_constant(elem_type(shape.element_type), literal))
    table = literal_table(ctx, ("literal", id(instr)), shape, literal.array)
    logical = row_major(shape)
    return lambda index: load_element(ctx, logical, table, index)


def scalar_constant(et, literal) -> ir.Constant:
    """The register-form constant of a one-element literal."""
    values = literal.python_values()
    x = values[0] if values is not None else literal.array.reshape(-1)[0]
    if et.is_float:
        return const(et, float(x))
    if et.kind == "pred":
        return const(et, bool(x))
    return const(et, int(x))


@emits(Opcode.TUPLE)
def tuple_(ctx, instr, gens):
    return lambda index: tuple(g(index) for g in gens)


@emits(Opcode.GET_TUPLE_ELEMENT)
def get_tuple_element(ctx, instr, gens):
    k = instr.attrs.tuple_index
    (gen,) = gens
    return lambda index: gen(index)[k]


# ---- dynamic slices --------------------------------------------------------------------------------------

def index_to_i64(ctx, et, v: ir.Value) -> ir.Value:
    """An index operand as i64; huge unsigned 64-bit values saturate instead of wrapping."""
    b = ctx.builder
    if et.kind == "pred":
        return b.zext(v, I64)
    if et.bits == 64:
        if et.is_signed:
            return v
        return b.select(b.icmp_signed("<", v, ctx.i64(0)), ctx.i64(2**63 - 1), v)
    return b.sext(v, I64) if et.is_signed else b.zext(v, I64)


def clamped_starts(ctx, instr, start_gens, operand_dims, sizes) -> list[ir.Value]:
    """Start indices clamped so [start, start + size) stays inside the operand."""
    out = []
    for k, (g, dim, size) in enumerate(zip(start_gens, operand_dims, sizes, strict=True)):
        et = elem_type(instr.operands[len(instr.operands) - len(start_gens) + k].shape.element_type)
        out.append(clamp_index(ctx, index_to_i64(ctx, et, g([])), 0, dim - size))
    return out


@emits(Opcode.DYNAMIC_SLICE)
def dynamic_slice(ctx, instr, gens):
    operand_gen, start_gens = gens[0], gens[1:]
    dims = instr.operands[0].shape.dims
    sizes = instr.attrs.dynamic_slice_sizes
    b = ctx.builder

    def generate(index):
        starts = clamped_starts(ctx, instr, start_gens, dims, sizes)
        return operand_gen([_nsw(b, "add", s, i) for s, i in zip(starts, index, strict=True)])

    return generate


@emits(Opcode.DYNAMIC_UPDATE_SLICE)
def dynamic_update_slice(ctx, instr, gens):
    operand_gen, update_gen, start_gens = gens[0], gens[1], gens[2:]
    dims = instr.shape.dims
    sizes = instr.operands[1].shape.dims
    b = ctx.builder
    if math.prod(sizes) == 0:
        return operand_gen

    def generate(index):
        starts = clamped_starts(ctx, instr, start_gens, dims, sizes)
        inside = ir.Constant(ir.IntType(1), 1)
        local = []
        for i, s, n in zip(index, starts, sizes, strict=True):
            rel = b.sub(i, s)
            inside = b.and_(inside, b.icmp_unsigned("<", rel, ctx.i64(n)))
            local.append(clamp_index(ctx, rel, 0, n - 1))
        return b.select(inside, update_gen(local), operand_gen(index))

    return generate

