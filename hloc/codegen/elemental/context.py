"""EmitContext: the builder, module and target shared by every generator of one function.

Target-neutral helpers only: constants, intrinsic declarations, constant tables, allocas in
the entry block and counted loops. Kernel emitters (cpu/, cuda/) create one per function.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator

from llvmlite import ir

from ..target import Target
from .types import I64

# The emitter protocol. A lowering is `fn(ctx: EmitContext, instr, operands: list[Generator])
# -> Generator`; a generator maps a multi-index (one i64 value per dimension) to the element's
# scalar value (a tuple of values for a tuple-shaped instruction).
Index = list[ir.Value]
Generator = Callable[[Index], ir.Value]


class EmitContext:
    """State for emitting one LLVM function with elemental generators."""

    def __init__(self, module: ir.Module, builder: ir.IRBuilder, target: Target | None, *,
                 prefix: str = "k", native_half: bool = False, unroll_short: bool = False,
                 unroll_loops: bool = True):
        self.module = module
        self.builder = builder
        self.target = target
        self.prefix = prefix
        # True when the target rounds f32 to f16 in hardware (fptrunc is one instruction):
        # lowfloat.encode / round_to use it, NaN payloads kept as the integer path keeps them.
        self.native_half = native_half
        # True when LLVM will vectorize this code: short reductions then unroll completely
        # (elemental.reduction.SHORT_REDUCE) so that the loop around them vectorizes.
        self.unroll_short = unroll_short
        # False: `loop`s that do not ask for or against unrolling get unroll.disable (a
        # compact kernel, codegen/cpu/compile.py: LLVM's unrolling cost more than it gained).
        self.unroll_loops = unroll_loops
        self._tables: dict[object, ir.GlobalVariable] = {}
        self._counter = 0
        # Index values known to lie in [lo, hi), by id: (value, lo, hi). Set by loop nests
        # split into regions (elemental.regions) while they emit each region.
        self._ranges: dict[int, tuple[ir.Value, int, int]] = {}
        # Index values known to be r modulo m, by id: (value, m, r). Set by loop nests that
        # emit one copy of their body per residue class (cpu.loops, elemental.regions).
        self._residues: dict[int, tuple[ir.Value, int, int]] = {}

    @property
    def target_kind(self) -> str:
        return getattr(self.target, "kind", "")

    # ---- constants and declarations ---------------------------------------------------------
    @staticmethod
    def i64(value: int) -> ir.Constant:
        return ir.Constant(I64, int(value))

    def intrinsic(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        """Declare (once per module) and return function `name`."""
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args), name)
        return fn

    def call(self, name: str, args: list[ir.Value], ret: ir.Type | None = None) -> ir.Value:
        """Call intrinsic/function `name` whose result type defaults to the first arg's type."""
        ret = ret if ret is not None else args[0].type
        fn = self.intrinsic(name, ret, [a.type for a in args])
        return self.builder.call(fn, args)

    def unique(self, base: str) -> str:
        self._counter += 1
        return f"{self.prefix}.{base}.{self._counter}"

    def table(self, key, element_type: ir.Type, values) -> ir.GlobalVariable:
        """A private constant array, shared by every use of the same key in this context."""
        glob = self._tables.get(key)
        if glob is None:
            values = list(values)
            array_type = ir.ArrayType(element_type, len(values))
            glob = ir.GlobalVariable(self.module, array_type, self.unique("table"))
            glob.global_constant = True
            glob.linkage = "private"
            glob.unnamed_addr = True
            glob.initializer = ir.Constant(array_type, [ir.Constant(element_type, v) for v in values])
            glob.align = 64
            self._tables[key] = glob
        return glob

    def bytes_table(self, key, data: bytes) -> ir.GlobalVariable:
        """A private constant byte array (any element type is read from it through GEPs)."""
        glob = self._tables.get(key)
        if glob is None:
            array_type = ir.ArrayType(ir.IntType(8), max(1, len(data)))
            glob = ir.GlobalVariable(self.module, array_type, self.unique("const"))
            glob.global_constant = True
            glob.linkage = "private"
            glob.unnamed_addr = True
            glob.initializer = ir.Constant(array_type, bytearray(data or b"\0"))
            glob.align = 64
            self._tables[key] = glob
        return glob

    # ---- index ranges and residues ----------------------------------------------------------
    @contextlib.contextmanager
    def assume(self, value: ir.Value, lo: int, hi: int) -> Iterator[None]:
        """Within the `with`, integer `value` is known to lie in [lo, hi): the code emitted
        there runs only where that holds."""
        with _known(self._ranges, value, (value, lo, hi)):
            yield

    @contextlib.contextmanager
    def assume_residue(self, value: ir.Value, modulus: int, residue: int) -> Iterator[None]:
        """Within the `with`, integer `value` is known to be `residue` modulo `modulus`."""
        with _known(self._residues, value, (value, modulus, residue % modulus)):
            yield

    def carry_residue(self, source: ir.Value, value: ir.Value) -> None:
        """`value` has `source`'s residue wherever it is used: an index clamped into bounds,
        whose clamping matters only where the element is masked out (a pad's select)."""
        m, r = self.value_residue(source)
        if m != 1:
            self._residues[id(value)] = (value, m, r)

    def value_range(self, v: ir.Value) -> tuple[int, int] | None:
        """[lo, hi) that integer value `v` is known to lie in: a constant, an assumed value,
        or a sum, difference, product, quotient by a constant, or smin / smax of those."""
        if isinstance(v, ir.Constant):
            return (v.constant, v.constant + 1) if isinstance(v.constant, int) else None
        known = self._ranges.get(id(v))
        if known is not None:
            return known[1], known[2]
        if isinstance(v, ir.CallInstr) and v.callee.name in _CLAMPS:
            return _clamp_range(v.callee.name, [self.value_range(o) for o in v.operands[1:]])
        if not isinstance(v, ir.Instruction) or v.opname not in _ARITH:
            return None
        x, y = (self.value_range(o) for o in v.operands)
        if x is None or y is None:
            return None
        if v.opname == "add":
            return x[0] + y[0], x[1] + y[1] - 1
        if v.opname == "sub":
            return x[0] - (y[1] - 1), x[1] - y[0]
        if v.opname in ("sdiv", "ashr"):
            if y != (y[0], y[0] + 1) or y[0] <= 0:
                return None
            div = (lambda a: a >> y[0]) if v.opname == "ashr" else (lambda a: _trunc_div(a, y[0]))
            return div(x[0]), div(x[1] - 1) + 1
        ends = [p * q for p in (x[0], x[1] - 1) for q in (y[0], y[1] - 1)]
        return min(ends), max(ends) + 1

    def value_residue(self, v: ir.Value) -> tuple[int, int]:
        """(m, r): integer value `v` is r modulo m (m = 0: v == r exactly; m = 1: nothing is
        known), through constants, assumed residues, sums, differences, products and
        quotients by a constant that divides the value."""
        if isinstance(v, ir.Constant):
            return (0, v.constant) if isinstance(v.constant, int) else (1, 0)
        known = self._residues.get(id(v))
        if known is not None:
            return known[1], known[2]
        if not isinstance(v, ir.Instruction) or v.opname not in _ARITH:
            return 1, 0
        (mx, rx), (my, ry) = (self.value_residue(o) for o in v.operands)
        if v.opname in ("add", "sub"):
            m = math.gcd(mx, my)
            r = rx + ry if v.opname == "add" else rx - ry
            return (m, r % m) if m else (0, r)
        if v.opname == "mul":
            m = math.gcd(mx * my, mx * ry, my * rx)
            return (m, rx * ry % m) if m else (0, rx * ry)
        # A quotient by a constant d (ashr: 2^d) that divides both m and r: the value is d * k.
        d = 1 << ry if v.opname == "ashr" else ry
        if my != 0 or d <= 0 or mx % d or rx % d:
            return 1, 0
        return mx // d, rx // d

    def exact_quotient(self, v: ir.Value, d: int) -> ir.Value:
        """v / d for a v that value_residue says d divides (a shift for a power of two). Not
        LLVM's `exact`: where the residue came through carry_residue, v may be another value
        in lanes that are masked out, and must not become poison there."""
        if d & (d - 1) == 0:
            return self.builder.ashr(v, self.i64(d.bit_length() - 1))
        return self.builder.sdiv(v, self.i64(d))

    # ---- control flow -------------------------------------------------------------------------
    def alloca(self, ty: ir.Type, count: int = 1, name: str = "") -> ir.Value:
        """A stack slot allocated once in the function's entry block."""
        fn = self.builder.function
        entry = fn.entry_basic_block
        saved = self.builder.block
        with self.builder.goto_block(entry):
            if entry.instructions and entry.instructions[-1].opname in ("br", "ret"):
                self.builder.position_before(entry.instructions[-1])
            else:
                self.builder.position_at_start(entry)
            size = ir.Constant(I64, count) if count != 1 else None
            slot = self.builder.alloca(ty, size=size, name=name)
        assert self.builder.block is saved
        return slot

    @contextlib.contextmanager
    def loop(self, start: ir.Value | int, stop: ir.Value | int, name: str = "i",
             step: int = 1, vectorize: bool = True, unroll: bool | None = None
             ) -> Iterator[ir.Value]:
        """`for i in range(start, stop, step)` (step > 0) with a phi-node induction variable;
        `vectorize=False` asks LLVM's loop vectorizer to leave it alone, `unroll=True` asks
        for complete unrolling (constant bounds), `unroll=False` for none (llvm.loop
        metadata; None: LLVM's choice, or none where the context has `unroll_loops` off).

        The body is emitted inside the `with`; the builder ends in the loop's exit block.
        """
        b = self.builder
        if unroll is None and not self.unroll_loops:
            unroll = False
        start = self.i64(start) if isinstance(start, int) else start
        stop = self.i64(stop) if isinstance(stop, int) else stop
        pre = b.block
        head = b.append_basic_block(f"{name}.head")
        body = b.append_basic_block(f"{name}.body")
        exit_ = b.append_basic_block(f"{name}.exit")
        b.branch(head)
        b.position_at_end(head)
        index = b.phi(I64, name=name)
        index.add_incoming(start, pre)
        b.cbranch(b.icmp_signed("<", index, stop), body, exit_)
        b.position_at_end(body)
        yield index
        nxt = b.add(index, self.i64(step), name=f"{name}.next", flags=["nsw"])
        index.add_incoming(nxt, b.block)
        latch = b.branch(head)
        if not vectorize or unroll is not None:
            latch.set_metadata("llvm.loop", self._loop_id(vectorize, unroll))
        b.position_at_end(exit_)

    def _loop_id(self, vectorize: bool, unroll: bool | None) -> ir.MDValue:
        """A loop ID with the hints `loop` takes: self-referential, as LLVM requires, and one
        per loop (llvmlite interns metadata by its operands: a unique name first)."""
        module = self.builder.module
        options = []
        if not vectorize:
            options.append(module.add_metadata([
                ir.MetaDataString(module, "llvm.loop.vectorize.enable"),
                ir.Constant(ir.IntType(1), 0)]))
        if unroll is not None:
            hint = "llvm.loop.unroll.full" if unroll else "llvm.loop.unroll.disable"
            options.append(module.add_metadata([ir.MetaDataString(module, hint)]))
        unique = ir.MetaDataString(module, module.get_unique_name("hloc.loop"))
        loop_id = module.add_metadata([*options, unique])
        loop_id.operands = (loop_id, *options)
        return loop_id

    def select_branch(self, cond: ir.Value, then_fn, else_fn) -> ir.Value:
        """if cond: then_fn() else: else_fn(), merged with a phi (both return one value)."""
        (value,) = self.select_branches(cond, lambda: [then_fn()], lambda: [else_fn()])
        return value

    def select_branches(self, cond: ir.Value, then_fn, else_fn) -> list[ir.Value]:
        """select_branch for sides that each return a sequence of values: a phi apiece."""
        b = self.builder
        with b.if_else(cond) as (then, otherwise):
            with then:
                then_values, then_block = then_fn(), b.block
            with otherwise:
                else_values, else_block = else_fn(), b.block
        merged = []
        for a, c in zip(then_values, else_values, strict=True):
            phi = b.phi(a.type)
            phi.add_incoming(a, then_block)
            phi.add_incoming(c, else_block)
            merged.append(phi)
        return merged


