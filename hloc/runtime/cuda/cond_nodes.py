"""Conditional graph nodes on a GPU: while loops and conditionals decided on the device.

Inside a stream capture (hloc.runtime.cuda.graphs), a loop becomes a WHILE node and a
conditional a SWITCH node. Each node has a handle, a value the driver reads when the node
is reached; a one-thread kernel queued just before it (and, for a loop, again at the end of
its body, after the condition) copies the predicate or maps the selector into the handle
through `cudaGraphSetConditional`, which ptxas and the driver resolve as they do `vprintf`.
Those two kernels are the runtime's own PTX, JIT-compiled by the driver the first time an
executable needs them (nothing of the bundle's code runs in them). The bodies are captured
into the node's child graphs on a stream of their own per nesting level.

The switch rule, applied by `hloc_set_switch` and modelled by `switch_index` (which the
emulator runs): a pred selects branch 0 when true, branch 1 when false; an s32 index
outside [0, branches) selects the last branch (XLA's rule).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence

# Driver version (cuDriverGetVersion) from which capture-time conditional nodes of every
# type exist: WHILE and IF came with 12.4, SWITCH with 12.8.
MIN_DRIVER = 12080
# cuda-bindings major version whose call signatures this module uses (13: capture info with
# edge data, cuGraphAddNode and cuStreamUpdateCaptureDependencies taking it); older bindings
# keep the host-driven plan.
MIN_BINDINGS = 13


def bindings_major() -> int:
    """The installed cuda-bindings' major version (0 when unknown)."""
    try:
        from cuda import bindings

        return int(str(bindings.__version__).split(".")[0])
    except (ImportError, AttributeError, ValueError):
        return 0


def supported(driver_version: int) -> bool:
    """Whether this driver and these bindings can build conditional nodes as this module
    does (the H200 run: driver 13.0, cuda-bindings 13.3)."""
    return driver_version >= MIN_DRIVER and bindings_major() >= MIN_BINDINGS

# The end of both kernels: the handle (%h) <- %value.
_SET_HANDLE = """  {
    .param .b64 arg0;
    .param .b32 arg1;
    st.param.b64 [arg0], %h;
    st.param.b32 [arg1], %value;
    call.uni cudaGraphSetConditional, (arg0, arg1);
  }
  ret;
}"""

SET_CONDITION_PTX = r"""
.version 7.0
.target sm_50
.address_size 64
.extern .func cudaGraphSetConditional(.param .b64 handle, .param .b32 value);

// set_while(handle, pred*): the handle <- (*pred != 0)
.visible .entry hloc_set_while(.param .u64 handle, .param .u64 pred)
{
  .reg .pred %p;
  .reg .b16 %byte;
  .reg .b32 %value;
  .reg .b64 %h, %addr;
  ld.param.u64 %h, [handle];
  ld.param.u64 %addr, [pred];
  cvta.to.global.u64 %addr, %addr;
  ld.global.u8 %byte, [%addr];
  setp.ne.u16 %p, %byte, 0;
  selp.u32 %value, 1, 0, %p;
@SET_HANDLE@

// set_switch(handle, selector*, is_pred, branches): the handle <- the branch to run
.visible .entry hloc_set_switch(.param .u64 handle, .param .u64 selector,
                                .param .u32 is_pred, .param .u32 branches)
{
  .reg .pred %pred_sel, %low, %high;
  .reg .b16 %byte;
  .reg .b32 %flag, %count, %value, %last;
  .reg .b64 %h, %addr;
  ld.param.u64 %h, [handle];
  ld.param.u64 %addr, [selector];
  cvta.to.global.u64 %addr, %addr;
  ld.param.u32 %flag, [is_pred];
  ld.param.u32 %count, [branches];
  setp.ne.u32 %pred_sel, %flag, 0;
  @%pred_sel bra FROM_PRED;
  ld.global.s32 %value, [%addr];
  setp.lt.s32 %low, %value, 0;
  setp.ge.s32 %high, %value, %count;
  or.pred %low, %low, %high;
  add.s32 %last, %count, -1;
  selp.b32 %value, %last, %value, %low;
  bra.uni SET;
FROM_PRED:
  ld.global.u8 %byte, [%addr];
  setp.ne.u16 %low, %byte, 0;
  selp.u32 %value, 0, 1, %low;
SET:
@SET_HANDLE@
""".replace("@SET_HANDLE@", _SET_HANDLE)


def switch_index(raw: bytes, is_pred: bool, branches: int) -> int:
    """The branch `hloc_set_switch` selects for the selector's bytes (the switch rule)."""
    if is_pred:
        return 0 if raw[0] else 1
    index = int.from_bytes(raw[:4], "little", signed=True)
    return index if 0 <= index < branches else branches - 1


