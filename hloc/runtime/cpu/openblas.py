"""numpy's bundled OpenBLAS, reached through ctypes (the CPU runtime's BLAS tuning, and the
host BLAS that executes cuBLAS descriptors under cuda-emulated)."""

from __future__ import annotations

import ctypes
import functools
import glob
import os

import numpy as np


@functools.cache
def openblas():
    """numpy's bundled OpenBLAS library (scipy-openblas, in numpy.libs), or None."""
    base = os.path.dirname(os.path.dirname(np.__file__))
    for path in sorted(glob.glob(os.path.join(base, "numpy.libs", "*openblas*"))):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None
