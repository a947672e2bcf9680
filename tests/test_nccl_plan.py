"""The mapping from HLO collectives to NCCL calls (hloc.runtime.cuda.nccl.plan): which
Collective thunks become which calls (counts, datatypes, operators, peers, slices) and which
stay host-staged, and that no decision depends on the device that plans it. Pure: small
modules from HLO text and hand-made slices, no compile, no MPI."""

from __future__ import annotations

import numpy as np
import pytest

from hloc.buffers.assignment import Slice
from hloc.collectives import DeviceGrid
from hloc.ir import Shape
from hloc.ir.shape import Layout
from hloc.ir.text.parser import parse_module
from hloc.runtime.cuda.nccl.api import DataType, RedOp, version_text
from hloc.runtime.cuda.nccl.emulated import reduce_like_nccl
from hloc.runtime.cuda.nccl.plan import (
    WORLD,
    AllGather,
    AllReduce,
    Broadcast,
    HostStaged,
    NcclPlan,
    PlanContext,
    Recv,
    ReduceScatter,
    Send,
    chunked,
    plan_collective,
    reduction,
)
from hloc.thunks.collectives import Collective

pytestmark = pytest.mark.pure

MODULE = """HloModule m, num_partitions=4

red {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT x = {t}[] {kind}(a, b)
}}

ENTRY e {{
{body}
}}
"""
# Device id -> MPI rank, out of order: peers must be ranks, not device ids.
RANK_OF = {0: 3, 1: 2, 2: 1, 3: 0}


def _thunk(instr) -> Collective:
    """The instruction's Collective thunk: operands in allocation 0, results in 1, packed."""
    def packed(allocation, shapes):
        out, offset = [], 0
        for shape in shapes:
            out.append(Slice(allocation, offset, shape.byte_size))
            offset += shape.byte_size
        return tuple(out)

    ins = [leaf for op in instr.operands for _, leaf in op.shape.leaves() if leaf.is_array]
    outs = [leaf for _, leaf in instr.shape.leaves() if leaf.is_array]
    return Collective(instr.name, instr.opcode.value, packed(0, ins), packed(1, outs))


def plans(body: str, t: str = "f32", kind: str = "add", deterministic: bool = False):
    """{device: plan} of the ROOT of ENTRY `body` on each of the 4 partitions; every device
    must decide alike (NCCL or host-staged, for the same reason)."""
    module = parse_module(MODULE.format(t=t, kind=kind, body=body))
    instr = module.entry.root
    grid = DeviceGrid.of(module.config)
    out = {d: plan_collective(instr, _thunk(instr), PlanContext(grid, d, RANK_OF, deterministic))
           for d in grid.devices()}
    kinds = {type(p) for p in out.values()}
    assert len(kinds) == 1, out
    if kinds == {HostStaged}:
        assert len({p.reason for p in out.values()}) == 1, out
    return out


def one(body: str, device=(0, 0), **kw):
    return plans(body, **kw)[device]


def _s(allocation: int, offset: int, size: int) -> Slice:
    return Slice(allocation, offset, size)


def _ar(t: str) -> str:
    return (f"  p = {t}[8,4] parameter(0)\n  ROOT r = {t}[8,4] all-reduce(p), channel_id=1, "
            "replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=red")


@pytest.mark.parametrize("t, kind, want", [
    ("f32", "add", (DataType.FLOAT32, RedOp.SUM)),
    ("f64", "multiply", (DataType.FLOAT64, RedOp.PROD)),
    ("bf16", "add", (DataType.BFLOAT16, RedOp.SUM)),
    ("f16", "multiply", (DataType.FLOAT16, RedOp.PROD)),
    ("s32", "maximum", (DataType.INT32, RedOp.MAX)),
    ("u8", "minimum", (DataType.UINT8, RedOp.MIN)),
    ("s64", "add", (DataType.INT64, RedOp.SUM)),
    ("pred", "add", (DataType.UINT8, RedOp.MAX)),  # or
    ("pred", "multiply", (DataType.UINT8, RedOp.MIN)),  # and
    ("f32", "maximum", "NaN"),
    ("bf16", "minimum", "NaN"),
    ("s32", "and", "NCCL has no and"),
    ("s16", "add", "does not reduce s16"),
    ("f8e4m3fn", "add", "does not reduce f8e4m3fn"),
    ("c64", "add", "does not reduce c64"),
])
def test_all_reduce_maps_by_reducer_and_type(t, kind, want):
    plan = one(_ar(t), device=(0, 2), t=t, kind=kind)
    assert reduction(kind, Shape.scalar(t)) == want or (
        isinstance(want, str) and want in reduction(kind, Shape.scalar(t)))
    if isinstance(want, str):
        assert isinstance(plan, HostStaged) and want in plan.reason
        return
    size = Shape.array(t, (8, 4)).byte_size
    assert plan == NcclPlan("r", "all-reduce", (2, 3),
                            (AllReduce(_s(0, 0, size), _s(1, 0, size), 32, *want),))
    assert not plan.grouped