class ConditionalNodes:
    """A CudaDevice's conditional nodes: the set kernels and the body streams."""

    def __init__(self, device):
        self.device = device
        self.cu = device.cu
        self._functions: dict[str, object] = {}
        self._body_streams: list = []

    def _function(self, name: str):
        from .driver import check

        if not self._functions:
            module = check(self.cu, self.cu.cuModuleLoadData(SET_CONDITION_PTX.encode() + b"\0"),
                           "loading the conditional-node kernels")
            self._functions = {n: check(self.cu, self.cu.cuModuleGetFunction(module, n.encode()),
                                        f"kernel {n}")
                               for n in ("hloc_set_while", "hloc_set_switch")}
        return self._functions[name]

    def _launch_set(self, name: str, *values: ctypes._SimpleCData) -> None:
        from .driver import check

        params = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        check(self.cu, self.cu.cuLaunchKernel(self._function(name), 1, 1, 1, 1, 1, 1, 0,
                                              self.device.current_stream(),
                                              ctypes.addressof(params), 0), f"launching {name}")

    def _node(self, kind, size: int, set_handle: Callable[[int], None]) -> tuple[int, list]:
        """A conditional node after the work captured so far on the current stream, its
        handle set by `set_handle(handle)`; later captured work follows it. Its handle and
        body graphs."""
        from .driver import check

        cu = self.cu
        stream = self.device.current_stream()
        graph = check(cu, cu.cuStreamGetCaptureInfo(stream), "cuStreamGetCaptureInfo")[2]
        context = check(cu, cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
        handle = check(cu, cu.cuGraphConditionalHandleCreate(graph, context, 0, 0),
                       "cuGraphConditionalHandleCreate")
        set_handle(int(handle))
        _, _, graph, deps, _, count = check(cu, cu.cuStreamGetCaptureInfo(stream),
                                            "cuStreamGetCaptureInfo")
        params = cu.CUgraphNodeParams()
        params.type = cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
        params.conditional.handle = handle
        params.conditional.type = kind
        params.conditional.size = size
        params.conditional.ctx = context
        node = check(cu, cu.cuGraphAddNode(graph, list(deps[:count]) if count else None, None,
                                           count, params), "adding a conditional node")
        flags = cu.CUstreamUpdateCaptureDependencies_flags.CU_STREAM_SET_CAPTURE_DEPENDENCIES
        check(cu, cu.cuStreamUpdateCaptureDependencies(stream, [node], None, 1, flags),
              "cuStreamUpdateCaptureDependencies")
        return int(handle), [params.conditional.phGraph_out[i] for i in range(size)]

    def _capture_body(self, graph, fill: Callable[[], None]) -> None:
        """Capture what `fill` queues into `graph`, on the body stream of this depth."""
        from .driver import check

        cu = self.cu
        depth = len(self.device.inner_streams)
        if depth == len(self._body_streams):
            self._body_streams.append(check(cu, cu.cuStreamCreate(0), "cuStreamCreate"))
        stream = self._body_streams[depth]
        mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        check(cu, cu.cuStreamBeginCaptureToGraph(stream, graph, None, None, 0, mode),
              "capturing a conditional node's body")
        self.device.inner_streams.append(stream)
        try:
            fill()
        finally:
            self.device.inner_streams.pop()
        check(cu, cu.cuStreamEndCapture(stream), "ending a conditional node's body")

    def while_node(self, condition: Callable[[], None], body: Callable[[], None],
                   predicate: int) -> None:
        """condition; WHILE (*predicate) { body; condition }: `predicate` the pred's address."""
        cu = self.cu
        pred = ctypes.c_uint64(predicate)

        def set_handle(handle: int) -> None:
            self._launch_set("hloc_set_while", ctypes.c_uint64(handle), pred)

        condition()
        handle, (graph,) = self._node(cu.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_WHILE, 1,
                                      set_handle)

        def looped() -> None:
            body()
            condition()
            set_handle(handle)

        self._capture_body(graph, looped)

    def switch_node(self, branches: Sequence[Callable[[], None]], selector: int,
                    is_pred: bool) -> None:
        """Run the branch the switch rule picks for the selector at address `selector`."""
        cu = self.cu
        values = (ctypes.c_uint64(selector), ctypes.c_uint32(int(is_pred)),
                  ctypes.c_uint32(len(branches)))
        _, graphs = self._node(
            cu.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_SWITCH, len(branches),
            lambda h: self._launch_set("hloc_set_switch", ctypes.c_uint64(h), *values))
        for graph, branch in zip(graphs, branches, strict=True):
            self._capture_body(graph, branch)

    def abort(self) -> None:
        """End the body captures a failure left open."""
        cu = self.cu
        self.device.inner_streams.clear()
        for stream in self._body_streams:
            err, status = cu.cuStreamIsCapturing(stream)
            if err == cu.CUresult.CUDA_SUCCESS and \
                    status != cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE:
                cu.cuStreamEndCapture(stream)
