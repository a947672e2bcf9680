"""The default HLO pass pipelines, per target and -O level. Reading the compiler starts here.

Each pipeline is a spec string (see spec.py). Passes not yet registered in this build are a
hard error when the pipeline is built, never silently skipped.

The native targets follow XLA CPU's order: flatten calls, expand ops the code generators do
not emit directly, put dots in their one Gemm form, move narrow-float arithmetic to f32/f16,
simplify, assign layouts, then fuse. Copy insertion, scheduling and buffer assignment run after
these passes, as their own compile stages.
"""

from __future__ import annotations

from ..errors import InputError
from .base import lookup_pass
from .spec import PassItem, parse_spec

# XLA CPU's evaluation order for scans and long float reductions (so values match its rounding):
# reduce-window-rewriter makes scans blocks of 16 plus a scan of their totals (O(n), not O(n²));
# tree-reduction-rewriter sums long float reductions in windows of 32 first.
_ORDER = ["reduce-window-rewriter", "tree-reduction-rewriter"]
# XLA's simplifier, at every level, divides by a constant as a multiply by its reciprocal
# (after float normalization: bf16 divisions by then run in f32).
_XLA_ROUNDING = ["divide-by-constant", "divide-by-broadcast"]
# The passes that change values on purpose, towards XLA CPU's (every other pass is exact).
XLA_NUMERICS = [*_ORDER, *_XLA_ROUNDING]
# Required on every target: flatten calls, XLA's orders and rounding, drop dead code.
_REQUIRED = ["call-inliner", *XLA_NUMERICS, "dce"]

# Cleanup that every optimizing level runs to a fixpoint.
_SIMPLIFY = "fixpoint(algebraic-simplifier,tuple-simplifier,constant-folding,dce)"
_CONTROL_FLOW = ["while-loop-simplifier", "conditional-simplifier"]

# Native targets, -O0: only what correct code generation needs.
#   expanders: ops the elemental emitters do not implement (select-and-scatter and erf are
#     emitted natively, as XLA GPU does, so they are not expanded), and XLA's orders (_ORDER);
#   dot-canonicalizer: every dot becomes [B,M,K] x [B,K,N], the one Gemm form backends take;
#   float-normalization: bf16/f8 arithmetic runs in f32/f16 exactly as XLA CPU runs it, then
#     divisions by constants as XLA's simplifier leaves them;
#   layout-assignment: row-major buffers, the entry computation layout at the edges.
_EXPAND = ["rng-bit-generator-expander", "logistic-expander", "batch-norm-expander",
           "comparison-expander", *_ORDER]
_LOWER = ["dot-canonicalizer", "float-normalization", *_XLA_ROUNDING]
_NATIVE_O0 = ["call-inliner", *_EXPAND, *_LOWER, "dce", "layout-assignment"]
# -O1 adds simplification (then re-canonicalizes dots the simplifier may have rebuilt), and
# makes reshapes/transposes that move no element bitcasts (free: they share their buffer).
_NATIVE_O1 = ["call-inliner", *_EXPAND, *_LOWER, _SIMPLIFY, "cse", "dot-canonicalizer", "dce",
              "layout-assignment", "bitcast-reshapes"]
# -O2 adds loop/branch simplification and fusion (loop, reduction input, dot epilogue, and
# an in-place update with the producer of its update).
# The while-loop simplifier runs again after layout assignment: a transpose that only
# relabelled a jax layout ({0,1}) is real work once buffers are row-major, and hoisted when
# the loop does not change its operand (`x @ w.T` in a scan body).
_NATIVE_O2 = ["call-inliner", *_EXPAND, *_LOWER, _SIMPLIFY, *_CONTROL_FLOW, "cse", _SIMPLIFY,
              "dot-canonicalizer", "dce", "layout-assignment", "while-loop-simplifier",
              "fusion", "update-fusion", "bitcast-reshapes", "dce"]
# -O3 fuses bigger kernels and merges sibling fusions that read the same operand.
_NATIVE_O3 = ["call-inliner", *_EXPAND, *_LOWER, _SIMPLIFY, *_CONTROL_FLOW, "cse", _SIMPLIFY,
              "dot-canonicalizer", "dce", "layout-assignment", "while-loop-simplifier",
              "fusion{max-ops=1024,duplicate=8}",
              "multi-output-fusion", "update-fusion", "bitcast-reshapes", "dce"]


