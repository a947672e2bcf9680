"""sort (variadic, comparator computation) and topk.

Comparators of the lexicographic form JAX emits (`lt(k0)`, or `or(lt(k0), and(eq(k0), ...))`,
where each key may be an elementwise expression of the operand, such as JAX's NaN/zero
canonicalization or XLA's total-order bit trick) are recognized; the key expressions are evaluated
once on whole operands and sorted with np.lexsort on order-preserving keys. Any other comparator
runs through a stable bottom-up merge sort whose merges are computed by vectorized binary
searches: each comparator call evaluates one search step for every element at once, so a sort of
n elements takes about log2(n)^2 / 2 calls regardless of the number of rows.
"""

from __future__ import annotations

import numpy as np

from ...ir import Computation, Instruction, Opcode
from ...ir.opcodes import ELEMENTWISE
from ...util.record import dataclass
from . import registry
from .compare import total_order_key
from .reduce import apply_scalar, is_liftable
from .registry import impl


@dataclass(frozen=True)
class SortKey:
    """One key of a lexicographic comparator: `expr` computes the key from comparator parameter
    `param` (the parameter itself in the plain case), compared in `compare_type` order."""

    operand: int
    descending: bool
    compare_type: str
    expr: Instruction
    param: int


# Ops a key expression may use: they act elementwise, so the key of a whole operand array is the
# expression evaluated once on that array.
_KEY_OPS = (ELEMENTWISE - {Opcode.MAP, Opcode.STOCHASTIC_CONVERT}) | {Opcode.CONSTANT, Opcode.BITCAST}


def _default_type(instr: Instruction) -> str:
    d = instr.operands[0].shape.dtype
    if d.is_float:
        return "FLOAT"
    return "UNSIGNED" if d.is_unsigned_int or d.kind == "pred" else "SIGNED"


def _params_read(instr: Instruction) -> set[int]:
    found, stack, seen = set(), [instr], set()
    while stack:
        i = stack.pop()
        if id(i) in seen:
            continue
        seen.add(id(i))
        if i.opcode == Opcode.PARAMETER:
            found.add(i.attrs.parameter_number)
        stack.extend(i.operands)
    return found


def _mirrors(a: Instruction, b: Instruction, pa: int, pb: int, depth: int = 0) -> bool:
    """True if b computes what a computes, with parameter pa replaced by parameter pb."""
    if a is b:
        return pa == pb or not _params_read(a)
    if a.opcode == Opcode.PARAMETER or b.opcode == Opcode.PARAMETER:
        return (a.opcode == b.opcode and a.attrs.parameter_number == pa
                and b.attrs.parameter_number == pb)
    if (a.opcode != b.opcode or a.opcode not in _KEY_OPS or a.attrs != b.attrs or a.shape != b.shape
            or len(a.operands) != len(b.operands) or depth > 64):
        return False
    return all(_mirrors(x, y, pa, pb, depth + 1) for x, y in zip(a.operands, b.operands, strict=True))


def _key_pair(instr: Instruction) -> tuple[int, bool, Instruction, int] | None:
    """(operand, swapped, lhs-side expression, its parameter) if `instr` compares one key
    expression applied to the lhs and the rhs element of one operand."""
    a, b = instr.operands
    ra, rb = _params_read(a), _params_read(b)
    if len(ra) != 1 or len(rb) != 1:
        return None
    (pa,), (pb,) = ra, rb
    if pa // 2 != pb // 2 or pa == pb or not _mirrors(a, b, pa, pb):
        return None
    return pa // 2, pa % 2 == 1, a, pa


def _strict_key(instr: Instruction) -> SortKey | None:
    if instr.opcode != Opcode.COMPARE or instr.attrs.comparison_direction not in ("LT", "GT"):
        return None
    pair = _key_pair(instr)
    if pair is None:
        return None
    operand, swapped, expr, param = pair
    descending = swapped if instr.attrs.comparison_direction == "LT" else not swapped
    return SortKey(operand, descending, instr.attrs.comparison_type or _default_type(instr), expr, param)


