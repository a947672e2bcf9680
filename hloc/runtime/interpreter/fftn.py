"""n-D FFTs as numpy's pocketfft computes them, with the scale factor typed.

numpy's transforms are gufuncs (`numpy.fft._pocketfft_umath`) taking the scale factor as an
operand. Where it is 1 (fft, rfft; the inverses with norm="forward") numpy passes the Python
int 1, and the gufunc's type resolution then picks its f64 loop for f32 data: every element
is cast to f64 and back, a complex64 transform of 48 x 40 x 36 taking 3.5 ms against 0.47 for
its inverse. Passing the factor in the data's precision runs the f32 loop, which is what XLA
CPU computes in (DUCC's f32 transforms), and gives its bits on the `fft` sample. The
transforms go axis by axis in numpy's order; an f64 transform, or a numpy without these
gufuncs, takes numpy's public functions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

try:  # numpy >= 2.0
    from numpy.fft import _pocketfft_umath as _pfu  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - older numpy
    _pfu = None

_FFT, _IFFT, _RFFT, _IRFFT = 0, 1, 2, 3
_NAMES = ("fft", "ifft", "rfft_n_even", "rfft_n_odd", "irfft")


def transform(kind: int, x: np.ndarray, lengths: Sequence[int]) -> np.ndarray:
    """XLA's FFT of `kind` (FFT, IFFT, RFFT, IRFFT) over the last len(lengths) axes."""
    axes = tuple(range(x.ndim - len(lengths), x.ndim))
    if not _typed(x):
        if kind == _FFT:
            return np.fft.fftn(x, axes=axes)
        if kind == _IFFT:
            return np.fft.ifftn(x, axes=axes)
        if kind == _RFFT:
            return np.fft.rfftn(x, s=lengths, axes=axes)
        return np.fft.irfftn(x, s=lengths, axes=axes)
    if kind in (_FFT, _IFFT):
        for axis in reversed(axes):
            x = _c2c(x, axis, forward=kind == _FFT)
        return x
    if kind == _RFFT:
        x = _r2c(x, axes[-1], lengths[-1])
        for axis in reversed(axes[:-1]):
            x = _c2c(x, axis, forward=True)
        return x
    for axis in axes[:-1]:
        x = _c2c(x, axis, forward=False)
    return _c2r(x, axes[-1], lengths[-1])


def _typed(x: np.ndarray) -> bool:
    """Whether `x` takes the typed f32 path (f32 or c64 data, numpy's gufuncs present)."""
    return (_pfu is not None and all(hasattr(_pfu, n) for n in _NAMES)
            and x.dtype in (np.float32, np.complex64))


def _apply(ufunc, x: np.ndarray, factor, axis: int, out: np.ndarray) -> np.ndarray:
    return ufunc(x, np.float32(factor), axes=[(axis,), (), (axis,)], out=out)


def _c2c(x: np.ndarray, axis: int, forward: bool) -> np.ndarray:
    out = np.empty(x.shape, np.complex64)
    if forward:
        return _apply(_pfu.fft, x, 1, axis, out)
    return _apply(_pfu.ifft, x, np.reciprocal(np.float32(x.shape[axis])), axis, out)


def _r2c(x: np.ndarray, axis: int, n: int) -> np.ndarray:
    out = np.empty(x.shape[:axis] + (n // 2 + 1,) + x.shape[axis + 1:], np.complex64)
    ufunc = _pfu.rfft_n_even if n % 2 == 0 else _pfu.rfft_n_odd
    return _apply(ufunc, x, 1, axis, out)


def _c2r(x: np.ndarray, axis: int, n: int) -> np.ndarray:
    out = np.empty(x.shape[:axis] + (n,) + x.shape[axis + 1:], np.float32)
    return _apply(_pfu.irfft, x, np.reciprocal(np.float32(n)), axis, out)