@contextlib.contextmanager
def _known(table: dict, value: ir.Value, fact: tuple) -> Iterator[None]:
    """Files `fact` under id(value) for the `with`, restoring what was there before."""
    saved = table.get(id(value))
    table[id(value)] = fact
    try:
        yield
    finally:
        if saved is None:
            del table[id(value)]
        else:
            table[id(value)] = saved


_ARITH = ("add", "sub", "mul", "sdiv", "ashr")
_CLAMPS = ("llvm.smin.i64", "llvm.smax.i64")
_UNBOUNDED = (-(1 << 63), 1 << 63)


def _clamp_range(name: str, ranges: list) -> tuple[int, int] | None:
    """The range of smin / smax of operands in `ranges` (None: unknown)."""
    if all(r is None for r in ranges):
        return None
    x, y = (r if r is not None else _UNBOUNDED for r in ranges)
    pick = min if name == "llvm.smin.i64" else max
    lo, hi = pick(x[0], y[0]), pick(x[1] - 1, y[1] - 1) + 1
    return None if (lo, hi) == _UNBOUNDED or lo <= _UNBOUNDED[0] or hi >= _UNBOUNDED[1] else (lo, hi)


def _trunc_div(x: int, d: int) -> int:
    """x / d rounded toward zero (LLVM's sdiv), d > 0."""
    return x // d if x >= 0 else -(-x // d)
