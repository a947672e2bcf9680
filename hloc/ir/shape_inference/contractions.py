"""Contractions and linear algebra: dot, convolution, fft, triangular-solve, cholesky, batch-norm.

Dot and convolution take their result element type from the declared shape (XLA's
preferred_element_type); an integral contraction may not narrow it.
"""

from __future__ import annotations

from .. import dtypes
from ..opcodes import Opcode as O
from .common import (
    P,
    arr,
    check_dims_valid,
    complex_component,
    is_complex,
    is_float,
    join,
    operand,
    shape_text,
    tup,
    type_name,
)
from .reductions import window_output_dims
from .registry import fail, register


def _result_type(instr, lhs, rhs):
    et = instr.shape.element_type
    if not instr.shape.is_array:
        raise fail(f"result must be an array, declared {shape_text(instr.shape)}")
    widest = max(dtypes.info(lhs.element_type).bits, dtypes.info(rhs.element_type).bits)
    if not (is_float(lhs) or is_complex(lhs)) and dtypes.info(et).bits < widest:
        raise fail(f"result type {type_name(et)} is narrower than the operands "
                   f"({type_name(lhs)}, {type_name(rhs)})")
    return et


@register(O.DOT, operands=2)
def dot(instr):
    lhs, rhs = operand(instr, 0, "lhs"), operand(instr, 1, "rhs")
    dn = instr.attrs.dot_dnums
    if dn is None:
        raise fail("missing dot dimension numbers")
    lc, rc, lb, rb = (dn.lhs_contracting_dimensions, dn.rhs_contracting_dimensions,
                      dn.lhs_batch_dimensions, dn.rhs_batch_dimensions)
    check_dims_valid(lc + lb, lhs.rank, "lhs batch/contracting dimension")
    check_dims_valid(rc + rb, rhs.rank, "rhs batch/contracting dimension")
    if len(lc) != len(rc) or len(lb) != len(rb):
        raise fail(f"lhs and rhs need as many contracting ({len(lc)} vs {len(rc)}) and batch "
                   f"({len(lb)} vs {len(rb)}) dimensions")
    for kind_, ls, rs in (("contracting", lc, rc), ("batch", lb, rb)):
        for a, b in zip(ls, rs, strict=True):
            if lhs.dims[a] != rhs.dims[b]:
                raise fail(f"lhs {kind_} dimension {a} has size {lhs.dims[a]} but rhs {kind_} "
                           f"dimension {b} has size {rhs.dims[b]}")
    dims = [lhs.dims[d] for d in lb]
    dims += [n for i, n in enumerate(lhs.dims) if i not in lc and i not in lb]
    dims += [n for i, n in enumerate(rhs.dims) if i not in rc and i not in rb]
    return arr(_result_type(instr, lhs, rhs), dims)


@register(O.RAGGED_DOT, operands=3)
def ragged_dot(instr):
    """Ragged dimension numbers are not modelled in Attrs: check the operands, trust the rest."""
    for i, what in enumerate(("lhs", "rhs", "group sizes")):
        operand(instr, i, what)
    return arr(instr.shape.element_type, instr.shape.dims)


def _conv_dnums(instr, rank):
    dn = instr.attrs.conv_dnums
    if dn is None:
        raise fail("missing convolution dimension numbers")
    n = len(dn.input_spatial_dimensions)
    if len(dn.kernel_spatial_dimensions) != n or len(dn.output_spatial_dimensions) != n:
        raise fail("input, kernel and output must have the same number of spatial dimensions")
    if rank != n + 2:
        raise fail(f"operands must have rank {n + 2} for {n} spatial dimensions, got {rank}")
    groups = (("input", (dn.input_batch_dimension, dn.input_feature_dimension),
               dn.input_spatial_dimensions),
              ("kernel", (dn.kernel_input_feature_dimension, dn.kernel_output_feature_dimension),
               dn.kernel_spatial_dimensions),
              ("output", (dn.output_batch_dimension, dn.output_feature_dimension),
               dn.output_spatial_dimensions))
    for name, pair, spatial in groups:
        labels = pair + tuple(spatial)
        if sorted(labels) != list(range(rank)):
            raise fail(f"{name} dimension numbers {{{join(labels)}}} must name each of the "
                       f"{rank} dimensions exactly once")
    return dn