def _is_equal(instr: Instruction, key: SortKey) -> bool:
    if instr.opcode != Opcode.COMPARE or instr.attrs.comparison_direction != "EQ":
        return False
    pair = _key_pair(instr)
    if pair is None or pair[0] != key.operand:
        return False
    ctype = instr.attrs.comparison_type or _default_type(instr)
    return ctype == key.compare_type and _mirrors(pair[2], key.expr, pair[3], key.param)


def _lexicographic(expr: Instruction, depth: int = 0) -> list[SortKey] | None:
    key = _strict_key(expr)
    if key is not None:
        return [key]
    if expr.opcode != Opcode.OR or len(expr.operands) != 2 or depth > 16:
        return None
    for first, second in (expr.operands, expr.operands[::-1]):
        key = _strict_key(first)
        if key is None or second.opcode != Opcode.AND:
            continue
        for eq, rest in (second.operands, second.operands[::-1]):
            if _is_equal(eq, key):
                tail = _lexicographic(rest, depth + 1)
                if tail is not None:
                    return [key] + tail
    return None


def comparator_keys(comp: Computation) -> list[SortKey] | None:
    """The lexicographic keys a comparator computation implements, or None."""
    return _lexicographic(comp.root) if comp.root is not None else None


def key_values(ctx, key: SortKey, operand: np.ndarray) -> np.ndarray:
    """The key expression evaluated on a whole operand array."""
    values: dict[int, np.ndarray] = {}
    for instr in _post_order(key.expr):
        if instr.opcode == Opcode.PARAMETER:
            values[id(instr)] = operand
            continue
        with np.errstate(all="ignore"):
            out = registry.lookup(instr)(ctx, instr, [values[id(o)] for o in instr.operands])
        values[id(instr)] = np.asarray(out)
    return np.broadcast_to(values[id(key.expr)], operand.shape)


def _post_order(root: Instruction) -> list[Instruction]:
    order, seen = [], set()

    def visit(i):
        if id(i) in seen:
            return
        seen.add(id(i))
        for o in i.operands:
            visit(o)
        order.append(i)

    visit(root)
    return order


# ---- keys ------------------------------------------------------------------------------------

def _key_array(x: np.ndarray, key: SortKey) -> np.ndarray | None:
    kind = x.dtype.kind
    is_float = kind == "f" or (kind == "V" and "float" in x.dtype.name)
    if is_float and key.compare_type == "TOTALORDER":
        k = total_order_key(x)
        return ~k if key.descending else k
    if is_float:
        k = x.astype(np.float64) + 0.0  # FLOAT compares -0 == +0; NaN makes it no order at all
        if np.isnan(k).any():
            return None
        return -k if key.descending else k
    if kind in "biu" and key.compare_type in ("SIGNED", "UNSIGNED"):
        if (kind == "i") != (key.compare_type == "SIGNED"):
            return None
        k = x.astype(np.uint64 if kind == "u" else np.int64)
        return ~k if key.descending else k
    return None


def lexsort_perm(ctx, operands: list[np.ndarray], keys: list[SortKey]) -> np.ndarray | None:
    """A stable sorting permutation along the last axis, or None if the keys do not apply."""
    arrays = []
    for key in reversed(keys):
        k = _key_array(key_values(ctx, key, operands[key.operand]), key)
        if k is None:
            return None
        arrays.append(k)
    return np.lexsort(arrays, axis=-1)


# ---- general merge sort ----------------------------------------------------------------------

def merge_sort_perm(ctx, comp: Computation, operands: list[np.ndarray]) -> np.ndarray:
    """Stable sorting permutation of (R, n) operands along axis 1 under a comparator."""
    rows, n = operands[0].shape
    r = np.arange(rows)[:, None]
    liftable = is_liftable(comp)

    def less(ia, ib):
        args = []
        for op in operands:
            args += [op[r, ia], op[r, ib]]
        return apply_scalar(ctx, comp, args, liftable)[0].astype(bool)

    perm = np.broadcast_to(np.arange(n), (rows, n)).copy()
    pos = np.broadcast_to(np.arange(n), (rows, n))
    width = 1
    while width < n:
        perm = _merge_level(perm, pos, width, n, less, r)
        width *= 2
    return perm


