"""Scheduling + buffer assignment time at growing module sizes (issue 5: 20k instructions in
under 5 s, near-linear growth), and temp bytes against XLA's buffer assignment (issue 16) for
every sample and benchmark case, compiled as `hloc compile` does (-O2, CPU). XLA's numbers are
recorded in samples/NAME.json and benchmarks/cases/xla_memory.json (benchmarks/xla_memory.py).

Times `hloc.plan.plan` (copy insertion, scheduling, alias analysis, liveness, buffer
assignment, thunk emission and CUDA stream assignment) on two module shapes: the synthetic
MLP-like DAG of benchmarks/synthetic.py, and a chain of while loops whose bodies update their
state in place and read it elsewhere (copy insertion and loop liveness at work).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from synthetic import build

from hloc.ir import Attrs, Computation, Literal, Module, Opcode, Shape, SliceDim
from hloc.plan import plan

SIZES = (2500, 5000, 10000, 20000)


def _loop(module: Module, k: int) -> tuple[Computation, Computation]:
    vec, s32 = Shape.array("f32", [64]), Shape.scalar("s32")
    state = Shape.tuple_of([s32, vec, vec])
    cond = Computation(f"cond{k}")
    p = cond.create(Opcode.PARAMETER, state, name="p", attrs=Attrs(parameter_number=0))
    i = cond.create(Opcode.GET_TUPLE_ELEMENT, s32, [p], attrs=Attrs(tuple_index=0))
    n = cond.create(Opcode.CONSTANT, s32, attrs=Attrs(literal=Literal.scalar(4, "s32")))
    cond.root = cond.create(Opcode.COMPARE, Shape.scalar("pred"), [i, n],
                            attrs=Attrs(comparison_direction="LT"))
    body = Computation(f"body{k}")
    q = body.create(Opcode.PARAMETER, state, name="q", attrs=Attrs(parameter_number=0))
    j = body.create(Opcode.GET_TUPLE_ELEMENT, s32, [q], attrs=Attrs(tuple_index=0))
    one = body.create(Opcode.CONSTANT, s32, attrs=Attrs(literal=Literal.scalar(1, "s32")))
    x = body.create(Opcode.GET_TUPLE_ELEMENT, vec, [q], attrs=Attrs(tuple_index=1))
    y = body.create(Opcode.GET_TUPLE_ELEMENT, vec, [q], attrs=Attrs(tuple_index=2))
    h = x
    for _ in range(8):
        h = body.create(Opcode.TANH, vec, [body.create(Opcode.ADD, vec, [h, y])])
    part = body.create(Opcode.SLICE, Shape.array("f32", [8]), [h],
                       attrs=Attrs(slice=(SliceDim(0, 8),)))
    y2 = body.create(Opcode.DYNAMIC_UPDATE_SLICE, vec, [y, part, j])
    j2 = body.create(Opcode.ADD, s32, [j, one])
    body.root = body.create(Opcode.TUPLE, state, [j2, h, y2])
    module.add_computation(cond)
    module.add_computation(body)
    return cond, body


def build_loops(num_instructions: int) -> Module:
    """A chain of while loops, about `num_instructions` instructions in all."""
    m = Module(f"loops_{num_instructions}")
    vec, s32 = Shape.array("f32", [64]), Shape.scalar("s32")
    entry = Computation("main")
    a = entry.create(Opcode.PARAMETER, vec, name="a", attrs=Attrs(parameter_number=0))
    zero = entry.create(Opcode.CONSTANT, s32, attrs=Attrs(literal=Literal.scalar(0, "s32")))
    x, y, k = a, a, 0
    while m.instruction_count() + len(entry.instructions) < num_instructions - 8:
        cond, body = _loop(m, k)
        init = entry.create(Opcode.TUPLE, cond.parameters[0].shape, [zero, x, y])
        w = entry.create(Opcode.WHILE, init.shape, [init], called=[body, cond])
        x = entry.create(Opcode.GET_TUPLE_ELEMENT, vec, [w], attrs=Attrs(tuple_index=1))
        y = entry.create(Opcode.GET_TUPLE_ELEMENT, vec, [w], attrs=Attrs(tuple_index=2))
        x = entry.create(Opcode.MULTIPLY, vec, [x, a])
        k += 1
    entry.root = entry.create(Opcode.TUPLE, Shape.tuple_of([vec, vec]), [x, y])
    m.add_computation(entry, entry=True)
    return m


ROOT = Path(__file__).resolve().parent.parent


def recorded_xla_temp() -> dict[str, tuple[Path, int]]:
    """name -> (model path, XLA temp bytes) for every sample and case with a number."""
    out = {}
    for meta_path in sorted((ROOT / "samples").glob("*.json")):
        pb, temp = meta_path.with_suffix(".pb"), json.loads(meta_path.read_text()).get("xla_temp_bytes")
        if pb.exists() and temp is not None:
            out[meta_path.stem] = (pb, temp)
    table = ROOT / "benchmarks" / "cases" / "xla_memory.json"
    if table.exists():
        for name, mem in json.loads(table.read_text())["cases"].items():
            out[f"case/{name}"] = (table.parent / f"{name}.pb", mem["temp_bytes"])
    return out


def memory_table() -> None:
    """hloc's temp bytes against XLA's, per module; the worst ratio last."""
    from hloc.frontend import load
    from hloc.passes import PassRunner
    from hloc.passes.pipelines import default_pipeline

    print("== temp bytes: hloc (-O2 cpu) vs XLA CPU buffer assignment ==")
    print(f"{'module':>26} {'hloc':>10} {'xla':>10} {'ratio':>6}")
    worst = 0.0
    for name, (path, xla) in recorded_xla_temp().items():
        module = load(str(path)).module
        PassRunner(default_pipeline("cpu", 2)).run(module)
        ours = plan(module).memory.temp_bytes
        ratio = (ours + 1) / (xla + 1)
        worst = max(worst, ratio)
        print(f"{name:>26} {ours:>10} {xla:>10} {ratio:>6.2f}")
    print(f"worst ratio {worst:.2f} (goal: <= 1.00)")


def main() -> None:
    memory_table()
    print("== hloc.plan.plan: copy insertion, schedule, assignment, thunks, streams ==")
    print(f"{'module':>8} {'instructions':>12} {'seconds':>8} {'us/instr':>9} {'temp bytes':>11}")
    for kind, builder in (("mlp", build), ("loops", build_loops)):
        for n in SIZES:
            m = builder(n)
            count = m.instruction_count()
            start = time.perf_counter()
            p = plan(m, target="cuda")
            dt = time.perf_counter() - start
            print(f"{kind:>8} {count:>12} {dt:>8.3f} {1e6 * dt / count:>9.1f} "
                  f"{p.memory.temp_bytes:>11}")


if __name__ == "__main__":
    main()
