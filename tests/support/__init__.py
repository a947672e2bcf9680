"""Shared test support (no tests here).

- hlo: building modules (Builder, one-op text templates unary/binary/nary, run_passes);
- golden: FileCheck-style checks, bit-exact result comparison, the golden pass-case files;
- values: edge/random values per type, comparisons with tolerances or bit for bit;
- kernels: CPU kernels without a bundle (emit, JIT-load, call on numpy arrays);
- bundles: bundles built exactly as `hloc compile` builds them, loaded on a runtime;
- run: compare_with_interpreter, the one "compile, run, compare" runner for every backend;
- buffers, shapes: checks for buffer assignment; builders for shape-inference tests.
"""
