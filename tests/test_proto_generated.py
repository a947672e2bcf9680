"""The generated XLA proto modules: freshness, wire compatibility, field numbers."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hloc.frontend.gen import hlo_pb2, xla_data_pb2

ROOT = Path(__file__).resolve().parent.parent
GEN_SCRIPT = ROOT / "tools" / "gen_proto.py"

pytestmark = pytest.mark.pure


# ---------------------------------------------------------------------------
# (a) The committed modules match what tools/gen_proto.py produces.
# ---------------------------------------------------------------------------


def test_generated_modules_are_fresh():
    if importlib.util.find_spec("grpc_tools") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("grpc_tools is not installed, so generated protos cannot be checked in CI")
        pytest.skip("grpc_tools not installed (pip install grpcio-tools)")
    proc = subprocess.run(
        [sys.executable, str(GEN_SCRIPT), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_generated_package_uses_relative_import():
    text = (ROOT / "hloc" / "frontend" / "gen" / "hlo_pb2.py").read_text(encoding="utf-8")
    assert "from . import xla_data_pb2 as" in text
    assert "\nimport xla_data_pb2" not in text
    init = (ROOT / "hloc" / "frontend" / "gen" / "__init__.py").read_text(encoding="utf-8")
    assert init == '"""Generated protobuf modules; regenerate with make proto."""\n'


# ---------------------------------------------------------------------------
# (b) Wire compatibility: build, serialize, parse back, compare.
# ---------------------------------------------------------------------------


def _shape(dims, etype=xla_data_pb2.F32):
    s = xla_data_pb2.ShapeProto(element_type=etype, dimensions=dims)
    s.layout.minor_to_major.extend(reversed(range(len(dims))))
    return s


def _build_module() -> hlo_pb2.HloModuleProto:
    m = hlo_pb2.HloModuleProto(name="jit_f", entry_computation_name="main.5", id=7)
    m.entry_computation_id = 2

    # Reducer: add(a, b).
    red = m.computations.add(name="region_0.1", id=1, root_id=12)
    for pid, pnum in ((10, 0), (11, 1)):
        p = red.instructions.add(name=f"p{pnum}", opcode="parameter", id=pid)
        p.shape.element_type = xla_data_pb2.F32
        p.parameter_number = pnum
    add = red.instructions.add(name="add", opcode="add", id=12, operand_ids=[10, 11])
    add.shape.element_type = xla_data_pb2.F32
    red.program_shape.parameters.add(element_type=xla_data_pb2.F32)
    red.program_shape.parameters.add(element_type=xla_data_pb2.F32)
    red.program_shape.result.element_type = xla_data_pb2.F32

    main = m.computations.add(name="main.5", id=2, root_id=26)
    x = main.instructions.add(name="x", opcode="parameter", id=20, parameter_number=0)
    x.shape.CopyFrom(_shape([8, 4]))
    x.metadata.op_name = "jit(f)/x"
    x.metadata.source_file = "f.py"
    x.metadata.source_line = 3
    x.metadata.stack_frame_id = 1
    w = main.instructions.add(name="w", opcode="parameter", id=21, parameter_number=1)
    w.shape.CopyFrom(_shape([4, 6]))
    dot = main.instructions.add(name="dot", opcode="dot", id=22, operand_ids=[20, 21])
    dot.shape.CopyFrom(_shape([8, 6]))
    dot.dot_dimension_numbers.lhs_contracting_dimensions.append(1)
    dot.dot_dimension_numbers.rhs_contracting_dimensions.append(0)
    dot.precision_config.operand_precision.extend(
        [xla_data_pb2.PrecisionConfig.DEFAULT, xla_data_pb2.PrecisionConfig.HIGHEST]
    )
    dot.precision_config.algorithm = xla_data_pb2.PrecisionConfig.ALG_DOT_F32_F32_F32
    dot.backend_config = b'{"outer_dimension_partitions":[]}'
    dot.frontend_attributes.map["_xla_key"] = "v"
    zero = main.instructions.add(name="zero", opcode="constant", id=23)
    zero.shape.element_type = xla_data_pb2.F32
    zero.literal.shape.element_type = xla_data_pb2.F32
    zero.literal.f32s.append(0.0)
    bf = main.instructions.add(name="bf", opcode="constant", id=24)
    bf.shape.CopyFrom(_shape([2], xla_data_pb2.BF16))
    bf.literal.shape.CopyFrom(bf.shape)
    bf.literal.bf16s = bytes([0x80, 0x3F, 0x00, 0x40])  # 1.0, 2.0 little-endian
    red_i = main.instructions.add(name="reduce", opcode="reduce", id=25, operand_ids=[22, 23])
    red_i.shape.CopyFrom(_shape([8]))
    red_i.dimensions.append(1)
    red_i.called_computation_ids.append(1)
    sl = main.instructions.add(name="slice", opcode="slice", id=26, operand_ids=[25])
    sl.shape.CopyFrom(_shape([4]))
    sl.slice_dimensions.add(start=0, limit=8, stride=2)
    sl.control_predecessor_ids.append(24)
    sl.sharding.type = xla_data_pb2.OpSharding.REPLICATED
    topk = main.instructions.add(name="topk", opcode="topk", id=27, operand_ids=[25])
    topk.k = 2
    topk.largest = True
    cmp_ = main.instructions.add(name="cmp", opcode="compare", id=28, operand_ids=[25, 25])
    cmp_.comparison_direction = "LT"
    cmp_.comparison_type = "TOTALORDER"
    g = main.instructions.add(name="g", opcode="gather", id=29, operand_ids=[22, 25])
    g.gather_dimension_numbers.offset_dims.append(1)
    g.gather_dimension_numbers.collapsed_slice_dims.append(0)
    g.gather_dimension_numbers.start_index_map.append(0)
    g.gather_dimension_numbers.index_vector_dim = 1
    g.gather_slice_sizes.extend([1, 6])
    g.indices_are_sorted = True
    ar = main.instructions.add(name="ar", opcode="all-reduce", id=30, operand_ids=[25])
    ar.channel_id = 3
    ar.use_global_device_ids = True
    ar.collective_device_list.replica_groups.add(replica_ids=[0, 1])
    ar.output_operand_aliasing.add(output_shape_index=[], operand_index=0)

    main.program_shape.parameters.extend([_shape([8, 4]), _shape([4, 6])])
    main.program_shape.parameter_names.extend(["x", "w"])
    main.program_shape.result.CopyFrom(_shape([4]))
    m.host_program_shape.CopyFrom(main.program_shape)

    m.schedule.sequences[2].instruction_ids.extend([20, 21, 22, 23, 24, 25, 26])
    alias = m.input_output_alias.entries.add(parameter_number=0, kind=hlo_pb2.MAY_ALIAS)
    alias.parameter_shape_index.append(0)
    m.buffer_donor.entries.add(parameter_number=1)
    m.stack_frame_index.file_names.append("f.py")
    m.stack_frame_index.function_names.append("f")
    m.stack_frame_index.file_locations.add(file_name_id=1, function_name_id=1, line=3)
    m.stack_frame_index.stack_frames.add(file_location_id=1, parent_frame_id=0)
    m.frontend_attributes.map["mode"] = "test"
    return m


def test_module_roundtrip():
    m = _build_module()
    data = m.SerializeToString()
    back = hlo_pb2.HloModuleProto.FromString(data)
    assert back == m
    assert back.SerializeToString(deterministic=True) == m.SerializeToString(deterministic=True)
    main = back.computations[1]
    by_id = {i.id: i for i in main.instructions}
    assert list(by_id[22].operand_ids) == [20, 21]
    assert by_id[22].backend_config == b'{"outer_dimension_partitions":[]}'
    assert by_id[24].literal.bf16s == bytes([0x80, 0x3F, 0x00, 0x40])
    assert by_id[27].largest and by_id[27].k == 2
    assert by_id[30].WhichOneof("replica_group_list") == "collective_device_list"
    assert list(back.schedule.sequences[2].instruction_ids)[:2] == [20, 21]
    assert back.input_output_alias.entries[0].kind == hlo_pb2.MAY_ALIAS


def test_containers_roundtrip():
    m = _build_module()
    proto = hlo_pb2.HloProto(hlo_module=m)
    la = proto.buffer_assignment.buffer_allocations.add(index=0, size=128, maybe_live_out=True)
    la.assigned.add(logical_buffer_id=3, offset=0, size=128)
    lb = proto.buffer_assignment.logical_buffers.add(id=3, size=128, color=0)
    lb.defined_at.instruction_id = 22
    trace = proto.buffer_assignment.heap_simulator_traces.add(buffer_allocation_index=0)
    trace.events.add(kind=hlo_pb2.HeapSimulatorTrace.Event.SHARE_WITH, buffer_id=3)
    snap = hlo_pb2.HloSnapshot(hlo=proto, execution_platform="Host")
    arg = snap.arguments.add()
    arg.shape.CopyFrom(_shape([2]))
    arg.f32s.extend([1.0, 2.0])
    snap.result.shape.element_type = xla_data_pb2.TUPLE
    snap.result.tuple_literals.add(s32s=[1])
    assert hlo_pb2.HloSnapshot.FromString(snap.SerializeToString()) == snap

    wc = hlo_pb2.HloModuleProtoWithConfig(hlo_module=m)
    wc.config.replica_count = 1
    wc.config.num_partitions = 1
    wc.config.seed = 42
    wc.config.entry_computation_layout.CopyFrom(m.host_program_shape)
    wc.config.optimization_level = hlo_pb2.ExecutionOptions.EFFORT_O2
    assert hlo_pb2.HloModuleProtoWithConfig.FromString(wc.SerializeToString()) == wc


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _tag(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


def test_hand_encoded_bytes_parse():
    """Bytes built by hand from XLA's field numbers decode into the right fields."""
    instr = (
        _tag(1, 2)
        + _varint(3)
        + b"dot"
        + _tag(2, 2)
        + _varint(3)
        + b"dot"
        + _tag(35, 0)
        + _varint(9)
        + _tag(36, 2)
        + _varint(2)
        + _varint(4)
        + _varint(5)  # packed operand_ids
        + _tag(43, 2)
        + _varint(2)
        + b"{}"
        + _tag(81, 0)
        + _varint(3)
        + _tag(85, 0)
        + _varint(1)
    )
    comp = _tag(1, 2) + _varint(4) + b"main" + _tag(2, 2) + _varint(len(instr)) + instr
    comp += _tag(6, 0) + _varint(9)
    sched = _tag(1, 0) + _varint(1) + _tag(2, 2) + _varint(3) + _tag(1, 2) + _varint(1) + _varint(9)
    module = (
        _tag(1, 2)
        + _varint(1)
        + b"m"
        + _tag(3, 2)
        + _varint(len(comp))
        + comp
        + _tag(7, 2)
        + _varint(len(sched) + 2)
        + _tag(1, 2)
        + _varint(len(sched))
        + sched
    )
    m = hlo_pb2.HloModuleProto.FromString(module)
    i = m.computations[0].instructions[0]
    assert (i.name, i.opcode, i.id, list(i.operand_ids)) == ("dot", "dot", 9, [4, 5])
    assert (i.backend_config, i.k, i.largest) == (b"{}", 3, True)
    assert m.computations[0].root_id == 9
    assert list(m.schedule.sequences[1].instruction_ids) == [9]
    assert m.SerializeToString() == module


