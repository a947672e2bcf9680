"""Fusions of XLA's optimized sample modules as CPU kernels vs the interpreter.

Every kLoop/kInput (and kOutput/kCustom, whose dots the elemental emitter loops over) fusion
in samples/*.opt.pb and samples/ops/*.opt.pb is compiled as one kernel, run on random inputs
and compared with the interpreter evaluating the same fused computation. Run with `-s` for
the per-sample counts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hloc.codegen.cpu import KernelSpec
from hloc.codegen.target import host_target
from hloc.errors import UnsupportedError
from hloc.frontend.load import load
from hloc.ir import Opcode, dtypes

from .conftest import SAMPLES
from .support.kernels import Compiled, build_llvm_module, reference
from .support.values import assert_matches, random_values

pytestmark = pytest.mark.cpu


def _opt_samples() -> list[Path]:
    return sorted(SAMPLES.glob("*.opt.pb")) + sorted((SAMPLES / "ops").glob("*.opt.pb"))


def fusions(module):
    for comp in module.computations:
        for instr in comp.instructions:
            if instr.opcode == Opcode.FUSION:
                yield instr


def _inputs(spec: KernelSpec, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for shape in spec.operand_shapes:
        if not shape.is_array:
            raise UnsupportedError("tuple-shaped fusion operand")
        if dtypes.info(shape.element_type).is_complex:
            raise UnsupportedError("complex operand")
        vals = random_values(shape.dtype.name, shape.num_elements, rng)
        out.append(np.asarray(vals).reshape(shape.dims))
    return out


def _tolerance(spec: KernelSpec) -> float:
    if any(i.opcode in (Opcode.DOT, Opcode.CONVOLUTION) for i in spec.computation.instructions):
        return 5e-4  # sums of random products cancel: summation order shows
    bits = min(dtypes.info(s.element_type).bits for s in spec.output_shapes + spec.operand_shapes
               if dtypes.info(s.element_type).is_float) if any(
        dtypes.info(s.element_type).is_float for s in spec.output_shapes) else 32
    return {64: 1e-12, 32: 2e-5}.get(bits, 2e-2)


def _emittable(specs: list, target, unsupported: list[str]) -> list:
    """The (spec, inputs) pairs whose fusion the emitter accepts alone; the others' reasons
    go to `unsupported`."""
    kept = []
    for spec, inputs in specs:
        try:
            build_llvm_module([spec], target)
        except UnsupportedError as e:
            unsupported.append(f"{spec.instruction_names[0]}: {e}")
            continue
        kept.append((spec, inputs))
    return kept


def check_sample(path: Path) -> dict:
    """Counts for one sample: fusions, compiled, matched, unsupported (with reasons)."""
    module = load(path).module
    stats = {"fusions": 0, "compiled": 0, "matched": 0, "unsupported": []}
    specs = []
    target = host_target()
    for instr in fusions(module):
        stats["fusions"] += 1
        spec = KernelSpec.for_instruction(instr)
        try:
            specs.append((spec, _inputs(spec, seed=len(specs))))
        except UnsupportedError as e:
            stats["unsupported"].append(f"{instr.name}: {e}")
    try:
        compiled = Compiled([s for s, _ in specs], target=target) if specs else None
    except UnsupportedError:
        # The emitter rejected a fusion: each is emitted alone to find which, so one
        # unsupported fusion does not hide the others. LLVM compiles the rest once.
        specs = _emittable(specs, target, stats["unsupported"])
        compiled = Compiled([s for s, _ in specs], target=target) if specs else None
    if compiled is None:
        return stats
    stats["compiled"] = len(specs)
    for spec, inputs in specs:
        got = compiled.run(spec.name, inputs, chunks=2)
        want = reference(spec.computation, inputs)
        tol = _tolerance(spec)
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_matches(g, w, rtol=tol, atol=tol, what=f"{path.name} {spec.name} output {i}")
        stats["matched"] += 1
    return stats


@pytest.mark.parametrize("path", _opt_samples(), ids=lambda p: p.name[: -len(".opt.pb")])
def test_sample_fusions(path):
    stats = check_sample(path)
    print(f"\n{path.name}: {stats['fusions']} fusions, {stats['compiled']} compiled, "
          f"{stats['matched']} match; unsupported: {stats['unsupported']}")
    assert stats["matched"] == stats["compiled"]
    # Complex numbers are the documented gap; everything else must compile.
    assert all("complex" in u or "c64" in u or "c128" in u for u in stats["unsupported"]), \
        stats["unsupported"]
