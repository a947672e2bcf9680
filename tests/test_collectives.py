"""hloc.collectives: replica-group encodings, XLA group modes, semantics, sharding, rendezvous."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from hloc.collectives import (
    CollectiveError,
    DeviceGrid,
    GroupMode,
    InProcessCommunicator,
    Reducer,
    assemble,
    group_mode,
    parse_sharding,
    participants,
    shard,
)
from hloc.collectives import semantics as sem
from hloc.errors import InputError
from hloc.ir.replica_groups import IotaReplicaGroups, MeshAxisRef, MeshReplicaGroups
from hloc.ir.text.parser import parse_module
from hloc.ir.text.printer import print_module

_AR = """HloModule m, num_partitions=4

add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}

ENTRY e {{
  p = f32[2] parameter(0)
  ROOT r = f32[2] all-reduce(p), channel_id=1, replica_groups={groups}, use_global_device_ids=true, to_apply=add
}}
"""


@pytest.mark.parametrize("text, groups", [
    ("{{0,1},{2,3}}", ((0, 1), (2, 3))),
    ("[2,2]<=[4]", ((0, 1), (2, 3))),
    ("[2,2]<=[2,2]T(1,0)", ((0, 2), (1, 3))),
    ("mesh['axis_0'=4,'axis_1'=1] {'axis_0'}", ((0, 1, 2, 3),)),
    ("mesh['x'=2,'y'=2] {'y'}", ((0, 1), (2, 3))),
    ("mesh['x'=2,'y'=2] {'x'}", ((0, 2), (1, 3))),
    ("mesh['x'=2,'y'=2] {'y','x'}", ((0, 2, 1, 3),)),
    ("mesh['x'=2,'y'=2], device_ids=(3,1,0,2) {'y'}", ((3, 1), (0, 2))),
    # A sub-axis (pre)size splits the axis into [pre, size, rest], major to minor (XLA).
    ("mesh['a'=4] {'a':(2)2}", ((0, 1), (2, 3))),
    ("mesh['a'=4] {'a':(1)2}", ((0, 2), (1, 3))),
])
def test_replica_group_encodings_parse_and_round_trip(text, groups):
    module = parse_module(_AR.format(groups=text))
    instr = module.entry.root
    assert instr.attrs.replica_groups == groups
    printed = print_module(module)
    assert f"replica_groups={text}" in printed
    again = parse_module(printed).entry.root
    assert again.attrs.replica_groups == groups
    assert again.attrs.replica_group_list == instr.attrs.replica_group_list


def test_replica_group_lists_round_trip_through_proto():
    from hloc.frontend import module_to_proto
    from hloc.frontend.proto_import import module_from_proto

    for text in ("[2,2]<=[2,2]T(1,0)", "mesh['x'=2,'y'=2], device_ids=(3,1,0,2) {'y'}"):
        module = parse_module(_AR.format(groups=text))
        back = module_from_proto(module_to_proto(module)).entry.root
        assert back.attrs.replica_group_list == module.entry.root.attrs.replica_group_list
        assert back.attrs.replica_groups == module.entry.root.attrs.replica_groups


def test_mesh_and_iota_group_values():
    mesh = MeshReplicaGroups(("a",), (8,), (MeshAxisRef(0, 1, 2), MeshAxisRef(0, 4, 2)))
    assert mesh.groups() == ((0, 1, 4, 5), (2, 3, 6, 7))  # XLA's {a:(1)2, a:(4)2} example
    assert IotaReplicaGroups(1, 4, (2, 2), (1, 0)).groups() == ((0, 2, 1, 3),)


def test_bad_iota_groups_are_parse_errors():
    with pytest.raises(InputError, match="reshape dims"):
        parse_module(_AR.format(groups="[2,2]<=[3]"))


# ---- group modes (XLA's GetCollectiveOpGroupMode + GetParticipatingDevices) ------------------
def test_group_mode_table():
    assert group_mode(False, None) == GroupMode.CROSS_REPLICA
    assert group_mode(False, False) == GroupMode.CROSS_REPLICA
    assert group_mode(True, None) == GroupMode.CROSS_PARTITION
    assert group_mode(True, False) == GroupMode.CROSS_REPLICA_AND_PARTITION
    assert group_mode(True, True) == GroupMode.FLATTENED_ID
    with pytest.raises(InputError):
        group_mode(False, True)


GRID = DeviceGrid(2, 2, ((10, 7), (3, 42)))  # non-contiguous global ids


@pytest.mark.parametrize("mode, groups, device, expected", [
    (GroupMode.CROSS_REPLICA, (), (1, 1), [(0, 1), (1, 1)]),
    (GroupMode.CROSS_REPLICA, ((1, 0),), (0, 0), [(1, 0), (0, 0)]),
    (GroupMode.CROSS_PARTITION, ((0,), (1,)), (1, 1), [(1, 1)]),
    (GroupMode.CROSS_PARTITION, (), (1, 0), [(1, 0), (1, 1)]),
    (GroupMode.CROSS_REPLICA_AND_PARTITION, ((0, 1),), (1, 0), [(0, 0), (0, 1), (1, 0), (1, 1)]),
    (GroupMode.CROSS_REPLICA_AND_PARTITION, ((0,), (1,)), (1, 0), [(1, 0), (1, 1)]),
    (GroupMode.FLATTENED_ID, ((3, 0), (1, 2)), (0, 0), [(1, 1), (0, 0)]),
    (GroupMode.FLATTENED_ID, ((3, 0), (1, 2)), (1, 0), [(0, 1), (1, 0)]),
])
def test_participants_match_hand_computed_xla_cases(mode, groups, device, expected):
    assert participants(mode, groups, GRID, device) == expected


def test_device_ids_map_through_the_assignment():
    assert [GRID.device_id(d) for d in GRID.devices()] == [10, 7, 3, 42]
    assert DeviceGrid(1, 4).device_id((0, 3)) == 3


def test_device_in_no_group_is_an_error():
    with pytest.raises(InputError, match="none of the replica groups"):
        participants(GroupMode.CROSS_PARTITION, ((0,),), GRID, (0, 1))


# ---- semantics ---------------------------------------------------------------------------------
V = [np.array([[1.0, 2.0], [3.0, 4.0]], np.float32) * (k + 1) for k in range(2)]


def test_all_reduce_kinds_and_order():
    assert sem.all_reduce(V, Reducer("add")).tolist() == [[3, 6], [9, 12]]
    assert sem.all_reduce(V, Reducer("maximum")).tolist() == (V[1]).tolist()
    assert sem.all_reduce([np.array([True]), np.array([False])], Reducer("and")).tolist() == [False]
    # Participant order: float addition is not associative; the fold is ((v0 + v1) + v2).
    vals = [np.float32(1e8), np.float32(1.0), np.float32(-1e8)]
    assert sem.all_reduce([np.array(v) for v in vals], Reducer("add")) == np.float32(0.0)


def test_all_reduce_with_a_custom_reducer_uses_the_interpreter():
    module = parse_module(_AR.format(groups="{}").replace(
        "ROOT s = f32[] add(a, b)", "m = f32[] multiply(a, b)\n  ROOT s = f32[] add(m, a)"))
    from hloc.collectives import reducer_of

    red = reducer_of(module.computation("add"))
    assert red.kind is None
    out = sem.all_reduce([np.array([2.0], np.float32), np.array([3.0], np.float32)], red)
    assert out.tolist() == [8.0]  # 2*3 + 2


def test_gather_scatter_all_to_all_permute_broadcast():
    assert sem.all_gather(V, 1).shape == (2, 4)
    assert sem.reduce_scatter(V, Reducer("add"), 0, 1).tolist() == [[9, 12]]
    a2a = sem.all_to_all([np.arange(4).reshape(4, 1) + 10 * k for k in range(2)], 0, 0, 1)
    assert a2a.ravel().tolist() == [2, 3, 12, 13]
    assert [t.tolist() for t in sem.all_to_all_tuple([(1, 2), (3, 4)], 0)] == [1, 3]
    got = [sem.collective_permute(V, [(0, 1)], p, V[p]) for p in range(2)]
    assert got[0].tolist() == [[0, 0], [0, 0]] and got[1].tolist() == V[0].tolist()
    assert sem.collective_broadcast(V).tolist() == V[0].tolist()


# ---- sharding ----------------------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "{devices=[2,2]<=[4]}", "{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}",
    "{devices=[1,4]0,2,1,3}", "{replicated}", "{maximal device=2}",
    "{devices=[2, 1, 2]<=[4] last_tile_dims={manual}}",
])
def test_shard_then_assemble_is_identity(text):
    x = np.arange(6 * 8, dtype=np.float32).reshape(6, 8)
    s = parse_sharding(text)
    parts = [shard(x, s, p) for p in range(4)]
    np.testing.assert_array_equal(assemble(parts, s, x.shape), x)


def test_uneven_shards_are_padded():
    s = parse_sharding("{devices=[4,1]<=[4]}")
    x = np.arange(5, dtype=np.int32).reshape(5, 1)
    assert shard(x, s, 3).ravel().tolist() == [0, 0]  # rows 6..7 do not exist
    assert shard(x, s, 2).ravel().tolist() == [4, 0]
    np.testing.assert_array_equal(assemble([shard(x, s, p) for p in range(4)], s, (5, 1)), x)


def test_tuple_sharding_leaves():
    s = parse_sharding("{{devices=[2,1]<=[2]}, {replicated}}")
    assert [leaf.kind for leaf in s.leaves()] == ["tiled", "replicated"]


# ---- the in-process rendezvous never hangs -----------------------------------------------------
def _run_threads(fns):
    errors = {}

    def wrap(i, fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            errors[i] = e

    threads = [threading.Thread(target=wrap, args=(i, f)) for i, f in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not any(t.is_alive() for t in threads)
    return errors


def test_exchange_returns_values_in_group_order():
    comm = InProcessCommunicator([5, 9], timeout=10)
    got = {}
    errors = _run_threads([lambda: got.__setitem__(5, comm.exchange("k", [9, 5], 5, "a")),
                           lambda: got.__setitem__(9, comm.exchange("k", [9, 5], 9, "b"))])
    assert not errors and got == {5: ["b", "a"], 9: ["b", "a"]}


def test_mismatched_collectives_are_a_deadlock_error():
    comm = InProcessCommunicator([0, 1], timeout=10)
    errors = _run_threads([lambda: comm.exchange("x#1", [0, 1], 0, 1),
                           lambda: comm.exchange("y#1", [0, 1], 1, 1)])
    assert set(errors) == {0, 1}
    assert all(isinstance(e, CollectiveError) for e in errors.values())
    assert "deadlock" in str(errors[0]) + str(errors[1])


def test_finished_peer_and_failed_peer_are_errors():
    comm = InProcessCommunicator([0, 1, 2], timeout=10)
    comm.finish(1)
    with pytest.raises(CollectiveError, match="device 1 finished"):
        comm.exchange("k", [0, 1], 0, 1)
    comm = InProcessCommunicator([0, 1], timeout=10)
    comm.abort(1, RuntimeError("boom"))
    with pytest.raises(CollectiveError, match="device 1 failed: boom"):
        comm.exchange("k", [0, 1], 0, 1)
