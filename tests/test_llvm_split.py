"""llvm_split: a module compiled as partitions on several threads, one object each, loaded
together."""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

from hloc.codegen import llvm
from hloc.codegen.llvm_split import Partition, map_partitions, parse_items, split_module
from hloc.codegen.target import host_target


def _module_text(kernels: int, small: int = 0) -> str:
    """Kernels scale(x, n) -> x * (k+1) + helper(k); an internal helper shared by all, a
    driver calling every kernel, and an internal constant table. The first `small` kernels
    are marked optsize, as the CPU emitter marks kernels with little work."""
    lines = [f'target triple = "{host_target().triple}"',
             '@"table" = internal constant [4 x double] [double 1.0, double 2.0, double 3.0, double 4.0]',
             'declare double @"llvm.fabs.f64"(double %".1")',
             'define internal double @"helper"(i64 %".1") alwaysinline nounwind',
             "{",
             "entry:",
             '  %".3" = and i64 %".1", 3',
             '  %".4" = getelementptr [4 x double], ptr @"table", i64 0, i64 %".3"',
             '  %".5" = load double, ptr %".4"',
             '  %".6" = call double @"llvm.fabs.f64"(double %".5")',
             '  ret double %".6"',
             "}"]
    for k in range(kernels):
        attrs = "nounwind optsize" if k < small else "nounwind"
        lines += [f'define void @"k{k}"(ptr %".1", i64 %".2") {attrs}', "{", "entry:",
                  '  br label %"loop"', "loop:",
                  '  %"i" = phi i64 [0, %"entry"], [%"next", %"loop"]',
                  '  %"p" = getelementptr double, ptr %".1", i64 %"i"',
                  '  %"x" = load double, ptr %"p"',
                  f'  %"h" = call double @"helper"(i64 {k})',
                  f'  %"y" = fmul double %"x", {float(k + 1)!r}',
                  '  %"z" = fadd double %"y", %"h"',
                  '  store double %"z", ptr %"p"',
                  '  %"next" = add i64 %"i", 1',
                  '  %"c" = icmp slt i64 %"next", %".2"',
                  '  br i1 %"c", label %"loop", label %"done"', "done:", "  ret void", "}"]
    lines += ['define void @"driver"(ptr %".1", i64 %".2") nounwind', "{", "entry:"]
    lines += [f'  call void @"k{k}"(ptr %".1", i64 %".2")' for k in range(kernels)]
    lines += ["  ret void", "}"]
    return "\n".join(lines) + "\n"


def _check_driver(library) -> None:
    """The driver of _module_text(40, ...) computes what its 40 kernels should."""
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(library.address("driver"))
    x = np.linspace(-2, 2, 16)
    want = x.copy()
    for k in range(40):
        want = want * (k + 1) + float(k % 4 + 1)
    fn(x.ctypes.data, x.size)
    np.testing.assert_allclose(x, want, rtol=1e-12)


def test_partitions_hold_each_root_once_and_what_it_needs():
    text = _module_text(40)
    parts = split_module(text, 4)
    assert len(parts) == 4 and not any(p.scalar for p in parts)
    defined = []
    for part in parts:
        _, items = parse_items(part.text)
        names = [i.name for i in items if i.kind == "define"]
        defined += [n for n in names if n != "helper"]
        if any(n.startswith("k") for n in names):
            assert "helper" in names and any(i.name == "table" for i in items)
        llvm.parse(part.text)  # every partition is a valid module on its own
    assert sorted(defined) == sorted([f"k{k}" for k in range(40)] + ["driver"])


def test_small_or_unsplittable_modules_stay_whole():
    assert split_module(_module_text(2), 4) == [Partition(_module_text(2))]
    exported = _module_text(40, small=20).replace('@"table" = internal constant',
                                                  '@"table" = constant')
    assert split_module(exported, 4) == [Partition(exported)]


