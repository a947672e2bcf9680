"""Turn a CUDA kernel's LLVM IR into a host function that runs one thread up to its next
synchronization point (barrier or warp shuffle) — the core of `--device cuda-emulated`.

The kernel IR is exactly what goes to NVPTX; only the NVVM pieces change:
- special registers (tid/ntid/ctaid/nctaid) become arguments;
- the kernel's shared array becomes a per-block buffer argument;
- each `llvm.nvvm.barrier0` ends a *phase*: the function returns the number of the point
  where the thread stopped, and a later call resumes there (a `switch` on the state
  argument). The host runs one phase for every thread of the block before the next, which
  is loop fission at the barrier;
- a warp shuffle is two phases: every thread stores its value in an exchange slot, then
  every thread reads its source lane's slot (PTX `shfl.sync` lane rules), then continues;
- values that live across a point are spilled: every phi and every value used outside its
  block moves to the thread's frame (a per-thread byte array), as do allocas.
Kernels without synchronization only get the register/argument changes.

The emulated function: `i32 emu.K(ptr frame, i32 state, i32 tid.x, tid.y, tid.z,
ntid.x, ntid.y, ntid.z, ctaid.x, ctaid.y, ctaid.z, nctaid.x, nctaid.y, nctaid.z,
ptr shared, ptr exchange, ptr args)`, returning DONE (-1) or the point it stopped at.
`args` is an array of the kernel's pointer arguments.
"""

from __future__ import annotations

from llvmlite import ir
from llvmlite.ir import instructions as llvm_instructions

from ....util.record import dataclass
from ...elemental.types import I8, I32, PTR
from ..nvvm import AXES, BARRIER, SHARED_ADDRSPACE, SREG_KINDS, sreg_name

DONE = -1
SREG_ARGS = [(k, a) for k in SREG_KINDS for a in AXES]
_SHUFFLES = {f"llvm.nvvm.shfl.sync.{m}.{s}": m for m in ("down", "bfly", "idx", "up")
             for s in ("i32", "f32")}
DENORMALS = '"denormal-fp-math"="preserve-sign,preserve-sign"'


@dataclass(frozen=True)
class EmulatedKernel:
    """How to run one transformed kernel."""

    name: str  # the original kernel symbol
    step: str  # the emulated function's symbol
    frame_bytes: int
    shared_bytes: int
    sync_points: int  # 0: the kernel never synchronizes (one phase)


