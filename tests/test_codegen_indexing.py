"""CPU kernels vs the interpreter for index-remapping ops, layouts and odd shapes."""

from __future__ import annotations

import numpy as np
import pytest

from .support.kernels import check_hlo

pytestmark = pytest.mark.cpu

CASES = {
    "broadcast": """
ENTRY e {
  a = f32[3,4] parameter(0)
  ROOT b = f32[2,4,5,3] broadcast(a), dimensions={3,1}
}""",
    "broadcast_scalar": """
ENTRY e {
  a = s32[] parameter(0)
  ROOT b = s32[7,3] broadcast(a), dimensions={}
}""",
    "reshape_split": """
ENTRY e {
  a = f32[6,20] parameter(0)
  ROOT b = f32[2,3,4,5] reshape(a)
}""",
    "reshape_odd": """
ENTRY e {
  a = f32[6,10] parameter(0)
  ROOT b = f32[4,15] reshape(a)
}""",
    "reshape_ones": """
ENTRY e {
  a = bf16[1,6,1,5] parameter(0)
  ROOT b = bf16[6,5,1] reshape(a)
}""",
    "transpose": """
ENTRY e {
  a = s8[2,3,4] parameter(0)
  ROOT b = s8[4,2,3] transpose(a), dimensions={2,0,1}
}""",
    "transpose_layout": """
ENTRY e {
  a = f32[5,7]{0,1} parameter(0)
  ROOT b = f32[7,5]{1,0} transpose(a), dimensions={1,0}
}""",
    "copy_layout": """
ENTRY e {
  a = f32[5,7,3]{2,1,0} parameter(0)
  ROOT b = f32[5,7,3]{0,2,1} copy(a)
}""",
    "bitcast_layout": """
ENTRY e {
  a = f32[5,7]{0,1} parameter(0)
  ROOT b = f32[7,5]{1,0} bitcast(a)
}""",
    "bitcast_type": """
ENTRY e {
  a = s32[4,6] parameter(0)
  ROOT b = f32[24] bitcast(a)
}""",
    "slice": """
ENTRY e {
  a = f32[10,12] parameter(0)
  ROOT b = f32[3,4] slice(a), slice={[1:10:3], [2:12:3]}
}""",
    "pad": """
ENTRY e {
  a = f32[4,5] parameter(0)
  v = f32[] constant(-7)
  ROOT b = f32[13,6] pad(a, v), padding=2_1_2x-1_2_0
}""",
    "pad_empty": """
ENTRY e {
  a = f32[0,5] parameter(0)
  v = f32[] constant(3)
  ROOT b = f32[2,6] pad(a, v), padding=1_1x0_1
}""",
    "concatenate": """
ENTRY e {
  a = u16[3,2] parameter(0)
  b = u16[3,0] parameter(1)
  c = u16[3,5] parameter(2)
  ROOT d = u16[3,7] concatenate(a, b, c), dimensions={1}
}""",
    "reverse": """
ENTRY e {
  a = f16[4,5,6] parameter(0)
  ROOT b = f16[4,5,6] reverse(a), dimensions={0,2}
}""",
    "iota": """
ENTRY e {
  ROOT a = f32[5,7] iota(), iota_dimension=1
}""",
    "iota_int_bf16": """
ENTRY e {
  a = s32[300] iota(), iota_dimension=0
  b = bf16[300] iota(), iota_dimension=0
  c = bf16[300] convert(a)
  ROOT t = (s32[300], bf16[300], bf16[300]) tuple(a, b, c)
}""",
    "dynamic_slice": """
ENTRY e {
  a = f32[8,9] parameter(0)
  i = s32[] parameter(1)
  j = u8[] parameter(2)
  ROOT b = f32[3,4] dynamic-slice(a, i, j), dynamic_slice_sizes={3,4}
}""",
    "dynamic_update_slice": """
ENTRY e {
  a = f32[8,9] parameter(0)
  u = f32[3,4] parameter(1)
  i = s64[] parameter(2)
  j = s32[] parameter(3)
  ROOT b = f32[8,9] dynamic-update-slice(a, u, i, j)
}""",
    "constant_array": """
ENTRY e {
  a = f32[2,3] parameter(0)
  c = f32[2,3] constant({{1,2,3},{4,5,6}})
  ROOT b = f32[2,3] multiply(a, c)
}""",
    "constant_pred_bf16": """
ENTRY e {
  c = pred[4] constant({1,0,1,1})
  d = bf16[4] constant({1.5,-2,3.25,0.1})
  z = bf16[4] constant({0,0,0,0})
  ROOT b = bf16[4] select(c, d, z)
}""",
    "gather_rows": """
ENTRY e {
  a = f32[10,6] parameter(0)
  i = s32[4,1] parameter(1)
  ROOT g = f32[4,6] gather(a, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,6}
}""",
    "gather_2d": """
ENTRY e {
  a = f32[7,8,3] parameter(0)
  i = s64[2,5,2] parameter(1)
  ROOT g = f32[2,5,2,3] gather(a, i), offset_dims={2,3}, collapsed_slice_dims={0}, start_index_map={0,1}, index_vector_dim=2, slice_sizes={1,2,3}
}""",
    "gather_batching": """
ENTRY e {
  a = f32[3,10,4] parameter(0)
  i = s32[3,5] parameter(1)
  ROOT g = f32[3,5,4] gather(a, i), offset_dims={2}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1,4}
}""",
    "empty_and_unit": """
ENTRY e {
  a = f32[0,3] parameter(0)
  b = f32[1,1,3] parameter(1)
  c = f32[0,3] negate(a)
  d = f32[1,1,3] negate(b)
  ROOT t = (f32[0,3], f32[1,1,3]) tuple(c, d)
}""",
    "scalar": """
ENTRY e {
  a = f64[] parameter(0)
  ROOT b = f64[] multiply(a, a)
}""",
}