def _conv_groups(instr, dn, lhs, rhs):
    fgc = instr.attrs.feature_group_count or 1
    bgc = instr.attrs.batch_group_count or 1
    if fgc <= 0 or bgc <= 0 or (fgc > 1 and bgc > 1):
        raise fail(f"feature_group_count {fgc} and batch_group_count {bgc} must be positive "
                   f"and not both above 1")
    in_f = lhs.dims[dn.input_feature_dimension]
    k_in, k_out = rhs.dims[dn.kernel_input_feature_dimension], rhs.dims[dn.kernel_output_feature_dimension]
    if in_f % fgc != 0 or in_f // fgc != k_in:
        raise fail(f"input features {in_f} / feature_group_count {fgc} must equal the kernel "
                   f"input features {k_in}")
    if k_out % fgc != 0 or k_out % bgc != 0:
        raise fail(f"kernel output features {k_out} must be divisible by feature_group_count "
                   f"{fgc} and batch_group_count {bgc}")
    batch = lhs.dims[dn.input_batch_dimension]
    if batch % bgc != 0:
        raise fail(f"input batch {batch} must be divisible by batch_group_count {bgc}")
    return batch // bgc, k_out


@register(O.CONVOLUTION, operands=2)
def convolution(instr):
    lhs, rhs = operand(instr, 0, "lhs"), operand(instr, 1, "rhs")
    if lhs.rank != rhs.rank:
        raise fail(f"lhs rank {lhs.rank} differs from rhs rank {rhs.rank}")
    dn = _conv_dnums(instr, lhs.rank)
    batch, features = _conv_groups(instr, dn, lhs, rhs)
    window = instr.attrs.window
    sizes = [w.size for w in window.dims] if window is not None else []
    kernel = [rhs.dims[d] for d in dn.kernel_spatial_dimensions]
    if sizes != kernel:
        raise fail(f"window size {'x'.join(map(str, sizes))} must equal the kernel spatial "
                   f"sizes {'x'.join(map(str, kernel))}")
    spatial = window_output_dims([lhs.dims[d] for d in dn.input_spatial_dimensions], window)
    dims = [0] * lhs.rank
    dims[dn.output_batch_dimension] = batch
    dims[dn.output_feature_dimension] = features
    for d, n in zip(dn.output_spatial_dimensions, spatial, strict=True):
        dims[d] = n
    return arr(_result_type(instr, lhs, rhs), dims)


@register(O.FFT)
def fft(instr):
    x = operand(instr, 0)
    length = tuple(instr.attrs.fft_length or ())
    kind_ = instr.attrs.fft_type or 0
    n = len(length)
    if not 1 <= n <= 3 or x.rank < n:
        raise fail(f"fft_length {{{join(length)}}} must have 1 to 3 entries, at most the "
                   f"operand rank {x.rank}")
    rule = _FFT_RULES.get(kind_)
    if rule is None:
        raise fail(f"unknown fft_type {kind_}")
    return rule(x, length)


def _fft_complex(x, length):
    if not is_complex(x):
        raise fail(f"FFT/IFFT need a complex operand, got {type_name(x)}")
    return arr(x.element_type, x.dims)


def _rfft(x, length):
    if x.element_type not in (P.F32, P.F64):
        raise fail(f"RFFT needs an f32 or f64 operand, got {type_name(x)}")
    if x.dims[x.rank - len(length):] != length:
        raise fail(f"RFFT: innermost dimensions of {shape_text(x)} must equal fft_length "
                   f"{{{join(length)}}}")
    last = length[-1] // 2 + 1 if length[-1] else 0
    return arr(P.C64 if x.element_type == P.F32 else P.C128, x.dims[:-1] + (last,))