def shared_layout(module: ir.Module) -> dict[str, tuple[int, int]]:
    """name -> (offset, size) of every shared-memory global, as per-block buffer offsets."""
    layout, offset = {}, 0
    for g in module.globals.values():
        if isinstance(g, ir.GlobalVariable) and g.addrspace == SHARED_ADDRSPACE:
            size = int(g.value_type.count) if isinstance(g.value_type, ir.ArrayType) else 8
            offset = -(-offset // 16) * 16
            layout[g.name] = (offset, size)
            offset += size
    return layout


def _callee_name(instr) -> str | None:
    if isinstance(instr, ir.CallInstr) and isinstance(instr.callee, ir.Function):
        return instr.callee.name
    return None


def _is_value_instr(v) -> bool:
    return isinstance(v, ir.Instruction) and not isinstance(v.type, ir.VoidType)


class KernelTransform:
    """Rewrites one kernel function in place (it is replaced by `emu.NAME`)."""

    def __init__(self, module: ir.Module, kernel: ir.Function, target_data, shared):
        self.module = module
        self.kernel = kernel
        self.td = target_data
        self.shared = shared
        self.frame_bytes = 0
        self.points: list[ir.Block] = []
        self.fn = self._new_function()
        self.b = ir.IRBuilder(self.dispatch)
        self.arg = dict(zip(["frame", "state"] + [f"{k}.{a}" for k, a in SREG_ARGS]
                            + ["shared", "exchange", "args"], self.fn.args, strict=True))

    def _new_function(self) -> ir.Function:
        old = self.kernel
        fnty = ir.FunctionType(I32, [PTR, I32] + [I32] * 12 + [PTR, PTR, PTR])
        fn = ir.Function(self.module, fnty, f"emu.{old.name}")
        fn.scope = old.scope  # keep the body's value names unique
        roles = ["frame", "state"] + [f"{k}.{a}" for k, a in SREG_ARGS] + ["shared", "exchange",
                                                                          "args"]
        for arg, role in zip(fn.args, roles, strict=True):
            arg.name = f"emu.{role}"
        fn.args[0].add_attribute("noalias")
        fn.linkage = "internal"
        fn.attributes.add("alwaysinline")
        fn.attributes.add("nounwind")
        set.add(fn.attributes, DENORMALS)
        self.dispatch = ir.Block(fn, name="emu.dispatch")
        fn.blocks = [self.dispatch] + list(old.blocks)
        for blk in old.blocks:
            blk.parent = fn
        return fn

    # ---- driver ---------------------------------------------------------------------------
    def run(self) -> EmulatedKernel:
        self._replace_params()
        self._replace_sregs()
        self._replace_shared()
        self._split_all()
        if self.points:
            self._demote_phis()
            self._demote_values()
        self._replace_allocas()
        self._replace_returns()
        self._emit_dispatch()
        self._retire_kernel()
        for blk in self.fn.blocks:
            _clear_caches(blk)
        return EmulatedKernel(self.kernel.name, self.fn.name, -(-self.frame_bytes // 16) * 16,
                              self._shared_bytes(), len(self.points))

    def instructions(self):
        for blk in self.fn.blocks[1:]:
            yield from list(blk.instructions)

    def replace_everywhere(self, old, new) -> None:
        self.replace_all({old: new})

    def replace_all(self, mapping: dict) -> None:
        """Every use of each key of `mapping` becomes a use of its value, in one sweep of
        the function (a sweep per value made long kernels quadratic). No value may be a key."""
        if not mapping:
            return
        by_id = {id(old): (old, new) for old, new in mapping.items()}  # Constants hash by text
        for blk in self.fn.blocks:
            for instr in blk.instructions:
                for value in _used_values(instr):
                    found = by_id.get(id(value))
                    if found is not None:
                        replace_use(instr, *found)

    def _retire_kernel(self) -> None:
        self.kernel.blocks = []
        del self.module.globals[self.kernel.name]

    def _shared_bytes(self) -> int:
        return max((o + s for o, s in self.shared.values()), default=0)

    # ---- registers, parameters, shared memory ---------------------------------------------
    def _replace_params(self) -> None:
        loads = {}
        for i, old in enumerate(self.kernel.args):
            slot = self.b.gep(self.arg["args"], [ir.Constant(ir.IntType(64), i)], inbounds=True,
                              source_etype=PTR)
            loads[old] = self.b.load(slot, typ=PTR, name=f"emu.arg{i}")
        self.replace_all(loads)

    def _replace_sregs(self) -> None:
        by_name = {sreg_name(k, a): self.arg[f"{k}.{a}"] for k, a in SREG_ARGS}
        reads = {instr: by_name[name] for instr in self.instructions()
                 if (name := _callee_name(instr)) in by_name}
        self.replace_all(reads)
        for instr in reads:
            instr.parent.instructions.remove(instr)

    def _replace_shared(self) -> None:
        casts = {}
        for instr in self.instructions():
            if instr.opname != "addrspacecast" or not isinstance(instr.operands[0],
                                                                 ir.GlobalVariable):
                continue
            g = instr.operands[0]
            if g.addrspace != SHARED_ADDRSPACE:
                continue
            offset = self.shared[g.name][0]
            casts[instr] = self.b.gep(self.arg["shared"], [ir.Constant(ir.IntType(64), offset)],
                                      inbounds=True, source_etype=I8)
        self.replace_all(casts)
        for instr in casts:
            instr.parent.instructions.remove(instr)

    # ---- synchronization points -----------------------------------------------------------
    def _split_all(self) -> None:
        work = list(self.fn.blocks[1:])
        while work:
            blk = work.pop(0)
            for i, instr in enumerate(blk.instructions):
                name = _callee_name(instr)
                if name == BARRIER:
                    work.insert(0, self._split_barrier(blk, i))
                    break
                if name in _SHUFFLES:
                    work.insert(0, self._split_shuffle(blk, i, _SHUFFLES[name]))
                    break

    def split(self, blk: ir.Block, i: int, tail_name: str) -> ir.Block:
        """Move instructions after position i (and the terminator) to a new block; the
        instruction at i is removed; `blk` is left open."""
        tail = ir.Block(self.fn, name=tail_name)
        self.fn.blocks.insert(self.fn.blocks.index(blk) + 1, tail)
        moved = blk.instructions[i + 1:]
        for instr in moved:
            instr.parent = tail
        tail.instructions = moved
        tail.terminator = blk.terminator
        blk.instructions = blk.instructions[:i]
        blk.terminator = None
        for other in self.fn.blocks:
            for phi in other.instructions:
                if isinstance(phi, ir.PhiInstr):
                    phi.incomings = [(v, tail if b is blk else b) for v, b in phi.incomings]
        return tail

    def _yield(self, blk: ir.Block, resume: ir.Block) -> None:
        self.points.append(resume)
        self.b.position_at_end(blk)
        self.b.ret(ir.Constant(I32, len(self.points)))

    def _split_barrier(self, blk: ir.Block, i: int) -> ir.Block:
        tail = self.split(blk, i, "emu.after.barrier")
        self._yield(blk, tail)
        return tail

    def _split_shuffle(self, blk: ir.Block, i: int, mode: str) -> ir.Block:
        from .shuffle import emit_exchange_read, emit_exchange_write

        call = blk.instructions[i]
        _mask, value, lane, clamp = call.args
        tail = self.split(blk, i, "emu.after.shuffle")
        read = ir.Block(self.fn, name="emu.shuffle.read")
        self.fn.blocks.insert(self.fn.blocks.index(tail), read)
        self.b.position_at_end(blk)
        emit_exchange_write(self, value)
        self._yield(blk, read)
        self.b.position_at_end(read)
        result = emit_exchange_read(self, mode, value.type, lane, clamp)
        self._yield(read, tail)
        self.replace_everywhere(call, result)
        return tail

    # ---- spilling ------------------------------------------------------------------------
    def frame_slot(self, ty: ir.Type, count: int = 1) -> ir.Value:
        size = max(1, ty.get_abi_size(self.td)) * count
        align = max(8, ty.get_abi_alignment(self.td))
        offset = -(-self.frame_bytes // align) * align
        self.frame_bytes = offset + size
        with self.b.goto_block(self.dispatch):
            return self.b.gep(self.arg["frame"], [ir.Constant(ir.IntType(64), offset)],
                              inbounds=True, source_etype=I8)

    def _demote_phis(self) -> None:
        phis = [i for i in self.instructions() if isinstance(i, ir.PhiInstr)]
        slots = {}
        for phi in phis:
            slots[phi] = slot = self.frame_slot(phi.type)
            for value, pred in phi.incomings:
                self.b.position_before(pred.terminator)
                self.b.store(value, slot)
        loads = {}
        for phi in phis:
            blk = phi.parent
            blk.instructions.remove(phi)
            self.b.position_at_start(blk)
            loads[phi] = self.b.load(slots[phi], typ=phi.type)
        self.replace_all(loads)

    def _demote_values(self) -> None:
        users: dict[ir.Instruction, list[ir.Instruction]] = {}
        for instr in self.instructions():
            for op in instr.operands:
                if _is_value_instr(op) and op.parent is not self.dispatch:
                    users.setdefault(op, []).append(instr)
        for value, uses in users.items():
            outside = [u for u in dict.fromkeys(uses) if u.parent is not value.parent]
            if not outside or isinstance(value, ir.AllocaInstr):
                continue
            slot = self.frame_slot(value.type)
            self.b.position_after(value)
            self.b.store(value, slot)
            for user in outside:
                self.b.position_before(user)
                replace_use(user, value, self.b.load(slot, typ=value.type))

    def _replace_allocas(self) -> None:
        if not self.points:
            return  # one phase: the stack is private to the call and lives long enough
        slots = {}
        for instr in self.instructions():
            if not isinstance(instr, ir.AllocaInstr):
                continue
            count = int(instr.operands[0].constant) if instr.operands else 1
            slots[instr] = self.frame_slot(instr.allocated_type, count)
        self.replace_all(slots)
        for instr in slots:
            instr.parent.instructions.remove(instr)

    def _replace_returns(self) -> None:
        for instr in self.instructions():
            if isinstance(instr, ir.Ret) or instr.opname == "ret":
                if instr.operands:
                    continue  # a yield emitted above
                blk = instr.parent
                blk.instructions.remove(instr)
                blk.terminator = None
                self.b.position_at_end(blk)
                self.b.ret(ir.Constant(I32, DONE))

    def _emit_dispatch(self) -> None:
        self.b.position_at_end(self.dispatch)
        entry = self.fn.blocks[1]
        if not self.points:
            self.b.branch(entry)
            return
        switch = self.b.switch(self.arg["state"], entry)
        for k, blk in enumerate(self.points, start=1):
            switch.add_case(ir.Constant(I32, k), blk)


def _used_values(instr) -> list:
    """The values `instr` uses, where replace_use looks for them (a phi's incoming values
    are kept apart from its operands)."""
    if isinstance(instr, ir.PhiInstr):
        return [v for v, _ in instr.incomings]
    return list(instr.operands)


def replace_use(instr, old, new) -> None:
    """instr.replace_usage, plus the fields GEPs, extractvalue and insertvalue print from
    (llvmlite keeps them apart from the operand list)."""
    instr.replace_usage(old, new)
    if isinstance(instr, ir.GEPInstr):
        if instr.pointer is old:
            instr.pointer = new
        instr.indices = [new if i is old else i for i in instr.indices]
    elif isinstance(instr, (llvm_instructions.ExtractValue, llvm_instructions.InsertValue)):
        if instr.aggregate is old:
            instr.aggregate = new
        if getattr(instr, "value", None) is old:
            instr.value = new
    instr._clear_string_cache()


def _clear_caches(blk: ir.Block) -> None:
    blk._clear_string_cache()
    for instr in blk.instructions:
        instr._clear_string_cache()
