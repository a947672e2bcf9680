"""Host steps as native jobs: jax's LAPACK calls run by generated code (codegen/cpu/hostops.py).

A LAPACK custom call's Call (runtime/lapack.py: scratch matrices, bound arguments, what is
copied in and out per matrix) becomes a job: the same copies, the routine's call through its
address, the status conversions, all as words that `hloc_host_ops` interprets. The job points
into the arena through registered words (Memory.pointer), so rebinding an entry parameter or
an output moves it like a kernel's pointers. A step outside a native driver runs its job with
one ctypes call (about 1 us, where the NumPy step cost 3-6 us beyond the routine); a driver
(codegen/cpu/driver.py, slot ["host", thunk]) calls `hloc_host_ops` itself, so a loop of small
solves (a Kalman filter's) stays native.

The interpreter is compiled once per process for the host (its object cached on disk, as the
native GEMM's), with no features beyond the baseline: its work is copies and one call.
"""

from __future__ import annotations

import ctypes
import functools
import math
import threading

import numpy as np

from ... import __version__
from ...buffers.assignment import Slice
from ...codegen.cpu import hostops as ops
from ...ir.custom_calls import lapack_flops, splits_over_threads
from ...util.objcache import cache_key, cached_object
from ..lapack import Call, native_call
from ..layouts import memory_order
from .blas import LAPACK_SINGLE_THREAD_FLOPS, _setter
from .parallel import split
from .program import LoadContext

_JOB_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_LOCK = threading.Lock()
_PROVIDED: list[int] = []


@functools.cache
def _library():
    import llvmlite.binding as llvm_binding

    from ...codegen import llvm
    from ...codegen.target import host_target

    target = host_target()
    text = ops.module_text(target)
    key = cache_key(text, target.triple, target.cpu, target.features, "O2",
                    ".".join(map(str, llvm_binding.llvm_version_info)), __version__)
    obj = cached_object(key, lambda: llvm.compile_ir(text, target, 2).object_code, "hostops")
    library = llvm.JitLibrary(obj, target)
    address = library.address(ops.SYMBOL)
    return library, address, _JOB_TYPE(address)


def provide_symbol() -> None:
    """Resolve `hloc_host_ops` for generated code (native drivers' host slots)."""
    import llvmlite.binding as llvm_binding

    with _LOCK:
        if not _PROVIDED:
            _, address, _ = _library()
            llvm_binding.add_symbol(ops.SYMBOL, address)
            _PROVIDED.append(address)


def byte_strides(shape) -> tuple[int, ...]:
    """The byte stride of each logical dimension of an array buffer of `shape`."""
    strides = [0] * shape.rank
    step = shape.np_dtype.itemsize
    for d in reversed(memory_order(shape)):
        strides[d] = step
        step *= shape.dims[d]
    return tuple(strides)


class Place:
    """Where a job reads or writes an operand's or output's matrices: the strides of its
    dimensions (batch dimensions first) and how to register a word with its address."""

    def __init__(self, dims, strides, itemsize: int, register, batch_rank: int = 0):
        self.dims, self.strides, self.itemsize = tuple(dims), tuple(strides), itemsize
        self.register = register  # register(words, index): set words[index] to its address
        self.batch_rank = batch_rank  # leading dimensions a job steps through

    def as_dims(self, dims) -> Place | None:
        """The same memory seen with dimensions `dims` (a reshape without copying, or a
        broadcast of missing leading dimensions), or None where no strides describe it."""
        dims = tuple(dims)
        if dims == self.dims:
            return self
        if math.prod(dims) == math.prod(self.dims):
            try:
                view = np.lib.stride_tricks.as_strided(np.empty(0, np.uint8), self.dims,
                                                       self.strides).view()
                view.shape = dims  # raises where a copy would be needed
            except (AttributeError, ValueError):
                return None
            return Place(dims, view.strides, self.itemsize, self.register)
        lead = len(dims) - len(self.dims)
        if lead < 0 or any(a not in (1, b)
                           for a, b in zip(self.dims, dims[lead:], strict=True)):
            return None
        strides = (0,) * lead + tuple(0 if a == 1 and b != 1 else s for a, b, s in
                                      zip(self.dims, dims[lead:], self.strides, strict=True))
        return Place(dims, strides, self.itemsize, self.register)


def _matrix(shape, strides) -> tuple[int, int, int, int]:
    """(rows, cols, row stride, col stride) of a 0-, 1- or 2-d array."""
    if len(shape) == 2:
        return shape[0], shape[1], strides[0], strides[1]
    if len(shape) == 1:
        return shape[0], 1, strides[0], 0
    return 1, 1, 0, 0


