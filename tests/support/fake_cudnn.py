"""A fake libcudnn for tests without a GPU: the legacy-API entry points hloc binds
(hloc.runtime.cuda.cudnn.PROTOTYPES) as C function pointers, so every argument passes through
real ctypes marshalling, whose bodies record the descriptors and compute each call with the
emulator's host_conv from what C received (forward, backward data, backward filter). Its
backward heuristics answer as an H200's cuDNN 9 does: every algorithm NOT_SUPPORTED for the
descriptors host_conv.unsupported names (NHWC-strided activations with an NCHW filter)."""

from __future__ import annotations

import ctypes

import numpy as np

from hloc.runtime.cuda import cudnn
from hloc.runtime.cuda.host_conv import backward_data, backward_filter, convolve, unsupported
from hloc.thunks import gpu as gt


def _view(address, dims, strides) -> np.ndarray:
    """f32 elements at a C address through dims and element strides."""
    count = sum((d - 1) * s for d, s in zip(dims, strides, strict=True)) + 1
    flat = np.ctypeslib.as_array((ctypes.c_float * count).from_address(address))
    return np.lib.stride_tricks.as_strided(flat, dims, [4 * s for s in strides])


class HostCudnn:
    """libcudnn's legacy-API entry points hloc uses, as C function pointers (the prototypes of
    PROTOTYPES, so arguments pass through real ctypes marshalling) whose bodies record the
    descriptors and compute the convolution with host_conv from what C receives."""

    HANDLE = 0x5EED
    backward_algo = 1  # what a call must receive: ALGO_1, or ALGO_3 when determinism is off

    def __init__(self, memory):
        self.memory = memory
        self.descs: dict[int, dict] = {}
        self.streams: list[int] = []
        self.calls = 0
        self.transforms = 0
        self.fns = {}
        for name, (restype, argtypes) in cudnn.PROTOTYPES.items():
            proto = ctypes.CFUNCTYPE(restype, *argtypes)
            self.fns[name] = proto(getattr(self, "_" + name.removeprefix("cudnn")))
            setattr(self, name, self.fns[name])
        # A C string returned from a Python callback would leak: a static buffer instead.
        self.message = ctypes.create_string_buffer(b"CUDNN_STATUS_FAKE")
        self.fns["cudnnGetErrorString"] = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int)(
            lambda status: ctypes.addressof(self.message))

    def has(self, name):
        return True

    def fn(self, name):
        return self.fns[name]

    def _new(self, out, kind):
        key = 0x1000 + len(self.descs)
        self.descs[key] = {"kind": kind}
        out[0] = key
        return 0

    def _GetVersion(self):
        return 91000

    def _GetErrorString(self, status):
        raise AssertionError("replaced in __init__")

    def _Create(self, out):
        out[0] = self.HANDLE
        return 0

    def _SetStream(self, handle, stream):
        assert handle == self.HANDLE
        self.streams.append(stream or 0)
        return 0

    def _CreateTensorDescriptor(self, out):
        return self._new(out, "tensor")

    def _CreateFilterDescriptor(self, out):
        return self._new(out, "filter")

    def _CreateConvolutionDescriptor(self, out):
        return self._new(out, "conv")

    def _SetTensorNdDescriptor(self, desc, dtype, nd, dims, strides):
        self.descs[desc].update(dtype=dtype, dims=tuple(dims[:nd]), strides=tuple(strides[:nd]))
        return 0

    def _SetFilterNdDescriptor(self, desc, dtype, fmt, nd, dims):
        self.descs[desc].update(dtype=dtype, format=fmt, dims=tuple(dims[:nd]))
        return 0

    def _SetConvolutionNdDescriptor(self, desc, n, pad, stride, dilation, mode, compute):
        assert mode in (0, 1) and compute == 0  # CONVOLUTION or CROSS_CORRELATION, FLOAT
        self.descs[desc].update(pad=tuple(pad[:n]), stride=tuple(stride[:n]),
                                dilation=tuple(dilation[:n]), groups=1,
                                mode=("convolution", "cross_correlation")[mode])
        return 0

    def _SetConvolutionGroupCount(self, desc, groups):
        self.descs[desc]["groups"] = groups
        return 0

    def _SetConvolutionMathType(self, desc, math):
        self.descs[desc]["math"] = math
        return 0

    def _destroy(self, desc):
        return 0

    _DestroyTensorDescriptor = _DestroyFilterDescriptor = _destroy
    _DestroyConvolutionDescriptor = _destroy

    def _GetConvolutionNdForwardOutputDim(self, conv, x, w, nd, out):
        c, xd, wd = self.descs[conv], self.descs[x]["dims"], self.descs[w]["dims"]
        out[0], out[1] = xd[0], wd[0]
        for i in range(nd - 2):
            out[2 + i] = cudnn.out_size(xd[2 + i], wd[2 + i], c["pad"][i], c["stride"][i],
                                        c["dilation"][i])
        return 0

    def _GetConvolutionForwardAlgorithmMaxCount(self, handle, count):
        count[0] = 8
        return 0

    def _GetConvolutionForwardAlgorithm_v7(self, handle, x, w, conv, y, n, got, perfs):
        # Heuristic order: an FFT first (never chosen), one in the wrong math type, then one.
        return self._perfs(perfs, got, [(4, 0, 3, 1), (1, 0, 0, 1), (0, 0, 3, 1)])

    def _perfs(self, perfs, got, rows) -> int:
        for i, (algo, status, math, determinism) in enumerate(rows):
            perfs[i].algo, perfs[i].status, perfs[i].mathType = algo, status, math
            perfs[i].memory, perfs[i].determinism = 64, determinism
        got[0] = len(rows)
        return 0

    def _GetConvolutionForwardWorkspaceSize(self, handle, x, w, conv, y, algo, size):
        assert algo == 0
        size[0] = 64
        return 0

    def _TransformTensor(self, handle, alpha, xd, x, beta, yd, y):
        assert handle == self.HANDLE and ctypes.c_float.from_address(beta).value == 0.0
        X, Y = self.descs[xd], self.descs[yd]
        assert X["dims"] == Y["dims"] and X["dtype"] == Y["dtype"] == 0
        self.transforms += 1
        _view(y, Y["dims"], Y["strides"])[...] = _view(x, X["dims"], X["strides"])
        return 0

    def _ConvolutionForward(self, handle, alpha, xd, x, wd, w, conv, algo, space, space_size,
                            beta, yd, y):
        call, (xs, ws, ys) = self._run(handle, alpha, beta, algo, "forward", space,
                                       space_size, conv, (xd, x), (wd, w), (yd, y))
        ys[...] = convolve(call, xs, ws)
        return 0

    # Backward data and filter: heuristic order an FFT, a non-deterministic (atomic) algorithm,
    # then ALGO_1 (deterministic, full f32), the one that must be chosen; every one status
    # 3000 for a descriptor an H200 refuses.
    def _backward_perfs(self, perfs, got, rows, direction, x, w, y, conv) -> int:
        if unsupported(self._described(direction, x, w, y, conv)) is not None:
            rows = [(algo, cudnn.CUDNN_STATUS_NOT_SUPPORTED, math, det)
                    for algo, _, math, det in rows]
        return self._perfs(perfs, got, rows)

    def _GetConvolutionBackwardDataAlgorithmMaxCount(self, handle, count):
        count[0] = 8
        return 0

    def _GetConvolutionBackwardDataAlgorithm_v7(self, handle, w, dy, conv, dx, n, got, perfs):
        self._order(("filter", "tensor", "conv", "tensor"), w, dy, conv, dx)
        return self._backward_perfs(perfs, got, [(2, 0, 3, 1), (0, 0, 3, 0), (1, 0, 3, 1)],
                                    "backward_data", dx, w, dy, conv)

    def _GetConvolutionBackwardDataWorkspaceSize(self, handle, w, dy, conv, dx, algo, size):
        self._order(("filter", "tensor", "conv", "tensor"), w, dy, conv, dx)
        assert algo in (0, 1)  # never the FFT one
        size[0] = 64
        return 0

    def _ConvolutionBackwardData(self, handle, alpha, wd, w, dyd, dy, conv, algo, space,
                                 space_size, beta, dxd, dx):
        call, (xs, ws, ys) = self._run(handle, alpha, beta, algo, "backward_data", space,
                                       space_size, conv, (dxd, dx), (wd, w), (dyd, dy))
        if unsupported(call) is not None:
            return cudnn.CUDNN_STATUS_NOT_SUPPORTED
        xs[...] = backward_data(call, ys, ws)
        return 0

    def _GetConvolutionBackwardFilterAlgorithmMaxCount(self, handle, count):
        count[0] = 8
        return 0

    def _GetConvolutionBackwardFilterAlgorithm_v7(self, handle, x, dy, conv, dw, n, got, perfs):
        self._order(("tensor", "tensor", "conv", "filter"), x, dy, conv, dw)
        return self._backward_perfs(perfs, got, [(6, 0, 3, 1), (3, 0, 3, 0), (1, 0, 3, 1)],
                                    "backward_filter", x, dw, dy, conv)

    def _GetConvolutionBackwardFilterWorkspaceSize(self, handle, x, dy, conv, dw, algo, size):
        self._order(("tensor", "tensor", "conv", "filter"), x, dy, conv, dw)
        assert algo in (1, 3)  # never the FFT one
        size[0] = 64
        return 0

    def _ConvolutionBackwardFilter(self, handle, alpha, xd, x, dyd, dy, conv, algo, space,
                                   space_size, beta, dwd, dw):
        call, (xs, ws, ys) = self._run(handle, alpha, beta, algo, "backward_filter", space,
                                       space_size, conv, (xd, x), (dwd, dw), (dyd, dy))
        if unsupported(call) is not None:
            return cudnn.CUDNN_STATUS_NOT_SUPPORTED
        ws[...] = backward_filter(call, xs, ys)
        return 0

    def _order(self, kinds, *descs) -> None:
        assert tuple(self.descs[d]["kind"] for d in descs) == kinds

    def _described(self, direction, x, w, y, conv) -> gt.ConvCall:
        """The `direction` ConvCall that descriptors x, w, y (the forward convolution's
        roles) and conv describe (no slices)."""
        X, W, Y, C = (self.descs[d] for d in (x, w, y, conv))
        assert X["kind"] == Y["kind"] == "tensor" and W["kind"] == "filter"
        assert X["dtype"] == W["dtype"] == Y["dtype"] == 0 and C["kind"] == "conv"
        return gt.ConvCall(None, None, None, "f32", "f32", X["dims"], X["strides"], W["dims"],
                           ("NCHW", "NHWC")[W["format"]], Y["dims"], Y["strides"], C["pad"],
                           C["stride"], C["dilation"], C["groups"], mode=C["mode"],
                           direction=direction)

    def _run(self, handle, alpha, beta, algo, direction, space, space_size, conv, x, w, y):
        """The ConvCall C received (x, w, y: (descriptor, address)) and its three views;
        the call's fixed arguments checked (the chosen algorithm, its workspace, 1 and 0)."""
        want_algo = 0 if direction == "forward" else self.backward_algo
        assert handle == self.HANDLE and algo == want_algo and space and space_size == 64
        assert ctypes.c_float.from_address(alpha).value == 1.0
        assert ctypes.c_float.from_address(beta).value == 0.0
        call = self._described(direction, x[0], w[0], y[0], conv)
        assert self.descs[conv]["math"] == cudnn.CUDNN_FMA_MATH
        self.calls += 1
        return call, (_view(x[1], call.x_dims, call.x_strides),
                      _view(w[1], call.w_dims, cudnn.filter_strides(call)),
                      _view(y[1], call.y_dims, call.y_strides))


class StreamedMemory:
    """Emulated device memory that also reports a current stream, as CudaDevice does."""

    def __init__(self, memory):
        self.memory = memory
        self.stream = 0

    def address(self, s):
        return self.memory.address(s)

    def allocate(self, nbytes):
        return self.memory.allocate(nbytes)

    def stream_handle(self) -> int:
        return 1000 + self.stream