def _merge_level(perm, pos, width, n, less, r):
    # Merge adjacent runs of `width`: an element's new place is its offset in its own run plus
    # the number of partner-run elements that go before it (found by binary search).
    run = pos // width
    left = run % 2 == 0
    partner = np.where(left, run + 1, run - 1) * width
    partner_len = np.clip(n - partner, 0, width)
    lo = np.zeros_like(pos)
    hi = partner_len.copy()
    for _ in range(int(width).bit_length()):
        active = lo < hi
        if not active.any():
            break
        mid = (lo + hi) // 2
        cand = perm[r, np.clip(partner + mid, 0, n - 1)]
        c = less(np.where(left, cand, perm), np.where(left, perm, cand))
        goes_before = np.where(left, c, ~c)
        lo = np.where(active & goes_before, mid + 1, lo)
        hi = np.where(active & ~goes_before, mid, hi)
    new_pos = (run // 2) * 2 * width + (pos - run * width) + lo
    if not (np.sort(new_pos, axis=1) == pos).all():
        # The comparator is no strict weak order (a float compare meeting NaN): the counts
        # disagree and would leave slots unwritten. Merge step by step instead, which yields
        # a permutation whatever the comparator says (XLA leaves the order unspecified).
        return _merge_level_stepwise(perm, width, n, less, r)
    out = np.empty_like(perm)
    out[r, new_pos] = perm
    return out


def _merge_level_stepwise(perm, width, n, less, r):
    """_merge_level by taking one element at a time from the front of either run (the right
    one only when it goes strictly before the left one), all rows at once."""
    rows = perm.shape[0]
    out = np.empty_like(perm)
    for start in range(0, n, 2 * width):
        mid, end = min(start + width, n), min(start + 2 * width, n)
        li, ri = np.full(rows, start), np.full(rows, mid)
        for k in range(start, end):
            lv = perm[r[:, 0], np.minimum(li, n - 1)]
            rv = perm[r[:, 0], np.minimum(ri, n - 1)]
            before = less(rv[:, None], lv[:, None])[:, 0]
            right = (ri < end) & ((li >= mid) | before)
            out[:, k] = np.where(right, rv, lv)
            ri, li = ri + right, li + ~right
    return out


def sort_perm(ctx, comp: Computation, operands: list[np.ndarray]) -> np.ndarray:
    """Stable permutation sorting (R, n) operands along axis 1."""
    keys = comparator_keys(comp)
    if keys is not None:
        perm = lexsort_perm(ctx, operands, keys)
        if perm is not None:
            return perm
    return merge_sort_perm(ctx, comp, operands)


@impl(Opcode.SORT)
def sort(ctx, instr, ops):
    axis = instr.dimensions[0]
    shape = ops[0].shape
    moved = [np.moveaxis(o, axis, -1) for o in ops]
    n = shape[axis] if ops[0].ndim else 1
    if n <= 1 or ops[0].size == 0:  # nothing to reorder (also: empty rows cannot reshape)
        results = [np.array(o) for o in ops]
        return tuple(results) if instr.shape.is_tuple else results[0]
    flat = [m.reshape(-1, n) for m in moved]
    perm = sort_perm(ctx, instr.called[0], flat)
    flat = [np.take_along_axis(f, perm, axis=1) for f in flat]
    results = [np.moveaxis(f.reshape(m.shape), -1, axis) for f, m in zip(flat, moved, strict=False)]
    return tuple(results) if instr.shape.is_tuple else results[0]


def top_k_perm(x: np.ndarray, k: int, largest: bool) -> np.ndarray:
    """Indices of the top k along the last axis in XLA's total order; ties keep index order."""
    is_float = x.dtype.kind == "f" or (x.dtype.kind == "V" and "float" in x.dtype.name)
    bits = total_order_key(x) if is_float else x.astype(np.uint64 if x.dtype.kind == "u" else np.int64)
    key = ~bits if largest else bits
    return np.argsort(key, axis=-1, kind="stable")[..., :k]


@impl(Opcode.TOPK)
def topk(ctx, instr, ops):
    (x,) = ops
    k = instr.attrs.k
    largest = instr.attrs.largest if instr.attrs.largest is not None else True
    idx = top_k_perm(x, k, largest)
    values = np.take_along_axis(x, idx, axis=-1)
    return values, idx.astype(instr.shape.tuple_shapes[1].np_dtype)