class _Builder:
    def __init__(self, batch):
        if len(batch) > ops.MAX_BATCH_DIMS:
            raise _NoNativeForm
        self.batch = tuple(batch)
        self.body: list[int] = []
        self.entries: list[tuple[int, Place]] = []  # (body word, place)
        self.keep: list = []

    def at(self, where) -> int:
        """A field: an address (int), or a Place's matrix (moves through the batch)."""
        if isinstance(where, Place):
            self.entries.append((len(self.body), where))
            return 0
        return int(where)

    def op(self, code: int, *fields) -> None:
        for f in (code, *fields):
            self.body.append(self.at(f) if isinstance(f, Place) else int(f))
        assert len(fields) + 1 == ops.OP_WORDS[code]

    def job(self) -> Job:
        nd = len(self.batch)
        per_entry = 2 + nd
        start = ops.HEADER_WORDS + nd + per_entry * len(self.entries)
        words = (ctypes.c_int64 * (start + len(self.body) + 1))()
        header = [math.prod(self.batch), nd, len(self.entries), start, *self.batch]
        words[:len(header)] = header
        for k, (field, place) in enumerate(self.entries):
            at = ops.HEADER_WORDS + nd + k * per_entry
            words[at] = start + field
            place.register(words, at + 1)
            words[at + 2:at + per_entry] = list(place.strides[:nd])
        words[start:start + len(self.body)] = self.body  # type: ignore[assignment]
        words[start + len(self.body)] = ops.END
        return Job(words, self.keep)


class Job:
    """A job's words (and what they point into) and how to run it."""

    def __init__(self, words, keep: list):
        self.words, self.keep = words, keep
        self.address = ctypes.addressof(words)
        self._fn = _library()[2]

    def run(self) -> None:
        self._fn(self.address)


class _NoNativeForm(Exception):
    """A piece of a call that a job cannot express (the NumPy step runs the call)."""


def _parts(x) -> tuple:
    """(address field, matrix dims, matrix strides, element size) of a Place's matrices or
    of a scratch array."""
    if isinstance(x, Place):
        return x, x.dims[x.batch_rank:], x.strides[x.batch_rank:], x.itemsize
    return x.ctypes.data, x.shape, x.strides, x.itemsize


def _copy(b: _Builder, src, dst) -> None:
    """COPY of one matrix from `src` to `dst` (Places or scratch arrays)."""
    s, s_dims, s_strides, s_size = _parts(src)
    d, d_dims, d_strides, d_size = _parts(dst)
    if s_size != d_size or math.prod(s_dims) != math.prod(d_dims):
        raise _NoNativeForm
    rows, cols, srs, scs = _matrix(s_dims, s_strides)
    _, _, drs, dcs = _matrix(d_dims, d_strides)
    b.op(ops.COPY, s_size, rows, cols, s, srs, scs, d, drs, dcs)


def _output(b: _Builder, src: np.ndarray, dst: Place, nonzero: bool) -> None:
    """One output's matrix from a scratch array: copied, converted, or a nonzero flag."""
    if nonzero:
        if src.size != 1 or dst.itemsize != 4:
            raise _NoNativeForm
        b.op(ops.NONZERO, src.ctypes.data, src.itemsize, dst)
    elif src.dtype.kind == "f":
        _copy(b, src, dst)
    elif src.dtype.kind == "i" and src.ndim <= 1 and dst.itemsize in (4, 8):
        b.op(ops.CONVERT, max(1, src.size), src.ctypes.data, src.strides[0] if src.ndim else 0,
             src.itemsize, dst, dst.strides[-1] if src.ndim else 0, dst.itemsize)
    else:
        raise _NoNativeForm


def lapack_job(call: Call, operands: list[Place], outputs: list[Place]) -> Job | None:
    """The job running `call` over `operands` and `outputs` (in the instruction's order), or
    None where a piece has no native form (the NumPy step then runs it)."""
    batch = call.batch

    def located(place: Place, per) -> Place:
        """`place` as the batch's matrices of dimensions `per`."""
        p = place.as_dims(batch + tuple(per))
        if p is None:
            raise _NoNativeForm
        return Place(p.dims, p.strides, p.itemsize, p.register, len(batch))

    words = list(call.args.words)
    if len(words) > ops.CALL_ARGS:
        return None
    b = _Builder(batch)
    b.keep.append(call)
    setter = _setter() if lapack_flops(call.instr) < LAPACK_SINGLE_THREAD_FLOPS else None
    threads = ctypes.cast(setter, ctypes.c_void_p).value if setter else 0
    try:
        for k, scratch in call.ins:
            op = operands[k]
            _copy(b, located(op, op.dims[len(op.dims) - scratch.ndim:]), scratch)
        if threads:
            b.op(ops.THREADS, threads)
        b.op(ops.CALL, ctypes.cast(call.fn, ctypes.c_void_p).value,
             *(words + [0] * (ops.CALL_ARGS - len(words))))
        if threads:
            b.op(ops.RESTORE, threads)
        if call.nan_if_failed is not None:
            view, lower = call.nan_if_failed
            info = call.info
            b.op(ops.NAN_TRIANGLE_IF, info.ctypes.data, info.itemsize, view.itemsize,
                 view.shape[0], view.ctypes.data, view.strides[0], view.strides[1], int(lower))
        for src, o, nonzero in call.outs:
            if isinstance(src, int):  # the operand itself
                per = operands[src].dims[-2:]
                _copy(b, located(operands[src], per), located(outputs[o], per))
            else:
                _output(b, src, located(outputs[o], src.shape), nonzero)
    except _NoNativeForm:
        return None
    return b.job()