def _irfft(x, length):
    if not is_complex(x):
        raise fail(f"IRFFT needs a complex operand, got {type_name(x)}")
    inner = x.dims[x.rank - len(length):]
    expect_last = length[-1] // 2 + 1 if length[-1] else 0
    if inner[:-1] != length[:-1] or inner[-1] != expect_last:
        raise fail(f"IRFFT: innermost dimensions of {shape_text(x)} must be "
                   f"{{{join(length[:-1] + (expect_last,))}}} for fft_length {{{join(length)}}}")
    return arr(complex_component(x.element_type), x.dims[:-1] + (length[-1],))


_FFT_RULES = {0: _fft_complex, 1: _fft_complex, 2: _rfft, 3: _irfft}


def _square_matrices(a, what):
    if not (is_float(a) or is_complex(a)):
        raise fail(f"{what} must be floating-point or complex, got {type_name(a)}")
    if a.rank < 2 or a.dims[-1] != a.dims[-2]:
        raise fail(f"{what} must be a batch of square matrices, got {shape_text(a)}")


@register(O.TRIANGULAR_SOLVE, operands=2)
def triangular_solve(instr):
    a, b = operand(instr, 0, "a"), operand(instr, 1, "b")
    _square_matrices(a, "a")
    opts = instr.attrs.triangular_solve_options
    left = bool(opts and opts.left_side)
    if opts is not None and not 0 <= opts.transpose_a <= 3:
        raise fail(f"invalid transpose_a {opts.transpose_a}")
    if b.element_type != a.element_type or b.rank != a.rank or b.dims[:-2] != a.dims[:-2]:
        raise fail(f"b {shape_text(b)} must match a {shape_text(a)} in type, rank and batch "
                   f"dimensions")
    shared = b.dims[-2] if left else b.dims[-1]
    if shared != a.dims[-1]:
        raise fail(f"a {shape_text(a)} and b {shape_text(b)} disagree on the shared dimension "
                   f"(left_side={str(left).lower()})")
    return arr(b.element_type, b.dims)


@register(O.CHOLESKY)
def cholesky(instr):
    a = operand(instr, 0, "a")
    _square_matrices(a, "a")
    return arr(a.element_type, a.dims)


def _batch_norm_common(instr, vector_operands):
    x = operand(instr, 0)
    fi = instr.attrs.feature_index
    if fi is None or not 0 <= fi < x.rank:
        raise fail(f"feature_index {fi} is out of range for operand rank {x.rank}")
    if not is_float(x):
        raise fail(f"operand must be floating-point, got {type_name(x)}")
    features = x.dims[fi]
    for i, what in vector_operands:
        v = operand(instr, i, what)
        if v.element_type != x.element_type or v.dims != (features,):
            raise fail(f"{what} must be {type_name(x)}[{features}], got {shape_text(v)}")
    return x, arr(x.element_type, (features,))


@register(O.BATCH_NORM_TRAINING, operands=3)
def batch_norm_training(instr):
    x, vec = _batch_norm_common(instr, ((1, "scale"), (2, "offset")))
    return tup((arr(x.element_type, x.dims), vec, vec))


@register(O.BATCH_NORM_INFERENCE, operands=5)
def batch_norm_inference(instr):
    x, _ = _batch_norm_common(instr, ((1, "scale"), (2, "offset"), (3, "mean"), (4, "variance")))
    return arr(x.element_type, x.dims)


@register(O.BATCH_NORM_GRAD, operands=5)
def batch_norm_grad(instr):
    x, vec = _batch_norm_common(instr, ((1, "scale"), (2, "mean"), (3, "variance")))
    grad = operand(instr, 4, "output gradient")
    if grad.dims != x.dims or grad.element_type != x.element_type:
        raise fail(f"output gradient {shape_text(grad)} must match the operand {shape_text(x)}")
    return tup((arr(x.element_type, x.dims), vec, vec))
