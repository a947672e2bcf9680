"""Small FFTs on the GPU: one thread per output element, each a direct DFT sum.

A thread computes its element as the nested sum of elemental/dft.py (`direct_element`: the
transformed axes' passes nested, twiddles from constant tables, f64 accumulation), reading
the operand straight from global memory. An fft thunk becomes this kernel while each element
sums at most MAX_TERMS operand elements; bigger transforms (and anything the plan does not
handle) stay HostCompute thunks with a note saying why.
"""

from __future__ import annotations

from ...errors import UnsupportedError
from ...thunks import thunks as nt
from ...thunks.base import Thunk, ThunkKind
from ...thunks.gpu import HostCompute
from ...thunks.thunks import Sequential
from ..elemental.dft import direct_element, plan_of
from ..elemental.memory import store_element
from .build import Planner, converts
from .kernel import KernelBuild, variant
from .loop import loop_launch, physical_index
from .parts import Part

# Each term is f64 work, which many GPUs run at a small fraction of their f32 rate: past
# about a thousand terms per element the host's O(n log n) transform plus the copies wins.
MAX_TERMS = 1024


@converts(ThunkKind.FFT)
def convert_fft(p: Planner, thunk: nt.Fft, stream: int) -> Thunk:
    instr = p.instr(thunk.name)
    operands, outputs = thunk.reads(), thunk.writes()
    try:
        plan = plan_of(instr)
    except UnsupportedError as e:
        return _on_host(p, thunk, str(e))
    if plan.direct_work() > MAX_TERMS:
        return _on_host(p, thunk, f"{plan.describe()} sums {plan.direct_work()} terms per "
                                  f"element, above the DFT kernel's {MAX_TERMS}")
    if plan.empty:
        return Sequential(thunk.name, ())
    launch = loop_launch(instr.shape.num_elements, 1, p.target)
    part = Part("fft", (0,), launch, block_threads=launch.block[0])
    made = p.launches(thunk.name, instr, [part], operands + outputs, stream)
    if made is None:  # launches() noted why
        return HostCompute(thunk.name, instr.opcode.value, operands, outputs)
    return made


def _on_host(p: Planner, thunk: nt.Fft, reason: str) -> Thunk:
    operands, outputs = thunk.reads(), thunk.writes()
    p.notes.append(f"%{thunk.name} (fft) runs on the host: {reason}")
    return HostCompute(thunk.name, "fft", operands, outputs)


@variant("fft")
def emit_fft(kb: KernelBuild) -> None:
    fft = kb.comp.root
    plan = plan_of(fft)
    shape = kb.output_shapes[0]
    b = kb.b
    linear = b.add(b.mul(kb.ctaid(), kb.ntid()), kb.tid())
    with b.if_then(b.icmp_unsigned("<", linear, kb.i64(shape.num_elements))):
        index = physical_index(kb, shape, linear)
        value = direct_element(kb.ctx, plan, kb.gen(fft.operands[0]), index)
        store_element(kb.ctx, shape, kb.outputs[0], index, value)