def test_unknown_fields_are_preserved():
    """Fields we do not model (e.g. DebugOptions flags) survive a round trip."""
    debug = _tag(2000, 0) + _varint(1) + _tag(500, 2) + _varint(2) + b"ab"
    cfg = _tag(4, 0) + _varint(2) + _tag(14, 2) + _varint(len(debug)) + debug
    parsed = hlo_pb2.HloModuleConfigProto.FromString(cfg)
    assert parsed.replica_count == 2
    assert parsed.SerializeToString() == cfg


# ---------------------------------------------------------------------------
# (c) Field numbers and enum values from shared/docs/xla-facts.md.
# ---------------------------------------------------------------------------

FIELDS = {
    xla_data_pb2.ShapeProto: dict(
        element_type=2, dimensions=3, tuple_shapes=4, layout=5, is_dynamic_dimension=6
    ),
    xla_data_pb2.LayoutProto: dict(
        minor_to_major=1, tiles=6, element_size_in_bits=7, memory_space=8
    ),
    xla_data_pb2.ProgramShapeProto: dict(parameters=1, result=2, parameter_names=3),
    xla_data_pb2.LiteralProto: dict(
        shape=1,
        preds=2,
        u8s=3,
        s32s=4,
        s64s=5,
        u32s=6,
        u64s=7,
        f32s=8,
        f64s=9,
        tuple_literals=10,
        f16s=11,
        c64s=12,
        bf16s=13,
        s8s=15,
        u16s=16,
        s16s=17,
        c128s=18,
        f8e5m2s=19,
        f8e4m3fns=20,
        s4s=21,
        u4s=22,
    ),
    xla_data_pb2.WindowDimension: dict(
        size=1,
        stride=2,
        padding_low=3,
        padding_high=4,
        window_dilation=5,
        base_dilation=6,
        window_reversal=7,
    ),
    xla_data_pb2.Window: dict(dimensions=1),
    xla_data_pb2.ConvolutionDimensionNumbers: dict(
        kernel_input_feature_dimension=3,
        kernel_output_feature_dimension=4,
        kernel_spatial_dimensions=6,
        input_batch_dimension=7,
        input_feature_dimension=8,
        output_batch_dimension=9,
        output_feature_dimension=10,
        input_spatial_dimensions=11,
        output_spatial_dimensions=12,
    ),
    xla_data_pb2.DotDimensionNumbers: dict(
        lhs_contracting_dimensions=1,
        rhs_contracting_dimensions=2,
        lhs_batch_dimensions=3,
        rhs_batch_dimensions=4,
    ),
    xla_data_pb2.GatherDimensionNumbers: dict(
        offset_dims=1,
        collapsed_slice_dims=2,
        start_index_map=3,
        index_vector_dim=4,
        operand_batching_dims=5,
        start_indices_batching_dims=6,
    ),
    xla_data_pb2.ScatterDimensionNumbers: dict(
        update_window_dims=1,
        inserted_window_dims=2,
        scatter_dims_to_operand_dims=3,
        index_vector_dim=4,
        input_batching_dims=5,
        scatter_indices_batching_dims=6,
    ),
    xla_data_pb2.PaddingConfig: dict(dimensions=1),
    xla_data_pb2.PaddingConfig.PaddingConfigDimension: dict(
        edge_padding_low=1, edge_padding_high=2, interior_padding=3
    ),
    xla_data_pb2.OpMetadata: dict(
        op_type=1, op_name=2, source_file=3, source_line=4, stack_frame_id=15
    ),
    xla_data_pb2.PrecisionConfig: dict(operand_precision=1, algorithm=2),
    xla_data_pb2.OutputOperandAliasing: dict(
        output_shape_index=1, operand_index=2, operand_shape_index=3
    ),
    hlo_pb2.HloInstructionProto: dict(
        name=1,
        opcode=2,
        shape=3,
        metadata=7,
        literal=8,
        parameter_number=9,
        fusion_kind=11,
        tuple_index=13,
        dimensions=14,
        window=15,
        convolution_dimension_numbers=16,
        slice_dimensions=17,
        exponent_bits=18,
        mantissa_bits=19,
        dynamic_slice_sizes=20,
        padding_config=21,
        distribution=23,
        epsilon=24,
        feature_index=25,
        channel_id=26,
        custom_call_target=28,
        dot_dimension_numbers=30,
        fft_type=31,
        fft_length=32,
        gather_dimension_numbers=33,
        gather_slice_sizes=34,
        id=35,
        operand_ids=36,
        control_predecessor_ids=37,
        called_computation_ids=38,
        sharding=40,
        backend_config=43,
        scatter_dimension_numbers=48,
        replica_groups=49,
        feature_group_count=50,
        precision_config=51,
        source_target_pairs=52,
        batch_group_count=58,
        is_stable=60,
        comparison_direction=63,
        delta=66,
        indices_are_sorted=67,
        frontend_attributes=68,
        unique_indices=69,
        rng_algorithm=70,
        use_global_device_ids=71,
        comparison_type=72,
        output_operand_aliasing=74,
        custom_call_api_version=77,
        k=81,
        largest=85,
    ),
    hlo_pb2.HloInstructionProto.SliceDimensions: dict(start=1, limit=2, stride=3),
    hlo_pb2.HloComputationProto: dict(
        name=1,
        instructions=2,
        program_shape=4,
        id=5,
        root_id=6,
        is_fusion_computation=7,
        execution_thread=8,
    ),
    hlo_pb2.HloModuleProto: dict(
        name=1,
        entry_computation_name=2,
        computations=3,
        host_program_shape=4,
        id=5,
        entry_computation_id=6,
        schedule=7,
        input_output_alias=8,
        buffer_donor=18,
    ),
    hlo_pb2.HloScheduleProto: dict(sequences=1),
    hlo_pb2.HloScheduleProto.InstructionSequence: dict(instruction_ids=1),
    hlo_pb2.HloInputOutputAliasProto: dict(entries=1),
    hlo_pb2.HloInputOutputAliasProto.AliasEntryProto: dict(
        output_shape_index=1, parameter_number=2, parameter_shape_index=3, kind=4
    ),
    hlo_pb2.LogicalBufferProto: dict(id=1, size=2, defined_at=3, color=4),
    hlo_pb2.LogicalBufferProto.Location: dict(instruction_id=4, shape_index=3),
    hlo_pb2.BufferAllocationProto: dict(
        index=1,
        size=2,
        is_thread_local=3,
        is_entry_computation_parameter=5,
        parameter_number=6,
        maybe_live_out=7,
        color=8,
        assigned=9,
        parameter_shape_index=10,
        is_tuple=11,
        is_constant=12,
    ),
    hlo_pb2.BufferAllocationProto.Assigned: dict(logical_buffer_id=1, offset=2, size=3),
    hlo_pb2.HeapSimulatorTrace: dict(
        events=1, whole_module_simulation=2, buffer_allocation_index=3
    ),
    hlo_pb2.HeapSimulatorTrace.Event: dict(
        kind=1,
        buffer_id=2,
        computation_name=3,
        instruction_name=4,
        share_with_canonical_id=5,
    ),
    hlo_pb2.BufferAssignmentProto: dict(
        logical_buffers=1, buffer_aliases=2, buffer_allocations=3, heap_simulator_traces=4
    ),
    hlo_pb2.HloProto: dict(hlo_module=1, buffer_assignment=3),
    hlo_pb2.HloSnapshot: dict(hlo=1, arguments=2, result=3, execution_platform=4),
    hlo_pb2.HloModuleProtoWithConfig: dict(hlo_module=1, config=2),
}