def test_a_global_defined_outside_is_declared_in_every_partition():
    """The runtime's stop flag, which native loops poll: a declaration, not a reason to
    compile the module whole."""
    text = _module_text(40).replace(
        'declare double @"llvm.fabs.f64"', '@"hloc_stop_flag" = external global i32\n'
        'declare double @"llvm.fabs.f64"')
    parts = split_module(text, 4)
    assert len(parts) == 4
    assert all('@"hloc_stop_flag" = external global i32' in p.text for p in parts)


def test_small_kernels_get_scalar_partitions_of_their_own():
    parts = split_module(_module_text(40, small=30), 4)
    assert [p.scalar for p in parts] == [False] * 4 + [True] * 2
    for part in parts:
        _, items = parse_items(part.text)
        roots = [i for i in items if i.kind == "define" and not i.internal]
        assert all(r.small == part.scalar for r in roots)


def test_light_kernels_get_light_partitions_of_their_own():
    """Small kernels named light form a third tier; the others stay scalar."""
    light = frozenset(f"k{k}" for k in range(10))
    parts = split_module(_module_text(40, small=30), 4, light=light)
    assert [(p.scalar, p.light) for p in parts] == ([(False, False)] * 4 + [(True, False)] * 2
                                                     + [(True, True)] * 2)
    for part in parts:
        _, items = parse_items(part.text)
        roots = {i.name for i in items if i.kind == "define" and not i.internal}
        assert (roots <= light) if part.light else not (roots & light)
    whole = _module_text(2, small=2)
    whole = whole[:whole.index('define void @"driver"')]
    assert split_module(whole, 4, light=frozenset({"k0", "k1"})) == [
        Partition(whole, scalar=True, light=True)]


def test_light_partitions_compute_the_same():
    """The light passes (no -O pipeline) leave the kernels' results as they were."""
    text = _module_text(40, small=30)
    light = frozenset(f"k{k}" for k in range(30))
    target = host_target()
    compiled = map_partitions(text, lambda p: llvm.compile_in_context(
        p.text, target, 2, vectorize=not p.scalar, light=p.light), 2, light=light)
    assert "alwaysinline" not in "".join(c.optimized_ir for c in compiled[-2:])  # inlined
    library = llvm.JitLibrary([c.object_code for c in compiled], target)
    _check_driver(library)


def test_scalar_partitions_are_not_vectorized():
    """The same kernel is vectorized in a big partition and not in a scalar one."""
    target = host_target()
    with_driver = _module_text(2, small=2)  # below the split size: one partition
    assert split_module(with_driver, 4) == [Partition(with_driver)]  # the driver is not small
    whole = with_driver[:with_driver.index('define void @"driver"')]
    assert split_module(whole, 4) == [Partition(whole, scalar=True)]
    ir = {}
    for scalar in (False, True):
        module = llvm.parse(whole)
        llvm.optimize(module, target, 2, vectorize=not scalar)
        ir[scalar] = str(module)
    assert re.search(r"<\d+ x double>", ir[False])  # any width: the host's (2, 4 or 8)
    assert "x double>" not in ir[True]


def _objects(text: str, threads: int) -> list[bytes]:
    target = host_target()
    return [c.object_code for c in map_partitions(
        text, lambda p: llvm.compile_in_context(p.text, target, 2, vectorize=not p.scalar),
        threads)]


@pytest.mark.parametrize("threads", [1, 2])
def test_partition_objects_load_together_and_compute(threads):
    """The driver in one object calls kernels defined in the others: one engine resolves
    them, and the internal helper each object has a copy of stays local to it."""
    text = _module_text(40, small=15)
    objects = _objects(text, threads)
    assert len(objects) == 6
    library = llvm.JitLibrary(objects, host_target())
    _check_driver(library)


def test_objects_are_the_same_for_any_thread_count():
    text = _module_text(40, small=15)
    assert _objects(text, 1) == _objects(text, 2) == _objects(text, 3)


def test_map_partitions_keeps_partition_order():
    text = _module_text(40, small=15)
    assert map_partitions(text, lambda p: p, 2) == split_module(text)
