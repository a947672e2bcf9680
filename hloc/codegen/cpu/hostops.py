"""LLVM IR of `hloc_host_ops`: a host step (a LAPACK call with its copies) as native code.

Why: jax lowers `jnp.linalg` to LAPACK custom calls, and programs call them inside loops (a
Kalman filter solves a small system per step, an optimizer per iteration). From Python such
a step cost 3-6 us of NumPy copies and ctypes around a routine that takes a fraction of a
microsecond on a 4 x 4 matrix, and it kept the loop around it in Python (native drivers,
driver.py, take no host thunks). Here a step is a *job*: a list of 64-bit words the runtime
builds once at load time (runtime/cpu/hostops.py) and one function the runtime compiles once
per process interprets: copy a matrix between strided layouts, call a routine through its
address with up to CALL_ARGS word arguments, convert integers, fill a triangle with NaN when
a status word is nonzero, set a status flag, and switch OpenBLAS to one thread around the
call. Native drivers call it from their loops (slot ["host", thunk]); the runtime calls it
through ctypes for a step outside a driver.

A job (word indices):
    [0] count: how many times the body runs (a batch of matrices)
    [1] ndims, [2] nentries, [3] body: the word where the body's first op starts
    [4, 4 + ndims): the batch dimensions
    then nentries entries of 2 + ndims words: [word, base, stride_0 .. stride_{ndims-1}]
Before the body's i-th run, word `word` of the job is set to base + sum(index_k * stride_k)
over the multi-index of i in the batch dimensions (strides in bytes): how a body op's
address field moves through a batch. The runtime keeps `base` current as memory is rebound.
Body ops (all fields one word, addresses absolute, strides in bytes):
    END
    COPY elem rows cols src src_row src_col dst dst_row dst_col   (elem: 4 or 8 bytes)
    CALL fn a_0 .. a_{CALL_ARGS-1}     fn(a_0, ...): every argument passed as a 64-bit word
    CONVERT count src src_stride src_bytes dst dst_stride dst_bytes   (signed integers)
    NAN_TRIANGLE_IF flag flag_bytes elem n dst dst_row dst_col lower
    NONZERO src src_bytes dst          (*(i32 *) dst = value at src != 0)
    THREADS setter                     (saved = setter(1): OpenBLAS' thread-local count)
    RESTORE setter                     (setter(saved))
"""

from __future__ import annotations

from llvmlite import ir

from .gemm import _loop, _smin

I32, I64 = ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()
SYMBOL = "hloc_host_ops"

END, COPY, CALL, CONVERT, NAN_TRIANGLE_IF, NONZERO, THREADS, RESTORE = range(8)
# Fortran LAPACK takes every argument by address, plus a length per CHARACTER argument: geev,
# the longest, takes 16 words. On x86-64 the extra words of a shorter routine are ignored.
CALL_ARGS = 16
OP_WORDS = {END: 1, COPY: 10, CALL: 2 + CALL_ARGS, CONVERT: 8, NAN_TRIANGLE_IF: 9,
            NONZERO: 4, THREADS: 2, RESTORE: 2}
HEADER_WORDS = 4
MAX_BATCH_DIMS = 16  # batch dimensions a job may step through
_NAN = {4: 0x7FC00000, 8: 0x7FF8000000000000}


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


class _Emitter:
    def __init__(self, b: ir.IRBuilder):
        self.b = b

    def word(self, base, index) -> ir.Value:
        b = self.b
        return b.load(b.gep(base, [index if isinstance(index, ir.Value) else _c(index)],
                            source_etype=I64), typ=I64)

    def address(self, value: ir.Value) -> ir.Value:
        return self.b.inttoptr(value, PTR)

    def at(self, base, i, i_stride, j=None, j_stride=None) -> ir.Value:
        """The address base + i * i_stride (+ j * j_stride), all words."""
        b = self.b
        offset = b.mul(i, i_stride)
        if j is not None:
            offset = b.add(offset, b.mul(j, j_stride))
        return self.address(b.add(base, offset))

    def by_size(self, size: ir.Value, emit) -> None:
        """emit(int type) for an element size of 8 bytes, else of 4."""
        b = self.b
        with b.if_else(b.icmp_unsigned("==", size, _c(8))) as (wide, narrow):
            with wide:
                emit(I64)
            with narrow:
                emit(I32)

    def load_int(self, address: ir.Value, size: ir.Value) -> ir.Value:
        """The signed integer of `size` (4 or 8) bytes at `address`, as an i64."""
        b = self.b
        wide = b.load(address, typ=I64)
        narrow = b.sext(b.load(address, typ=I32), I64)
        return b.select(b.icmp_unsigned("==", size, _c(8)), wide, narrow)