def _inputs_with_indices(name: str):
    """Index operands that hit clamping (negative, too large) besides ordinary values."""
    rng = np.random.default_rng(11)
    if name == "dynamic_slice":
        return [rng.standard_normal((8, 9)).astype(np.float32), np.array(-3, np.int32),
                np.array(200, np.uint8)]
    if name == "dynamic_update_slice":
        return [rng.standard_normal((8, 9)).astype(np.float32),
                rng.standard_normal((3, 4)).astype(np.float32), np.array(6, np.int64),
                np.array(-2, np.int32)]
    if name == "gather_rows":
        return [rng.standard_normal((10, 6)).astype(np.float32),
                np.array([[3], [-5], [9], [40]], np.int32)]
    if name == "gather_2d":
        return [rng.standard_normal((7, 8, 3)).astype(np.float32),
                rng.integers(-3, 10, (2, 5, 2)).astype(np.int64)]
    if name == "gather_batching":
        return [rng.standard_normal((3, 10, 4)).astype(np.float32),
                rng.integers(-2, 12, (3, 5)).astype(np.int32)]
    return None


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("chunks", [1, 3])
def test_index_op(name, chunks):
    check_hlo("HloModule m\n" + CASES[name], _inputs_with_indices(name), chunks=chunks)


def test_dynamic_slice_unsigned_64_saturates():
    text = """HloModule m
ENTRY e {
  a = f32[8] parameter(0)
  i = u64[] parameter(1)
  ROOT b = f32[3] dynamic-slice(a, i), dynamic_slice_sizes={3}
}"""
    a = np.arange(8, dtype=np.float32)
    got = check_hlo(text, [a, np.array(2**64 - 1, np.uint64)])
    assert got[0].tolist() == [5.0, 6.0, 7.0]


