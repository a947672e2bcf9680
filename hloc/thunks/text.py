"""The readable forms of both thunk programs: `thunks.txt` and `gpu_thunks.txt` (and `hloc
inspect`). One tree printer serves both; each form has its own one-line thunk summary."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..buffers.assignment import Slice
from .base import Role, Thunk, field_roles
from .collectives import Collective, DeviceId
from .serialize import GPU_VERSION, VERSION
from .thunks import Conditional, Copy, Memset, ThunkProgram, While

if TYPE_CHECKING:  # the GPU kinds are imported where used: a CPU compile never needs them
    from .gpu import GpuProgram, Launch

Line = Callable[[Thunk], str]


def slice_text(s: Slice) -> str:
    return f"a{s.allocation}[{s.offset}:{s.offset + s.size}]"


def _lines(thunk: Thunk, line: Line, indent: str, out: list[str], tag: str = "") -> None:
    """`thunk`'s line, then its nested sequences (labelled for while and conditional)."""
    out.append(indent + tag + line(thunk))
    labelled: tuple[tuple[str, tuple[Thunk, ...]], ...]
    if isinstance(thunk, While):
        labelled = (("condition", thunk.condition), ("body", thunk.body))
    elif isinstance(thunk, Conditional):
        labelled = tuple((f"branch {b}", branch) for b, branch in enumerate(thunk.branches))
    else:
        for inner in (t for seq in thunk.nested() for t in seq):
            _lines(inner, line, indent + "  ", out)
        return
    for label, sequence in labelled:
        out.append(f"{indent}  {label}:")
        for inner in sequence:
            _lines(inner, line, indent + "    ", out)


def _sequence_lines(sequence, streams, line: Line, out: list[str]) -> None:
    for i, t in enumerate(sequence):
        _lines(t, line, "  ", out, f"[s{streams.streams[i]}] " if streams else "")


# ---- thunks.txt -----------------------------------------------------------------------------------

def _field_text(name: str, role: Role, value) -> str | None:
    if role in (Role.SEQUENCE, Role.BRANCHES) or name == "name":
        return None
    if role is Role.SLICE:
        return f"{name}={slice_text(value)}"
    if role is Role.SLICES:
        return f"{name}=(" + ", ".join(slice_text(s) for s in value) + ")"
    if value in ("", None, ()):
        return None
    return f"{name}={value}"


def _neutral_line(thunk: Thunk) -> str:
    parts = [p for f in field_roles(type(thunk))
             if not (f.optional and getattr(thunk, f.name) in ((), None))
             and (p := _field_text(f.name, f.role, getattr(thunk, f.name)))]
    return f"{thunk.kind} %{thunk.name} " + " ".join(parts)


def program_to_text(program: ThunkProgram) -> str:
    """The readable thunk schedule (thunks.txt, `hloc inspect`)."""
    out = [f"thunk program for module {program.module} (format version {VERSION})", "allocations:"]
    for a in program.allocations:
        extra = (f" parameter {a.parameter_number}{list(a.parameter_index) or ''}"
                 if a.kind == "parameter" else f" {a.constant}" if a.kind == "constant" else "")
        flags = " live-out" if a.maybe_live_out else ""
        out.append(f"  a{a.index}: {a.size} bytes {a.kind}{extra}{flags}")
    for n, i, s in program.parameters:
        out.append(f"parameter {n}{list(i) if i else ''} -> {slice_text(s)}")
    for i, s in program.outputs:
        out.append(f"output {list(i)} <- {slice_text(s)}")
    counts = ", ".join(f"{k}: {v}" for k, v in program.kind_counts().items())
    out.append(f"sequence ({counts}):")
    streams = program.streams
    _sequence_lines(program.sequence, streams, _neutral_line, out)
    if streams:
        out.append(f"streams: {streams.num_streams}, events: {len(streams.events)}, "
                   f"waits: {len(streams.waits)}")
        for t, e in streams.waits:
            out.append(f"  thunk {t} waits for event {e}")
    return "\n".join(out) + "\n"


# ---- gpu_thunks.txt -------------------------------------------------------------------------------

def _launch_line(t: Launch, resources: dict) -> str:
    from .gpu import ConvLaunch, GemmLaunch

    res = resources.get(t.kernel)
    extra = (f" regs={res['registers']} smem={res['shared_bytes']}"
             f" spills={res['spill_stores']}/{res['spill_loads']}" if res else "")
    gemm = ""
    if isinstance(t, GemmLaunch):
        blas = f" cublas-eligible {t.blas.text()}" if t.blas is not None else ""
        gemm = f" m={t.m} n={t.n} k={t.k} batch={t.batch}{blas}"
    elif isinstance(t, ConvLaunch) and t.dnn is not None:
        gemm = f" cudnn-eligible {t.dnn.text()}"
    return (f"{t.kind} %{t.name} @{t.kernel} [{t.variant}] grid={list(t.grid)} "
            f"block={list(t.block)}{gemm}{extra} args=("
            + ", ".join(slice_text(s) for s in t.args) + ")")


def _gpu_line(t: Thunk, resources: dict) -> str:
    from .gpu import HostCompute, Launch

    if isinstance(t, Launch):
        return _launch_line(t, resources)
    if isinstance(t, Copy):
        return f"copy %{t.name} {slice_text(t.source)} -> {slice_text(t.destination)}"
    if isinstance(t, Memset):
        return f"memset %{t.name} {slice_text(t.destination)} byte={t.byte}"
    if isinstance(t, HostCompute):
        return f"host %{t.name} ({t.opcode})"
    if isinstance(t, While):
        trip = f" trip_count={t.trip_count}" if t.trip_count is not None else ""
        return f"while %{t.name} pred={slice_text(t.predicate)}{trip}"
    if isinstance(t, Conditional):
        return f"conditional %{t.name} selector={slice_text(t.selector)}"
    if isinstance(t, Collective | DeviceId):
        return _neutral_line(t)
    return f"{t.kind} %{t.name}"


def gpu_program_to_text(p: GpuProgram, resources: dict | None = None) -> str:
    """The readable GPU schedule (gpu_thunks.txt); resources: one arch's ptxas report."""
    res = resources or {}
    counts = ", ".join(f"{k}: {v}" for k, v in p.kind_counts().items())
    out = [f"GPU program for module {p.module} (gpu thunks version {GPU_VERSION})",
           f"kernels: {len(p.kernels)}; thunks: {counts}", "host-to-device:"]
    for u in p.host_to_device:
        what = f"constant {u.constant}" if u.constant else f"parameter {u.number}{list(u.index) or ''}"
        out.append(f"  {what} -> {slice_text(u.slice)}{' (once)' if u.constant else ''}")
    out.append("main:")
    _sequence_lines(p.main, p.streams, lambda t: _gpu_line(t, res), out)
    if p.streams:
        for i, e in p.streams.waits:
            out.append(f"  thunk {i} waits for event {e}")
    out.append("device-to-host:")
    for o in p.device_to_host:
        out.append(f"  output {list(o.index)} <- {slice_text(o.slice)}")
    out += [f"note: {n}" for n in p.notes]
    return "\n".join(out) + "\n"

