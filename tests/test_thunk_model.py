"""The thunk model itself: kinds, reads()/writes(), nested sequences, walk, and the one
field-driven serializer (both program formats, and a kind the serializer has never seen)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

import pytest

from hloc.buffers.assignment import Allocation, Slice
from hloc.errors import InputError
from hloc.thunks import (
    THUNK_KINDS,
    Conditional,
    Convolution,
    Copy,
    CustomCall,
    Fft,
    Gemm,
    Kernel,
    Memset,
    Sequential,
    Sort,
    StreamAssignment,
    Thunk,
    ThunkKind,
    ThunkProgram,
    While,
    footprint,
    gpu_program_from_json,
    gpu_program_to_json,
    map_nested,
    program_from_json,
    program_to_json,
    walk,
)
from hloc.thunks.base import Slices
from hloc.thunks.gpu import (
    GPU_THUNK_KINDS,
    BlasCall,
    Download,
    GemmLaunch,
    GpuProgram,
    HostCompute,
    KernelRecipe,
    Launch,
    Upload,
)
from hloc.thunks.serialize import Format

S = [Slice(0, 16 * i, 16) for i in range(8)]


def _every_neutral_kind() -> tuple[Thunk, ...]:
    body = (Kernel("k", "add", "", (S[0], S[1]), (S[2],)), Memset("m", S[3], 7))
    return (
        Gemm("g", S[0], S[1], S[2], (1,), (0,)),
        Convolution("c", S[0], S[1], S[3]),
        Copy("cp", S[2], S[4]),
        While("w", (Kernel("cond", "compare", "", (S[0],), (S[5],)),), body, S[5], 3),
        Conditional("if", S[6], ((Sequential("call", body),), ()), True),
        Sort("s", (S[1],), (S[1],), "cmp", 0, True),
        Fft("f", S[0], S[7], 0, (8,)),
        CustomCall("cc", "lapack", (S[0],), (S[1], S[2]), 2, "cfg"),
    )


def test_kinds_are_an_enum_with_the_json_strings():
    assert {str(k) for k in THUNK_KINDS} == {
        "kernel", "gemm", "convolution", "copy", "memset", "while", "conditional", "sort",
        "fft", "custom-call", "sequential", "collective", "device-id"}
    assert set(THUNK_KINDS) | set(GPU_THUNK_KINDS) == set(ThunkKind)
    for table in (THUNK_KINDS, GPU_THUNK_KINDS):
        assert all(cls.kind is kind for kind, cls in table.items())
    assert f"host:{ThunkKind.CUSTOM_CALL}" == "host:custom-call"


def test_the_gpu_program_reuses_the_shared_thunks():
    for kind in (ThunkKind.COPY, ThunkKind.MEMSET, ThunkKind.WHILE, ThunkKind.CONDITIONAL,
                 ThunkKind.SEQUENTIAL, ThunkKind.COLLECTIVE, ThunkKind.DEVICE_ID):
        assert GPU_THUNK_KINDS[kind] is THUNK_KINDS[kind]


def test_reads_and_writes_of_every_kind():
    g, c, cp, w, cond, s, f, cc = _every_neutral_kind()
    assert (g.reads(), g.writes()) == ((S[0], S[1]), (S[2],))
    assert (c.reads(), c.writes()) == ((S[0], S[1]), (S[3],))
    assert (cp.reads(), cp.writes()) == ((S[2],), (S[4],))
    assert (w.reads(), w.writes()) == ((S[5],), ())
    assert (cond.reads(), cond.writes()) == ((S[6],), ())
    assert (s.reads(), s.writes()) == ((S[1],), (S[1],))
    assert (f.reads(), f.writes()) == ((S[0],), (S[7],))
    assert (cc.reads(), cc.writes()) == ((S[0],), (S[1], S[2]))
    assert Memset("m", S[3]).reads() == () and Memset("m", S[3]).writes() == (S[3],)
    launch = Launch("l", "k0", "loop", (1, 1, 1), (32, 1, 1), 0, (S[0], S[1]))
    assert launch.reads() == launch.writes() == (S[0], S[1])  # the ABI does not say which
    host = HostCompute("h", "fft", (S[0],), (S[1],))
    assert (host.reads(), host.writes()) == ((S[0],), (S[1],))


def test_footprint_includes_nested_thunks():
    w = _every_neutral_kind()[3]
    reads, writes = footprint(w)
    assert reads == [S[5], S[0], S[0], S[1]]
    assert writes == [S[5], S[2], S[3]]


def test_walk_yields_parents_and_depths_in_program_order():
    visits = list(walk(_every_neutral_kind()))
    names = [(v.thunk.name, v.parent.name if v.parent else None, v.depth) for v in visits]
    assert names[3:9] == [("w", None, 0), ("cond", "w", 1), ("k", "w", 1), ("m", "w", 1),
                          ("if", None, 0), ("call", "if", 1)]
    assert names[9:11] == [("k", "call", 2), ("m", "call", 2)]
    assert len(visits) == 14


def test_map_nested_rebuilds_control_flow_only():
    w = _every_neutral_kind()[3]
    emptied = map_nested(w, lambda seq: ())
    assert (emptied.condition, emptied.body, emptied.predicate) == ((), (), w.predicate)
    copy = Copy("cp", S[0], S[1])
    assert map_nested(copy, lambda seq: ()) is copy


def _neutral_program() -> ThunkProgram:
    allocs = (Allocation(0, 256, "parameter", 0, (1,), True, False),
              Allocation(1, 64, "constant", constant="c0"))
    return ThunkProgram("m", allocs, ((0, (1,), S[0]),), (((), S[2]),), (("c0", Slice(1, 0, 64)),),
                        _every_neutral_kind(), StreamAssignment(2, (0,) * 8, ((0, 0, 1),), ((2, 0),)))


def test_thunks_json_round_trip_is_exact():
    program = _neutral_program()
    data = program_to_json(program)
    assert program_from_json(data) == program
    assert program_to_json(program_from_json(data)) == data
    assert json.loads(data)["sequence"][3]["kind"] == "while"


def _gpu_program() -> GpuProgram:
    blas = BlasCall(S[1], S[0], S[2], "f32", "f32", "f32", "f32", "N", "N", 4, 4, 4, 4, 4, 4)
    main = (Launch("l", "k0", "loop", (2, 1, 1), (32, 1, 1), 0, (S[0], S[1])),
            GemmLaunch("g", "k1", "gemm", (1, 1, 1), (64, 1, 1), 128, (S[0], S[1], S[2]),
                       1, 4, 4, 4, blas),
            While("w", (), (Copy("cp", S[2], S[4]),), S[5], None),
            HostCompute("h", "custom-call", (S[0],), (S[6],)))
    return GpuProgram("m", (Allocation(0, 256, "temp"),), (Upload(S[0], 0, (0,)),), main,
                      (Download((), S[2]),), (KernelRecipe("k0", "loop", "l", (0,), (("x", 1),)),),
                      None, ("a note",), (("k0", "ab"),))


def test_gpu_thunks_json_round_trip_and_optional_defaults():
    program = _gpu_program()
    data = gpu_program_to_json(program, {"sm_80": {"k0": {"registers": 8}}})
    back, resources = gpu_program_from_json(data)
    assert back == program and resources == {"sm_80": {"k0": {"registers": 8}}}
    d = json.loads(data)
    assert d["gpu_thunks_version"] == 2 and d["main"][1]["blas"]["a"] == S[1].to_json()
    del d["main"][1]["blas"]  # written before the field existed: reads as None
    assert gpu_program_from_json(json.dumps(d))[0].main[1].blas is None


def test_decoding_errors_name_the_member():
    d = json.loads(program_to_json(_neutral_program()))
    d["sequence"][0]["kind"] = "teleport"
    with pytest.raises(InputError, match="thunks.json: unknown thunk kind 'teleport'"):
        program_from_json(json.dumps(d))
    d["sequence"][0] = {"kind": "copy", "name": "x"}
    with pytest.raises(InputError, match="thunks.json: malformed copy thunk"):
        program_from_json(json.dumps(d))
    with pytest.raises(InputError, match="gpu_thunks.json: unsupported version"):
        gpu_program_from_json(b'{"gpu_thunks_version": 9}')


@dataclass(frozen=True)
class _AllReduce(Thunk):
    """A kind the serializer was not written for (a stand-in for a collective)."""

    kind: ClassVar[ThunkKind] = ThunkKind.CUSTOM_CALL
    operands: Slices
    outputs: Slices
    replica_groups: tuple[tuple[int, ...], ...] = ()
    inner: tuple[Thunk, ...] = ()

    def reads(self) -> Slices:
        return self.operands

    def writes(self) -> Slices:
        return self.outputs


def test_a_new_kind_needs_only_its_dataclass():
    fmt = Format("test.json", "version", 1, {ThunkKind.CUSTOM_CALL: _AllReduce,
                                             ThunkKind.COPY: Copy})
    thunk = _AllReduce("ar", (S[0],), (S[1],), ((0, 1),), (Copy("cp", S[1], S[2]),))
    encoded = fmt.encode(thunk)
    assert encoded["operands"] == [S[0].to_json()] and encoded["inner"][0]["kind"] == "copy"
    assert fmt.decode(json.loads(json.dumps(encoded))) == _AllReduce(
        "ar", (S[0],), (S[1],), ((0, 1),), (Copy("cp", S[1], S[2]),))
    assert [v.thunk.name for v in walk((thunk,))] == ["ar", "cp"]
    assert footprint(thunk) == ([S[0], S[1]], [S[1], S[2]])


def test_every_kind_has_a_builder_in_every_runtime():
    from hloc.codegen.cuda.build import CONVERTERS
    from hloc.runtime.arena import RUNNERS as ARENA
    from hloc.runtime.cpu.program import BUILDERS
    from hloc.runtime.cuda.program import RUNNERS as GPU

    for table in (BUILDERS, ARENA, CONVERTERS):
        assert table.keys() >= set(THUNK_KINDS), table
    assert GPU.keys() == set(GPU_THUNK_KINDS)


def test_multi_device_kinds_declare_their_buffers_and_round_trip_in_both_formats():
    from hloc.thunks.collectives import Collective, DeviceId
    from hloc.thunks.serialize import THUNKS_JSON, gpu_thunks_json

    coll = Collective("ar", "all-gather-start", (S[0],), (S[1], S[2]))
    dev = DeviceId("p", "partition", S[3])
    assert (coll.reads(), coll.writes()) == ((S[0],), (S[1], S[2]))
    assert (dev.reads(), dev.writes()) == ((), (S[3],))
    for fmt in (THUNKS_JSON, gpu_thunks_json()):
        for thunk in (coll, dev):
            assert fmt.decode(json.loads(json.dumps(fmt.encode(thunk)))) == thunk
    assert THUNKS_JSON.encode(dev) == {"kind": "device-id", "name": "p", "axis": "partition",
                                       "output": list(S[3].to_json())}