TILED_TRANSPOSES = {
    # 2-D, sizes that are no multiple of the tile.
    "matrix": """HloModule t
ENTRY e {
  x = f32[70,45]{1,0} parameter(0)
  ROOT t = f32[45,70]{1,0} transpose(x), dimensions={1,0}
}""",
    # Batched, with the minor dims swapped, of a fused elementwise op.
    "batched": """HloModule t
ENTRY e {
  x = f32[3,40,33]{2,1,0} parameter(0)
  n = f32[3,40,33]{2,1,0} negate(x)
  ROOT t = f32[3,33,40]{2,1,0} transpose(n), dimensions={0,2,1}
}""",
    # The input's contiguous dimension lands in the middle of the output.
    "rank3": """HloModule t
ENTRY e {
  x = s32[9,17,36]{2,1,0} parameter(0)
  ROOT t = s32[36,9,17]{2,1,0} transpose(x), dimensions={2,0,1}
}""",
    # Converted after the transpose (a bf16 gradient rounded back to f32), computed in the
    # input's order into a tile buffer (transpose.py staged): both tile edges partial.
    "converted": """HloModule t
ENTRY e {
  x = f32[37,70]{1,0} parameter(0)
  y = f32[37,70]{1,0} parameter(1)
  m = f32[37,70]{1,0} multiply(x, y)
  c = bf16[37,70]{1,0} convert(m)
  t = bf16[70,37]{1,0} transpose(c), dimensions={1,0}
  ROOT o = f32[70,37]{1,0} convert(t)
}""",
    # A staged predicate and an f64 value.
    "staged_pred": """HloModule t
ENTRY e {
  x = f64[40,50]{1,0} parameter(0)
  z = f64[] constant(0)
  bz = f64[40,50]{1,0} broadcast(z), dimensions={}
  g = pred[40,50]{1,0} compare(x, bz), direction=GT
  ROOT t = pred[50,40]{1,0} transpose(g), dimensions={1,0}
}""",
    "staged_f64": """HloModule t
ENTRY e {
  x = f64[2,40,50]{2,1,0} parameter(0)
  e = f64[2,40,50]{2,1,0} multiply(x, x)
  ROOT t = f64[2,50,40]{2,1,0} transpose(e), dimensions={0,2,1}
}""",
    # An attention head split: reshapes around the transpose that only rename the bytes.
    "head_split": """HloModule t
ENTRY e {
  x = f32[80,99]{1,0} parameter(0)
  r = f32[2,40,3,33]{3,2,1,0} reshape(x)
  t = f32[2,3,33,40]{3,2,1,0} transpose(r), dimensions={0,2,3,1}
  ROOT o = f32[6,33,40]{2,1,0} reshape(t)
}""",
}


@pytest.mark.parametrize("name", sorted(TILED_TRANSPOSES))
def test_transposes_of_the_contiguous_dimension_run_in_tiles(name):
    from hloc.codegen.cpu.transpose import TILE
    from tests.support.kernels import Compiled, entry_spec, parse_module

    text = TILED_TRANSPOSES[name]
    spec = entry_spec(parse_module(text))
    info = Compiled([spec]).emitted.metadata.kernels[spec.name]
    dims = spec.output_shapes[0].dims
    assert info.segments == ("transpose",)
    tiles = (-(-dims[-1] // TILE)) * (-(-max(dims[:-1]) // TILE))
    assert info.parallel_extent % tiles == 0
    check_hlo(text, chunks=3)


@pytest.mark.parametrize("name,staged", [("matrix", False), ("rank3", False), ("head_split", True),
                                         ("converted", True), ("staged_f64", True)])
def test_unstaged_tiles_keep_their_row_loop_rolled(name, staged):
    """A tile's loop over the output's rows (each a vector loop over the tile's columns)
    asks LLVM not to unroll it: unrolled, the gathers of its copies cost LLVM's loop strength
    reduction up to 0.4 s on one kernel (the triangular_solves sample's) for no faster code.
    The staged tiles' loops are left to LLVM (in a kernel not compact: a compact one asks
    that of all its loops, codegen/cpu/compile.py)."""
    from hloc.codegen.target import host_target
    from tests.support.kernels import build_llvm_module, entry_spec, parse_module

    module, _, _ = build_llvm_module([entry_spec(parse_module(TILED_TRANSPOSES[name]))],
                                     host_target(), compact=False)
    assert ("llvm.loop.unroll.disable" in str(module)) != staged