FIELD_CASES = [
    pytest.param(msg, field, number, id=f"{msg.DESCRIPTOR.name}.{field}")
    for msg, fields in FIELDS.items()
    for field, number in fields.items()
]


@pytest.mark.parametrize("msg, field, number", FIELD_CASES)
def test_field_number(msg, field, number):
    assert msg.DESCRIPTOR.fields_by_name[field].number == number


def test_field_types_that_matter():
    instr = hlo_pb2.HloInstructionProto.DESCRIPTOR.fields_by_name
    fd = instr["opcode"]
    assert fd.type == fd.TYPE_STRING
    assert instr["backend_config"].type == fd.TYPE_BYTES
    assert instr["comparison_direction"].type == fd.TYPE_STRING
    assert instr["operand_ids"].is_repeated
    lit = xla_data_pb2.LiteralProto.DESCRIPTOR.fields_by_name
    for name in ("u8s", "f16s", "bf16s", "s8s", "s4s", "f8e4m3fns"):
        assert lit[name].type == fd.TYPE_BYTES, name


# XLA's own enum value names. xla-facts.md abbreviates three of them:
# PrimitiveType INVALID is PRIMITIVE_TYPE_INVALID, RandomDistribution UNIFORM/NORMAL
# are RNG_UNIFORM/RNG_NORMAL, alias kinds MAY/MUST are MAY_ALIAS/MUST_ALIAS.
ENUMS = [
    (
        xla_data_pb2.PrimitiveType,
        dict(
            PRIMITIVE_TYPE_INVALID=0,
            PRED=1,
            S8=2,
            S16=3,
            S32=4,
            S64=5,
            U8=6,
            U16=7,
            U32=8,
            U64=9,
            F16=10,
            F32=11,
            F64=12,
            TUPLE=13,
            OPAQUE_TYPE=14,
            C64=15,
            BF16=16,
            TOKEN=17,
            C128=18,
            F8E5M2=19,
            F8E4M3FN=20,
            S4=21,
            U4=22,
            F8E4M3B11FNUZ=23,
            F8E5M2FNUZ=24,
            F8E4M3FNUZ=25,
            S2=26,
            U2=27,
            F8E4M3=28,
            F8E3M4=29,
            S1=30,
            U1=31,
            F4E2M1FN=32,
            F8E8M0FNU=33,
            BUFFER=34,
        ),
    ),
    (xla_data_pb2.RandomAlgorithm, dict(RNG_DEFAULT=0, RNG_THREE_FRY=1, RNG_PHILOX=2)),
    (xla_data_pb2.RandomDistribution, dict(RNG_INVALID=0, RNG_UNIFORM=1, RNG_NORMAL=2)),
    (xla_data_pb2.FftType, dict(FFT=0, IFFT=1, RFFT=2, IRFFT=3)),
    (xla_data_pb2.PrecisionConfig.Precision, dict(DEFAULT=0, HIGH=1, HIGHEST=2)),
    (hlo_pb2.Kind, dict(UNDEFINED_ALIAS=0, MAY_ALIAS=1, MUST_ALIAS=2)),
    (hlo_pb2.HeapSimulatorTrace.Event.Kind, dict(ALLOC=0, FREE=1, SHARE_WITH=2)),
]


@pytest.mark.parametrize("enum, values", ENUMS, ids=[e.DESCRIPTOR.full_name for e, _ in ENUMS])
def test_enum_values(enum, values):
    for name, number in values.items():
        assert enum.Value(name) == number, name


def test_hlo_instruction_reserved_numbers_stay_reserved():
    desc = hlo_pb2.HloInstructionProto.DESCRIPTOR
    used = {f.number for f in desc.fields}
    for retired in (4, 5, 6, 10, 12, 41, 42, 44, 46, 53, 64, 78, 83, 84, 86):
        assert retired not in used, retired
