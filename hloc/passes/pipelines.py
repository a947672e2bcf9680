"""The default HLO pass pipelines, per target and -O level. Reading the compiler starts here.

Each pipeline is a spec string (see spec.py). Passes not yet registered in this build are a
hard error when the pipeline is built, never silently skipped.
"""

from __future__ import annotations

from ..errors import InputError
from .base import lookup_pass
from .spec import PassItem, parse_spec

# Required for correctness on every target: flatten calls, drop dead code.
_REQUIRED = ["call-inliner", "dce"]

# Cleanup that every optimizing level runs to a fixpoint.
_SIMPLIFY = "fixpoint(algebraic-simplifier,tuple-simplifier,constant-folding,dce)"

PIPELINES: dict[tuple[str, int], list[str]] = {
    # The interpreter executes HLO directly: optimizations only shrink the work.
    ("interpreter", 0): _REQUIRED,
    ("interpreter", 1): _REQUIRED + [_SIMPLIFY, "cse", "dce"],
    ("interpreter", 2): _REQUIRED + [_SIMPLIFY, "while-loop-simplifier", "conditional-simplifier",
                                     "cse", _SIMPLIFY],
    ("interpreter", 3): _REQUIRED + [_SIMPLIFY, "while-loop-simplifier", "conditional-simplifier",
                                     "cse", _SIMPLIFY],
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
