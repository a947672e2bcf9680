"""`hlo-run --perturb THUNK[=REL]`: a deterministic error in one thunk's outputs after it runs.

Floats (and complex numbers, part by part) become x * (1 + REL) + REL * 1e-2 * max(max|x|, 1):
relative where x is large, and zeros change too. Integers get +1 (wrapping), predicates are
flipped. The error is added after every execution of the thunk (every loop iteration). For
a control-flow thunk, everything its nested thunks write is perturbed after it finishes.
"""

from __future__ import annotations

import difflib

import numpy as np

from ..errors import InputError
from ..ir import dtypes
from ..thunks.base import footprint
from ..util.record import dataclass
from .probe import Frame, Instrumented
from .thunk_io import Shape, thunk_io, typed

DEFAULT_REL = 1e-2


def parse_spec(spec: str) -> tuple[str, float]:
    """"NAME" or "NAME=REL" → (name, rel)."""
    name, _, rel = spec.partition("=")
    name = name.strip().lstrip("%")
    if not name:
        raise InputError(f"--perturb wants THUNK[=REL], got '{spec}'")
    try:
        return name, float(rel) if rel else DEFAULT_REL
    except ValueError:
        raise InputError(f"--perturb {spec}: '{rel}' is not a number") from None


def check_name(name: str, names, what: str = "--perturb") -> None:
    """InputError (exit 2) naming close thunk names when `name` is not a thunk."""
    names = list(names)
    if name in names:
        return
    close = difflib.get_close_matches(name, names, n=5, cutoff=0.5)
    hint = f"; did you mean: {', '.join(close)}" if close else ""
    raise InputError(f"{what}: no thunk named '{name}' in this bundle{hint} "
                     f"(`hloc inspect --json` lists them in thunk_list)")


def perturb_array(x: np.ndarray, rel: float) -> None:
    """Perturb `x` in place (see the module docstring)."""
    kind = dtypes.info(dtypes.from_numpy(x.dtype)).kind if x.dtype.kind != "V" else "other"
    if kind == "pred":
        np.logical_not(x, out=x)
    elif kind in ("int", "uint"):
        x[...] = x + np.ones((), x.dtype)
    elif kind == "complex":
        real = np.dtype(f"f{x.dtype.itemsize // 2}")
        perturb_array(x.view(real), rel)
    elif kind == "float":
        wide = x.astype(np.float64)
        finite = wide[np.isfinite(wide)]
        scale = max(float(np.abs(finite).max()) if finite.size else 0.0, 1.0)
        x[...] = (wide * (1 + rel) + rel * 1e-2 * scale).astype(x.dtype)
    else:
        x.view(np.uint8)[...] ^= 1


@dataclass
class Perturber:
    """The probe: after `name` runs, perturb what it wrote."""

    target: Instrumented
    name: str
    rel: float = DEFAULT_REL
    applied: int = 0

    def __post_init__(self) -> None:
        check_name(self.name, self.target.by_name)
        mod = self.target.module
        instructions = {i.name: i for c in mod.computations for i in c.instructions}
        neutral = self.target.neutral.get(self.name)
        io = None if neutral is None else thunk_io(neutral, instructions)
        if io is not None:
            self._outputs = list(io.outputs)
        else:  # control flow (or a GPU launch without a neutral twin): raw bytes it writes
            _, writes = footprint(self.target.by_name[self.name])
            self._outputs = [(Shape.array("u8", (s.size,)), s) for s in dict.fromkeys(writes)]

    def around(self, frame: Frame, run) -> None:
        run()
        if frame.thunk.name != self.name or (
                frame.parent is not None and frame.parent.thunk.name == self.name):
            return
        for shape, s in self._outputs:
            perturb_array(typed(self.target.raw(s), shape), self.rel)
        self.applied += 1
