"""Small helpers shared by the shape rules: checks that raise `fail(...)` and fast shape makers."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .. import dtypes
from ..computation import Computation
from ..dtypes import PrimitiveType
from ..instruction import Instruction
from ..opcodes import Opcode
from ..shape import Shape
from .registry import fail

P = PrimitiveType
PRED_SCALAR = Shape(P.PRED)
S32_SCALAR = Shape(P.S32)
U32_SCALAR = Shape(P.U32)
TOKEN = Shape(P.TOKEN)


def arr(element_type: PrimitiveType, dims: Iterable[int]) -> Shape:
    """A layout-less array shape (rules return shapes without layouts)."""
    return Shape(element_type, tuple(dims))


def tup(shapes: Iterable[Shape]) -> Shape:
    return Shape(P.TUPLE, (), None, tuple(shapes))


def same(a: Shape, b: Shape) -> bool:
    """Equal ignoring layouts and dynamic-dimension flags (XLA's ShapeUtil::Compatible)."""
    if a.element_type != b.element_type or a.dims != b.dims:
        return False
    if a.element_type != P.TUPLE:
        return True
    ta, tb = a.tuple_shapes, b.tuple_shapes
    return len(ta) == len(tb) and all(same(x, y) for x, y in zip(ta, tb, strict=True))


def same_dims(a: Shape, b: Shape) -> bool:
    return a.dims == b.dims and a.is_array and b.is_array


def kind(s: Shape) -> str:
    return dtypes.info(s.element_type).kind


def type_name(s: Shape | PrimitiveType) -> str:
    et = s.element_type if isinstance(s, Shape) else s
    return dtypes.info(et).name


def shape_text(s: Shape) -> str:
    return s.to_text(print_layout=False)


def is_float(s: Shape) -> bool:
    return kind(s) == "float"


def is_integral(s: Shape) -> bool:
    return kind(s) in ("int", "uint")


def is_complex(s: Shape) -> bool:
    return kind(s) == "complex"


def complex_component(et: PrimitiveType) -> PrimitiveType:
    return P.F64 if et == P.C128 else P.F32


def operand(instr: Instruction, i: int, what: str = "") -> Shape:
    """Operand i's shape, which must be an array."""
    s = instr.operands[i].shape
    if not s.is_array:
        raise fail(f"{what or f'operand {i}'} must be an array, got {shape_text(s)}")
    return s


def need_scalar(s: Shape, what: str) -> None:
    if not s.is_array or s.rank != 0:
        raise fail(f"{what} must be a scalar, got {shape_text(s)}")


def dims_attr(instr: Instruction) -> tuple[int, ...]:
    """The `dimensions` attribute; unset reads as empty (protos cannot tell the two apart)."""
    return instr.attrs.dimensions or ()


def one_dim_attr(instr: Instruction, what: str) -> int:
    d = dims_attr(instr)
    if len(d) != 1:
        raise fail(f"{what} must be a single dimension, got {{{_join(d)}}}")
    return d[0]


def check_in_range(dims: Sequence[int], rank: int, what: str) -> None:
    for d in dims:
        if d < 0 or d >= rank:
            raise fail(f"{what} {d} is out of range for rank {rank}")


def check_unique(dims: Sequence[int], what: str) -> None:
    if len(set(dims)) != len(dims):
        raise fail(f"{what} {{{_join(dims)}}} repeat a dimension")


def check_sorted_unique(dims: Sequence[int], what: str) -> None:
    check_unique(dims, what)
    if list(dims) != sorted(dims):
        raise fail(f"{what} {{{_join(dims)}}} must be sorted")


def check_dims_valid(dims: Sequence[int], rank: int, what: str, sort: bool = False) -> None:
    check_in_range(dims, rank, what)
    if sort:
        check_sorted_unique(dims, what)
    else:
        check_unique(dims, what)


def is_permutation(perm: Sequence[int], rank: int) -> bool:
    return len(perm) == rank and sorted(perm) == list(range(rank))


def _join(dims: Iterable[int]) -> str:
    return ",".join(str(d) for d in dims)


def join(dims: Iterable[int]) -> str:
    return _join(dims)


def program_params(comp: Computation) -> list[Shape]:
    """Parameter shapes of a called computation in parameter-number order."""
    params = [i for i in comp.instructions if i.opcode == Opcode.PARAMETER]
    params.sort(key=lambda p: -1 if p.attrs.parameter_number is None else p.attrs.parameter_number)
    return [p.shape for p in params]


def program_result(comp: Computation) -> Shape:
    if comp.root is None:
        raise fail(f"called computation {comp.name} has no root")
    return comp.root.shape


def check_param_count(comp: Computation, n: int, role: str) -> list[Shape]:
    params = program_params(comp)
    if len(params) != n:
        raise fail(f"{role} computation {comp.name} must take {n} parameter(s), takes {len(params)}")
    return params


def same_type(a: Shape, b: Shape, what: str) -> None:
    if a.element_type != b.element_type:
        raise fail(f"{what}: element types differ ({type_name(a)} vs {type_name(b)})")