# Rows and columns of a COPY's blocks.
COPY_BLOCK = 16


def _copy(e: _Emitter, q) -> None:
    b = e.b
    elem, rows, cols = (e.word(q, k) for k in (1, 2, 3))
    src, src_row, src_col, dst, dst_row, dst_col = (e.word(q, k) for k in range(4, 10))

    def emit(t: ir.IntType) -> None:
        # In COPY_BLOCK x COPY_BLOCK blocks: a transposing copy (a row-major matrix into
        # LAPACK's column-major scratch) element by element along whole rows touched a new
        # cache line per element on one side (512 x 512 f32: 0.6 ms).
        with _loop(b, _c(0), rows, COPY_BLOCK, name="rb") as i0, \
                _loop(b, _c(0), cols, COPY_BLOCK, name="cb") as j0:
            i1 = _smin(b, b.add(i0, _c(COPY_BLOCK)), rows)
            j1 = _smin(b, b.add(j0, _c(COPY_BLOCK)), cols)
            with _loop(b, i0, i1, name="r") as i, _loop(b, j0, j1, name="c") as j:
                value = b.load(e.at(src, i, src_row, j, src_col), typ=t)
                b.store(value, e.at(dst, i, dst_row, j, dst_col))

    # Rows contiguous on both sides (an im2col gather's runs of channels): one memcpy a row.
    runs = b.and_(b.icmp_unsigned("==", src_col, elem), b.icmp_unsigned("==", dst_col, elem))
    with b.if_else(runs) as (whole, single):
        with whole:
            size = b.mul(cols, elem)
            memcpy = b.module.declare_intrinsic("llvm.memcpy", [PTR, PTR, I64])
            with _loop(b, _c(0), rows, name="r") as i:
                b.call(memcpy, [e.at(dst, i, dst_row), e.at(src, i, src_row), size,
                                ir.Constant(ir.IntType(1), 0)])
        with single:
            e.by_size(elem, emit)


def _call(e: _Emitter, q) -> None:
    fn_type = ir.FunctionType(ir.VoidType(), [I64] * CALL_ARGS)
    _indirect(e.b, fn_type, e.word(q, 1), [e.word(q, 2 + k) for k in range(CALL_ARGS)])


def _indirect(b: ir.IRBuilder, fn_type: ir.FunctionType, address: ir.Value, args) -> ir.Value:
    """A call of the function at `address` (an i64; llvmlite calls through typed pointers,
    which LLVM reads as an opaque ptr)."""
    return b.call(b.inttoptr(address, ir.PointerType(fn_type)), args)


def _convert(e: _Emitter, q) -> None:
    b = e.b
    count, src, src_stride, src_bytes, dst, dst_stride, dst_bytes = (
        e.word(q, k) for k in range(1, 8))
    with _loop(b, _c(0), count, name="v") as i:
        value = e.load_int(e.at(src, i, src_stride), src_bytes)
        target = e.at(dst, i, dst_stride)
        e.by_size(dst_bytes, lambda t: b.store(b.trunc(value, t) if t is I32 else value,
                                               target))