def test_tuple_all_reduce_is_one_grouped_call_per_leaf():
    body = ("  p = f32[3] parameter(0)\n  q = f32[2,2] parameter(1)\n"
            "  ROOT r = (f32[3], f32[2,2]) all-reduce(p, q), channel_id=1, "
            "replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=red")
    plan = one(body)
    assert plan.comm == (0, 1, 2, 3) and plan.grouped
    assert plan.calls == (AllReduce(_s(0, 0, 12), _s(1, 0, 12), 3, DataType.FLOAT32, RedOp.SUM),
                          AllReduce(_s(0, 12, 16), _s(1, 12, 16), 4, DataType.FLOAT32,
                                    RedOp.SUM))


def test_other_reducers_and_deterministic_mode_stay_host_staged():
    assert "not a standard" in one(_ar("f32"), kind="subtract").reason
    assert "deterministic" in one(_ar("f32"), deterministic=True).reason
    # Moving bytes is deterministic anyway: all-gather still maps.
    assert isinstance(one(_gather("f32[2,3]{1,0}", "f32[8,3]{1,0}", 0), deterministic=True),
                      NcclPlan)


def _gather(operand: str, result: str, dim: int) -> str:
    return (f"  p = {operand} parameter(0)\n  ROOT r = {result} all-gather(p), channel_id=1, "
            f"replica_groups={{{{0,1,2,3}}}}, dimensions={{{dim}}}, use_global_device_ids=true")


@pytest.mark.parametrize("operand, result, dim, maps", [
    ("f32[2,3]{1,0}", "f32[8,3]{1,0}", 0, True),
    ("f32[2,3]{1,0}", "f32[2,12]{1,0}", 1, False),  # rank chunks interleave
    ("f32[2,3]{0,1}", "f32[2,12]{0,1}", 1, True),  # dimension 1 is major in this layout
    ("f32[1,3]{1,0}", "f32[1,12]{1,0}", 1, True),  # a size-1 major dimension moves no bytes
    ("f32[2,3]{0,1}", "f32[8,3]{1,0}", 0, False),  # the operand's bytes are transposed
])
def test_all_gather_needs_contiguous_rank_chunks(operand, result, dim, maps):
    plan = one(_gather(operand, result, dim), device=(0, 3))
    if not maps:
        assert isinstance(plan, HostStaged) and "major-most" in plan.reason
        return
    size = parse_module(MODULE.format(t="f32", kind="add", body=_gather(
        operand, result, dim))).entry.root.operands[0].shape.byte_size
    assert plan == NcclPlan("r", "all-gather", (0, 1, 2, 3),
                            (AllGather(_s(0, 0, size), _s(1, 0, 4 * size), size,
                                       DataType.UINT8),))


@pytest.mark.parametrize("operand, result, dim, maps", [
    ("s32[8,4]", "s32[2,4]", 0, True),
    ("s32[4,8]", "s32[4,2]", 1, False),
])
def test_reduce_scatter_takes_a_contiguous_block(operand, result, dim, maps):
    body = (f"  p = {operand} parameter(0)\n  ROOT r = {result} reduce-scatter(p), channel_id=1, "
            f"replica_groups={{{{0,1,2,3}}}}, dimensions={{{dim}}}, use_global_device_ids=true, "
            f"to_apply=red")
    plan = one(body, device=(0, 1), kind="maximum", t="s32")
    if not maps:
        assert isinstance(plan, HostStaged) and "major-most" in plan.reason
        return
    assert plan.calls == (ReduceScatter(_s(0, 0, 128), _s(1, 0, 32), 8, DataType.INT32,
                                        RedOp.MAX),)