def _cpu(pipeline: list[str]) -> list[str]:
    """A native pipeline with conv-phases before layout assignment: the CPU runtime multiplies
    every tap of a base-dilated input, holes included, so transposed convolutions are split
    into one convolution per output phase. CUDA's loop kernel skips the holes itself
    (windows.TapSequence) and cuDNN takes the dilated form. And with topk-rewriter, as XLA
    CPU's pipeline has: a sort that only feeds its first k becomes a TopK custom call, which
    the CPU back end computes by selection. After layout assignment (it sizes dots by their
    layouts), bf16-dot-operands: the CPU GEMM multiplies bf16 operands itself."""
    at = pipeline.index("layout-assignment")
    return _cpu_lowering([*pipeline[:at], "topk-rewriter", "conv-phases", pipeline[at],
                          "bf16-dot-operands", *pipeline[at + 1:]])


def _cpu_lowering(pipeline: list[str]) -> list[str]:
    """The CPU rewrites every level needs: a triangular-solve becomes jax's LAPACK trsm call
    (the CPU back end has no other native form of the opcode)."""
    at = pipeline.index("layout-assignment")
    return [*pipeline[:at], "triangular-solve-rewriter", *pipeline[at:]]


# Dots of at most this many multiply-adds read a dynamic-slice operand in their own kernel on
# CUDA (fusion's `dot-slices`): a loop step's slice of its input then needs no launch.
CUDA_DOT_SLICES = 1 << 21


def _gpu_order(pipeline: list[str]) -> list[str]:
    """A native pipeline without XLA CPU's tree of 32s for reductions: GPU reduction kernels sum
    in their own parallel order (warp shuffles, per-block partials), as XLA GPU's do, and the
    tree would only split one fast kernel into two slower ones."""
    return [item for item in pipeline if item != "tree-reduction-rewriter"]


def _cuda(pipeline: list[str]) -> list[str]:
    """A native pipeline whose fusion lets small dots read dynamic slices (XLA's GPU backend
    feeds such a slice to cuBLAS by address; hloc's GEMM kernel reads it in place, and loop
    bodies, where these slices live, run hloc's kernels anyway under conditional nodes), and
    whose update-fusion lets a small dot's GEMM kernel write its value into an in-place
    update too (a scan's stacked outputs)."""
    out = []
    for item in pipeline:
        if item == "fusion":
            item = f"fusion{{dot-slices={CUDA_DOT_SLICES}}}"
        elif item.startswith("fusion{"):
            item = f"{item[:-1]},dot-slices={CUDA_DOT_SLICES}}}"
        elif item == "update-fusion":
            item = f"update-fusion{{dot-epilogues={CUDA_DOT_SLICES}}}"
        out.append(item)
    return out


PIPELINES: dict[tuple[str, int], list[str]] = {
    # The interpreter executes HLO directly: optimizations only shrink the work, and fusion
    # (evaluated through the fused computation) checks that fused modules keep their values.
    ("interpreter", 0): _REQUIRED,
    ("interpreter", 1): _REQUIRED + [_SIMPLIFY, "cse", "dce"],
    ("interpreter", 2): _REQUIRED + [_SIMPLIFY, *_CONTROL_FLOW, "cse", _SIMPLIFY, "fusion",
                                     "update-fusion", "dce"],
    ("interpreter", 3): _REQUIRED + [_SIMPLIFY, *_CONTROL_FLOW, "cse", _SIMPLIFY,
                                     "fusion{max-ops=1024,duplicate=8}", "multi-output-fusion",
                                     "update-fusion", "dce"],
    ("cpu", 0): _cpu_lowering(_NATIVE_O0),
    ("cpu", 1): _cpu(_NATIVE_O1),
    ("cpu", 2): _cpu(_NATIVE_O2),
    ("cpu", 3): _cpu(_NATIVE_O3),
    # CUDA uses the native pipelines (without conv-phases or the tree of 32s for reductions):
    # the same numerics otherwise (XLA CPU is the reference) and the same fusion kinds; the GPU
    # backend maps kInput fusions to reduction kernels.
    ("cuda", 0): _gpu_order(_NATIVE_O0),
    ("cuda", 1): _gpu_order(_NATIVE_O1),
    ("cuda", 2): _cuda(_gpu_order(_NATIVE_O2)),
    ("cuda", 3): _cuda(_gpu_order(_NATIVE_O3)),
}


def pipeline_spec(target: str, level: int) -> str:
    """The default pipeline for a target and -O level, as a spec string."""
    key = (target, level)
    if key not in PIPELINES:
        key = ("interpreter", level)
    return ",".join(PIPELINES[key])


def default_pipeline(target: str, level: int) -> list[PassItem]:
    return parse_spec(pipeline_spec(target, level), source=f"default pipeline for {target} -O{level}")


def available(name: str) -> bool:
    return lookup_pass(name) is not None


def check_disabled(names) -> frozenset[str]:
    """Validate --disable-pass names against the registry."""
    out = set()
    for n in names:
        cls = lookup_pass(n)
        if cls is None:
            raise InputError(f"--disable-pass: unknown pass '{n}' (see `hloc passes`)")
        out.add(cls.name)
    return frozenset(out)
