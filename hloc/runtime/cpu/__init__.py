"""The native CPU runtime: loads a CPU bundle's object code and runs its thunk program.

How each thunk runs:
- Kernel: the generated kernel (split across a thread pool when it has enough work); a fusion
  around a dot/convolution is a composite of kernels and a BLAS product; runs of small
  thunks and whole loops of them are one call of a generated native driver.
- Gemm, Convolution: numpy.matmul (BLAS) on arena views, im2col for convolutions; other
  dtypes, grouped or input-dilated convolutions: the reference interpreter.
- Copy, Memset: numpy; While, Conditional, Sequential: host loops over their steps.
- Sort, Fft, CustomCall and the Kernel thunks kernels.json lists as "fallbacks" (complex
  numbers, select-and-scatter, stochastic-convert, rng, topk, cholesky, triangular-solve,
  get-dimension-size): the reference interpreter's implementation on arena views.

Importing this package registers the "cpu" device with hloc.runtime.
"""

from ..executable import register_device
from .executable import CpuExecutable

register_device("cpu", frozenset({"cpu"}))(CpuExecutable)

__all__ = ["CpuExecutable"]