def test_tuple_all_to_all_is_grouped_send_recv_with_a_local_copy():
    params = "\n".join(f"  p{j} = f32[2,4] parameter({j})" for j in range(4))
    body = (f"{params}\n  ROOT r = (f32[2,4], f32[2,4], f32[2,4], f32[2,4]) "
            "all-to-all(p0, p1, p2, p3), channel_id=1, replica_groups={{0,1,2,3}}")
    plan = one(body, device=(0, 1))
    assert plan.comm == (0, 1, 2, 3) and plan.grouped
    assert plan.copies == ((_s(0, 32, 32), _s(1, 32, 32)),)
    peers = [j for j in range(4) if j != 1]  # positions in the group's communicator
    assert plan.calls == tuple(c for j in peers for c in (
        Send(_s(0, 32 * j, 32), 32, DataType.UINT8, j),
        Recv(_s(1, 32 * j, 32), 32, DataType.UINT8, j)))


@pytest.mark.parametrize("shape, dim, maps", [("f32[8,4]", 0, True), ("f32[4,8]", 1, False)])
def test_array_all_to_all_needs_contiguous_pieces(shape, dim, maps):
    body = (f"  p = {shape} parameter(0)\n  ROOT r = {shape} all-to-all(p), channel_id=1, "
            f"replica_groups={{{{0,1,2,3}}}}, dimensions={{{dim}}}")
    plan = one(body, device=(0, 2))
    if not maps:
        assert isinstance(plan, HostStaged) and "major-most" in plan.reason
        return
    assert plan.copies == ((_s(0, 64, 32), _s(1, 64, 32)),)
    assert Send(_s(0, 96, 32), 32, DataType.UINT8, 3) in plan.calls
    assert Recv(_s(1, 0, 32), 32, DataType.UINT8, 0) in plan.calls


def _permute(pairs: str) -> str:
    return (f"  p = f32[2,3] parameter(0)\n  ROOT r = f32[2,3] collective-permute(p), "
            f"channel_id=1, source_target_pairs={pairs}")


def test_permute_is_send_recv_between_mpi_ranks_and_zeros_where_nothing_arrives():
    pairs = "{{0,1},{1,2},{2,3}}"
    first, middle, last = one(_permute(pairs), (0, 0)), one(_permute(pairs), (0, 2)), \
        one(_permute(pairs), (0, 3))
    out, op = _s(1, 0, 24), _s(0, 0, 24)
    assert first == NcclPlan("r", "collective-permute", WORLD,
                             (Send(op, 24, DataType.UINT8, RANK_OF[1]),), zeros=(out,))
    assert middle.calls == (Recv(out, 24, DataType.UINT8, RANK_OF[1]),
                            Send(op, 24, DataType.UINT8, RANK_OF[3]))
    assert middle.zeros == () and middle.grouped
    assert last.calls == (Recv(out, 24, DataType.UINT8, RANK_OF[2]),)
    assert one(_permute("{{3,3}}"), (0, 3)).copies == ((op, out),)
    assert "repeat a target" in one(_permute("{{0,1},{2,1}}")).reason


def test_broadcast_roots_at_the_groups_first_member():
    body = ("  p = s8[5] parameter(0)\n  ROOT r = s8[5] collective-broadcast(p), channel_id=1, "
            "replica_groups={{2,0},{3,1}}")
    plan = one(body, device=(0, 3))
    assert plan == NcclPlan("r", "collective-broadcast", (3, 1),
                            (Broadcast(_s(0, 0, 5), _s(1, 0, 5), 5, DataType.UINT8, 0),))


def test_async_pairs_stay_host_staged():
    body = ("  p = f32[2,3] parameter(0)\n  ROOT r = (f32[2,3], f32[8,3]) all-gather-start(p), "
            "channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true")
    assert "no NCCL mapping" in one(body).reason


def test_chunked_reads_layouts_major_to_minor():
    column_major = Layout((0, 1))
    whole = Shape.array("f32", (4, 6), column_major)
    assert chunked(whole, Shape.array("f32", (4, 3), column_major), 1)
    assert not chunked(whole, Shape.array("f32", (2, 6), column_major), 0)
    assert not chunked(whole, Shape.array("f32", (4, 3)), 1)  # the part is row-major


def test_the_emulated_operators_are_ncclss():
    a = np.array([1.0, np.nan, 3.0], np.float32)
    b = np.array([2.0, 5.0, np.nan], np.float32)
    np.testing.assert_array_equal(reduce_like_nccl([a, b], RedOp.MAX), [2.0, 5.0, 3.0])
    ints = [np.array([100, -100], np.int8)] * 2
    np.testing.assert_array_equal(reduce_like_nccl(ints, RedOp.SUM), [-56, 56])  # wraps
    assert version_text(23203) == "2.32.3" and version_text(2804) == "2.8.4"