def arena_place(ctx: LoadContext, s: Slice, shape) -> Place:
    """A Place over slice `s` of the arena, viewed as `shape`."""
    def register(words, index: int) -> None:
        ctx.memory.pointer(s, words, index)
    return Place(shape.dims, byte_strides(shape), shape.np_dtype.itemsize, register)


def array_place(a: np.ndarray) -> Place:
    """A Place over a NumPy array (tests, and runs outside an arena)."""
    def register(words, index: int) -> None:
        words[index] = a.ctypes.data
    return Place(a.shape, a.strides, a.itemsize, register)


def copy_job(dst: np.ndarray, src: np.ndarray) -> Job | None:
    """A job copying `src` into `dst`, arrays fixed for the job's life with the same shape
    and 4- or 8-byte items: one COPY of the last two dimensions per index of the others.
    For copies NumPy walks slowly: an im2col gather of short runs (a weight gradient's
    windows of 16 x 16 taps over 16 channels, 4.7 MB) took 4.8 ms as np.copyto. None for
    other arrays."""
    if dst.shape != src.shape or dst.dtype != src.dtype or dst.itemsize not in (4, 8) \
            or not 2 <= dst.ndim <= ops.MAX_BATCH_DIMS + 2 or dst.size == 0:
        return None
    batch = dst.shape[:-2]
    b = _Builder(batch)
    b.keep += [dst, src]
    places = [Place(a.shape, a.strides, a.itemsize, array_place(a).register, len(batch))
              for a in (src, dst)]
    _copy(b, *places)
    return b.job()


def thunk_job(ctx: LoadContext, thunk) -> Job | None:
    """The job of a LAPACK custom-call thunk, or None (not one, or no native form)."""
    jobs = _jobs(ctx, thunk, 1)
    return jobs[0] if jobs else None


def split_thunk_jobs(ctx: LoadContext, thunk, parts: int) -> list[Job] | None:
    """Jobs running the call's matrices in `parts` ranges of its first batch dimension, each
    with scratch of its own (so they may run at once; each call on one BLAS thread, set
    thread-locally), or None: not a LAPACK job, too few or too many flops, too few
    matrices, or a batch dimension that is not the major one of every operand and output."""
    instr = ctx.instruction(thunk.name)
    # (Calls big enough for BLAS threads of their own keep them: one range at a time; so do
    # all where OpenBLAS cannot be held to one thread for the calling thread alone.)
    if parts < 2 or not splits_over_threads(instr) \
            or lapack_flops(instr) >= LAPACK_SINGLE_THREAD_FLOPS or _setter() is None:
        return None
    return _jobs(ctx, thunk, parts)


def _jobs(ctx: LoadContext, thunk, parts: int) -> list[Job] | None:
    instr = ctx.instruction(thunk.name)
    call = native_call(instr)
    if call is None:
        return None
    reads, writes = list(thunk.reads()), list(thunk.writes())
    shapes = instr.shape.tuple_shapes if instr.shape.is_tuple else [instr.shape]
    if len(reads) != len(instr.operands) or len(writes) != len(shapes):
        return None
    pairs = list(zip(reads, [op.shape for op in instr.operands], strict=True))
    pairs += list(zip(writes, shapes, strict=True))
    batch = call.batch
    if parts > 1 and not (batch and batch[0] >= parts
                          and all(_major_batch(shape, batch) for _, shape in pairs)):
        return None
    provide_symbol()
    jobs = []
    for lo, hi in ([(0, batch[0] if batch else 1)] if parts == 1 else split(batch[0], parts)):
        if parts > 1:
            call = native_call(instr)  # scratch and bound arguments of its own
            call.batch = (hi - lo, *batch[1:])
        places = [_batch_place(ctx, s, shape, lo, hi, parts > 1) for s, shape in pairs]
        job = lapack_job(call, places[:len(reads)], places[len(reads):])
        if job is None:
            return None
        jobs.append(job)
    return jobs


def _major_batch(shape, batch) -> bool:
    """Whether `shape` leads with the call's batch dimensions, the first its major one."""
    strides = byte_strides(shape)
    return (tuple(shape.dims[:len(batch)]) == tuple(batch)
            and strides[0] * shape.dims[0] == shape.byte_size)


def _batch_place(ctx: LoadContext, s: Slice, shape, lo: int, hi: int, part: bool) -> Place:
    """The Place of matrices [lo, hi) of the first batch dimension of slice `s`."""
    if not part:
        return arena_place(ctx, s, shape)
    strides = byte_strides(shape)
    sub = Slice(s.allocation, s.offset + lo * strides[0], (hi - lo) * strides[0])

    def register(words, index: int) -> None:
        ctx.memory.pointer(sub, words, index)
    return Place((hi - lo, *shape.dims[1:]), strides, shape.np_dtype.itemsize, register)