def _nan_triangle_if(e: _Emitter, q) -> None:
    b = e.b
    flag, flag_bytes, elem, n, dst, dst_row, dst_col, lower = (e.word(q, k) for k in range(1, 9))
    failed = b.icmp_signed("!=", e.load_int(e.address(flag), flag_bytes), _c(0))
    with b.if_then(failed):
        def emit(t: ir.IntType) -> None:
            with _loop(b, _c(0), n, name="r") as i, _loop(b, _c(0), n, name="c") as j:
                inside = b.select(b.icmp_signed("!=", lower, _c(0)),
                                  b.icmp_signed("<=", j, i), b.icmp_signed(">=", j, i))
                with b.if_then(inside):
                    b.store(ir.Constant(t, _NAN[t.width // 8]),
                            e.at(dst, i, dst_row, j, dst_col))
        e.by_size(elem, emit)


def _nonzero(e: _Emitter, q) -> None:
    b = e.b
    value = e.load_int(e.address(e.word(q, 1)), e.word(q, 2))
    b.store(b.zext(b.icmp_signed("!=", value, _c(0)), I32), e.address(e.word(q, 3)))


_SETTER = ir.FunctionType(I32, [I32])


def _threads(e: _Emitter, q, saved) -> None:
    previous = _indirect(e.b, _SETTER, e.word(q, 1), [ir.Constant(I32, 1)])
    e.b.store(previous, saved)


def _restore(e: _Emitter, q, saved) -> None:
    _indirect(e.b, _SETTER, e.word(q, 1), [e.b.load(saved, typ=I32)])


def _body(module: ir.Module) -> ir.Function:
    """`void hloc_host_body(i64 *ops)`: run ops up to END."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), "hloc_host_body")
    fn.linkage = "internal"
    entry = fn.append_basic_block("entry")
    b = ir.IRBuilder(entry)
    e = _Emitter(b)
    saved = b.alloca(I32, name="saved_threads")
    b.store(ir.Constant(I32, 1), saved)
    cursor = b.alloca(PTR, name="cursor")
    b.store(fn.args[0], cursor)
    head = fn.append_basic_block("op")
    done = fn.append_basic_block("done")
    b.branch(head)
    b.position_at_end(head)
    q = b.load(cursor, typ=PTR)
    op = e.word(q, 0)
    switch = b.switch(op, done)  # END (or anything unknown) ends the body
    handlers = {COPY: _copy, CALL: _call, CONVERT: _convert, NAN_TRIANGLE_IF: _nan_triangle_if,
                NONZERO: _nonzero, THREADS: lambda e, q: _threads(e, q, saved),
                RESTORE: lambda e, q: _restore(e, q, saved)}
    for code, handler in handlers.items():
        block = fn.append_basic_block(f"op{code}")
        switch.add_case(_c(code), block)
        b.position_at_end(block)
        handler(e, q)
        b.store(b.gep(q, [_c(OP_WORDS[code])], source_etype=I64), cursor)
        b.branch(head)
    b.position_at_end(done)
    b.ret_void()
    return fn


def build_module() -> ir.Module:
    module = ir.Module(name="hloc_host_ops")
    body = _body(module)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), SYMBOL)
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    e = _Emitter(b)
    job = fn.args[0]
    count, ndims, entries, start = (e.word(job, k) for k in range(4))
    stride = b.add(ndims, _c(2))
    first_entry = b.add(ndims, _c(HEADER_WORDS))
    # The batch's multi-index, stepped like an odometer (the minor-most dimension fastest):
    # no division per dimension and entry at every step.
    index = b.alloca(I64, size=MAX_BATCH_DIMS, name="index")
    with _loop(b, _c(0), ndims, name="z") as d:
        b.store(_c(0), b.gep(index, [d], source_etype=I64))
    offset = b.alloca(I64, name="offset")
    carry = b.alloca(I64, name="carry")
    with _loop(b, _c(0), count, name="it"):
        with _loop(b, _c(0), entries, name="e") as k:
            entry = b.add(first_entry, b.mul(k, stride))
            b.store(_c(0), offset)
            with _loop(b, _c(0), ndims, name="d") as d:
                at = b.load(b.gep(index, [d], source_etype=I64), typ=I64)
                step = e.word(job, b.add(entry, b.add(_c(2), d)))
                b.store(b.add(b.load(offset, typ=I64), b.mul(at, step)), offset)
            word = e.word(job, entry)
            address = b.add(e.word(job, b.add(entry, _c(1))), b.load(offset, typ=I64))
            b.store(address, b.gep(job, [word], source_etype=I64))
        b.call(body, [b.gep(job, [start], source_etype=I64)])
        b.store(_c(1), carry)
        with _loop(b, _c(0), ndims, name="n") as n:
            dim = b.sub(b.sub(ndims, _c(1)), n)
            slot = b.gep(index, [dim], source_etype=I64)
            bumped = b.add(b.load(slot, typ=I64), b.load(carry, typ=I64))
            wrap = b.icmp_unsigned(">=", bumped, e.word(job, b.add(_c(HEADER_WORDS), dim)))
            b.store(b.select(wrap, _c(0), bumped), slot)
            b.store(b.zext(wrap, I64), carry)
    b.ret_void()
    return module


def module_text(target) -> str:
    """The IR text the runtime compiles for `target` (and keys its object cache by)."""
    module = build_module()
    module.triple, module.data_layout = target.triple, target.data_layout
    return str(module)
