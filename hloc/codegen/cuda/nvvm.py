"""NVVM building blocks for kernel IR: special registers, barriers, warp shuffles, shared memory.

Everything GPU-specific a kernel emitter needs goes through these helpers, so the emulator
(emulate/) knows the complete set of NVVM calls it has to replace:
- `llvm.nvvm.read.ptx.sreg.{tid,ntid,ctaid,nctaid}.{x,y,z}` (i32, no arguments);
- `llvm.nvvm.barrier0` (block-wide barrier);
- `llvm.nvvm.shfl.sync.{down,bfly,idx,up}.{i32,f32}` (mask, value, lane operand, clamp);
- shared memory: one `addrspace(3)` byte array per kernel, always used through a single
  `addrspacecast` to a generic pointer at the top of the kernel (LLVM's address-space
  inference turns the accesses back into ld/st.shared).
"""

from __future__ import annotations

from llvmlite import ir

from ..elemental.types import F32, F64, I32, I64, PTR

SREG_KINDS = ("tid", "ntid", "ctaid", "nctaid")
AXES = ("x", "y", "z")
BARRIER = "llvm.nvvm.barrier0"
SHUFFLE_MODES = ("down", "bfly", "idx", "up")
FULL_MASK = -1
SHARED_ADDRSPACE = 3
# Kernel attributes: f32 denormals flush to zero (XLA CPU, the reference, runs with FTZ/DAZ).
F32_FTZ = '"denormal-fp-math-f32"="preserve-sign,preserve-sign"'


def sreg_name(kind: str, axis: str) -> str:
    return f"llvm.nvvm.read.ptx.sreg.{kind}.{axis}"


def shuffle_name(mode: str, suffix: str) -> str:
    return f"llvm.nvvm.shfl.sync.{mode}.{suffix}"


def declare(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type],
            convergent: bool = False) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name)
        if convergent:
            fn.attributes.add("convergent")
        fn.attributes.add("nounwind")
    return fn


def kernel_function(module: ir.Module, name: str, num_args: int, max_threads: int) -> ir.Function:
    """`define ptx_kernel void @name(ptr, ...)` with launch bounds and f32 FTZ."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR] * num_args), name)
    fn.calling_convention = "ptx_kernel"
    fn.attributes.add("nounwind")
    # llvmlite validates only enum attributes; string attributes go in as text.
    set.add(fn.attributes, F32_FTZ)
    set.add(fn.attributes, f'"nvvm.maxntid"="{int(max_threads)}"')
    for arg in fn.args:
        arg.add_attribute("noundef")
    return fn


class Nvvm:
    """NVVM intrinsics for one kernel being built (special registers read once, in the entry)."""

    def __init__(self, module: ir.Module, builder: ir.IRBuilder, kernel_name: str):
        self.module = module
        self.builder = builder
        self.kernel_name = kernel_name
        self._sregs: dict[tuple[str, str], ir.Value] = {}
        self._shared: ir.GlobalVariable | None = None
        self._shared_base: ir.Value | None = None
        self.shared_bytes = 0

    # ---- special registers ---------------------------------------------------------------
    def sreg(self, kind: str, axis: str = "x") -> ir.Value:
        """The i32 special register (read in the entry block, so it dominates every use)."""
        key = (kind, axis)
        if key not in self._sregs:
            fn = declare(self.module, sreg_name(kind, axis), I32, [])
            with self._at_entry():
                self._sregs[key] = self.builder.call(fn, [], name=f"{kind}.{axis}")
        return self._sregs[key]

    def sreg64(self, kind: str, axis: str = "x") -> ir.Value:
        key = (kind + ".64", axis)
        if key not in self._sregs:
            value = self.sreg(kind, axis)
            with self._at_entry():
                self._sregs[key] = self.builder.zext(value, I64, name=f"{kind}.{axis}.64")
        return self._sregs[key]

    def _at_entry(self):
        """Emit at the end of the entry block (before its terminator, if it has one)."""
        return self.builder.goto_block(self.builder.function.entry_basic_block)

    # ---- synchronization -----------------------------------------------------------------
    def barrier(self) -> None:
        """__syncthreads(): every thread of the block must reach it (uniform control flow)."""
        fn = declare(self.module, BARRIER, ir.VoidType(), [], convergent=True)
        self.builder.call(fn, [])

    def shuffle(self, mode: str, value: ir.Value, lane: int | ir.Value, width: int = 32) -> ir.Value:
        """A full-warp shuffle of any scalar (i1..i64, f32, f64): 32-bit pieces moved together."""
        b = self.builder
        lane = ir.Constant(I32, lane) if isinstance(lane, int) else lane
        clamp = ir.Constant(I32, 0 if mode == "up" else ((32 - width) << 8) | 0x1F)
        ty = value.type
        if ty == F32:
            return self._shfl(mode, "f32", F32, value, lane, clamp)
        if ty == F64 or (isinstance(ty, ir.IntType) and ty.width == 64):
            bits = b.bitcast(value, I64) if ty == F64 else value
            lo = self._shfl(mode, "i32", I32, b.trunc(bits, I32), lane, clamp)
            hi = self._shfl(mode, "i32", I32, b.trunc(b.lshr(bits, ir.Constant(I64, 32)), I32),
                            lane, clamp)
            joined = b.or_(b.zext(lo, I64), b.shl(b.zext(hi, I64), ir.Constant(I64, 32)))
            return b.bitcast(joined, F64) if ty == F64 else joined
        if isinstance(ty, ir.IntType) and ty.width <= 32:
            wide = value if ty.width == 32 else b.zext(value, I32)
            moved = self._shfl(mode, "i32", I32, wide, lane, clamp)
            return moved if ty.width == 32 else b.trunc(moved, ty)
        raise TypeError(f"cannot shuffle a value of type {ty}")

    def _shfl(self, mode, suffix, ty, value, lane, clamp):
        fn = declare(self.module, shuffle_name(mode, suffix), ty, [I32, ty, I32, I32],
                     convergent=True)
        return self.builder.call(fn, [ir.Constant(I32, FULL_MASK), value, lane, clamp])

    # ---- shared memory -------------------------------------------------------------------
    def shared(self, element_type: ir.Type, count: int, element_bytes: int,
               align: int = 16) -> ir.Value:
        """A generic pointer to a new shared array of `count` elements (block-wide)."""
        offset = -(-self.shared_bytes // align) * align
        self.shared_bytes = offset + count * element_bytes
        base = self._shared_pointer()
        if offset == 0:
            return base
        with self._at_entry():
            return self.builder.gep(base, [ir.Constant(I64, offset)], inbounds=True,
                                    source_etype=ir.IntType(8))

    def _shared_pointer(self) -> ir.Value:
        if self._shared_base is None:
            gv = ir.GlobalVariable(self.module, ir.ArrayType(ir.IntType(8), 1),
                                   f"{self.kernel_name}.shared", addrspace=SHARED_ADDRSPACE)
            gv.linkage = "internal"
            gv.align = 16
            self._shared = gv
            with self._at_entry():
                self._shared_base = self.builder.addrspacecast(gv, PTR, name="shared")
        return self._shared_base

    def finish(self) -> None:
        """Give the shared array its final size (known once the body is emitted)."""
        if self._shared is not None:
            ty = ir.ArrayType(ir.IntType(8), max(1, self.shared_bytes))
            self._shared.value_type = ty
            self._shared.initializer = ir.Constant(ty, ir.Undefined)
