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


# (symbol pattern, Fortran integer type): numpy's scipy-openblas is ILP64 with prefixed and
# suffixed names; other builds export the plain Fortran names.
FORTRAN_SYMBOLS = (("scipy_{}_64_", ctypes.c_int64), ("{}_64_", ctypes.c_int64),
                   ("scipy_{}_", ctypes.c_int32), ("{}_", ctypes.c_int32))


@functools.cache
def fortran(name: str):
    """(BLAS/LAPACK routine `name` of numpy's OpenBLAS, e.g. "sgemm", "spotrf", through its
    Fortran interface; the integer type it takes), or None where it is not there."""
    lib = openblas()
    for pattern, int_type in FORTRAN_SYMBOLS if lib is not None else ():
        fn = getattr(lib, pattern.format(name), None)
        if fn is not None:
            fn.restype = None
            return fn, int_type
    return None
