"""Fused convolutions split in two, so that cuDNN can run the convolution (planned by
conv_split.plan_conv_split for the convolutions it leaves to cuDNN).

A fusion whose root computes elementwise on one convolution (its epilogue: bias add,
batch-norm scale and shift, a residual add, ReLU, an SGD update; epilogue.find_core) that
cuDNN can express (conv_dnn.core_call: a convolution of parameters) runs as two kernels:

- `conv.core`: the convolution alone, stored into the stream's scratch buffer (the kernel's
  last argument): one thread per element (per tile of output features where the kernel's
  output features are not its minor dim, as in a transposed convolution: feature_tile), or
  for long sums (weight gradients) threads sharing each element as conv.split does. Its thunk is a ConvLaunch whose cuDNN form writes
  the same scratch bytes, so the runtime runs either;
- `conv.epilogue`: the loop kernel over the fusion's output, with the convolution's value
  loaded from the scratch instead of recomputed.

The scratch holds the convolution in its own layout, except for a gradient that cuDNN's
backward calls run (conv_bwd.Written): a transposed convolution with asymmetric padding, or
a weight gradient with asymmetric padding or a layout other than the packed filter format
its activations call for (K, taps, C for NHWC-strided ones, else K, C, taps), is
written larger or in that layout, and both kernels index it at the convolution's window
(`Scratch`). Such a gradient splits even when nothing is fused to it (the epilogue is then
a copy). Both are one Sequential named after the fusion, on the fusion's stream (each stream
has its own scratch buffer, so nothing else writes it in between). A plain convolution cuDNN
writes directly stays one kernel, and so does a fusion whose convolution cuDNN cannot
express (a fused producer, batch groups, ...) or that has several outputs.
"""

from __future__ import annotations

from dataclasses import replace

from ...buffers.assignment import Slice
from ...ir import Instruction, Opcode, Shape
from ...thunks.base import Thunk
from ...thunks.gpu import ConvLaunch, Launch
from ...thunks.thunks import Sequential
from ...util.record import dataclass
from ..elemental.memory import load_element, store_element
from .conv import Tile, recipe_tile, tile_generator
from .conv_bwd import scratch_form
from .conv_dnn import core_call
from .conv_split import emit_split, long_sums, split_part, sum_terms
from .epilogue import find_core, generators_with
from .kernel import KernelBuild, kernel_computation, variant
from .loop import emit_loop, loop_launch, physical_index, plan_loop
from .parts import Part, PlanContext

CORE, EPILOGUE = "conv.core", "conv.epilogue"
SCRATCH_ALIGN = 256
MAX_FEATURE_TILE = 8  # output features per thread of a tiled core (feature_tile), at most
MIN_TILE_THREADS = 1 << 16  # a tile is halved until the core has this many threads, or is 1


@dataclass(frozen=True)
class Scratch:
    """Where the core's convolution lies in the scratch buffer: an array of `shape` holding
    convolution element i at element i + `offsets` (a backward call's enlarged result,
    conv_bwd.Written; else the convolution's own shape, offsets 0)."""

    shape: Shape
    offsets: tuple[int, ...]

    def index(self, kb: KernelBuild, index) -> list:
        return [i if o == 0 else kb.b.add(i, kb.i64(o)) for i, o in zip(index, self.offsets,
                                                                          strict=True)]


def scratch_of(conv: Instruction, instr: Instruction) -> Scratch:
    """Where kernel thunk `instr`'s split convolution `conv` lies in its scratch buffer."""
    form = scratch_form(conv, instr)
    if form is None:
        return Scratch(conv.shape, (0,) * conv.shape.rank)
    return Scratch(form.shape, form.offsets)


def split_core(instr: Instruction, root: Instruction) -> Instruction | None:
    """The convolution a kernel thunk's single root item computes elementwise on, when it
    splits: a real epilogue or a gradient whose backward call writes scratch (the epilogue
    then copies the convolution's window out of it), and a convolution cuDNN can express;
    else None."""
    if instr.opcode not in (Opcode.FUSION, Opcode.CONVOLUTION) or not root.shape.is_array:
        return None
    conv = find_core(root)
    if conv is None or conv.opcode != Opcode.CONVOLUTION:
        return None
    form = scratch_form(conv, instr)
    if conv is root and (form is None or form.holds(instr.shape)):
        return None  # cuDNN writes the output itself (conv_dnn.conv_call)
    placeholders = [Slice(0, 0, 0)] * len(instr.operands)
    if core_call(instr, conv, placeholders, Slice(0, 0, 0),
                 scratch_of(conv, instr).shape) is None:
        return None
    return conv


def plan_split(pc: PlanContext, k: int) -> list[Part] | None:
    item = pc.items[k]
    if len(pc.items) != 1 or len(item.outputs) != 1:
        return None
    conv = split_core(pc.instr, item.instr)
    if conv is None:
        return None
    scratch = -(-scratch_of(conv, pc.instr).shape.byte_size // SCRATCH_ALIGN) * SCRATCH_ALIGN
    outputs, terms = max(1, conv.shape.num_elements), sum_terms(conv)
    core = split_part(pc, k, CORE, conv) if long_sums(outputs, terms) else None
    if core is None:
        tile = feature_tile(conv)
        count = 1 if tile is None else tile.count
        launch = loop_launch(outputs // count, 1, pc.target)
        params = (("unroll", 1),) + (() if tile is None else (("tile", count),
                                                               ("tile_dim", tile.dim)))
        core = Part(CORE, (k,), launch, params, block_threads=launch.block[0])
    epilogue = plan_loop(pc, (k,))
    return [replace(core, scratch_bytes=scratch),
            Part(EPILOGUE, (k,), epilogue.launch, epilogue.params, scratch_bytes=scratch,
                 block_threads=epilogue.block_threads)]


def feature_tile(conv: Instruction) -> Tile | None:
    """The output features each thread of a one-thread-per-element core sums (conv.Tile),
    where neighbouring threads would otherwise read the kernel at neighbouring output
    features, which are not its minor dim (a transposed convolution's kernel, as JAX's
    gradient lays it out): then a thread reads each kernel element of its tile and each
    input element once. MAX_FEATURE_TILE or fewer, halved until the tile divides the output
    features and leaves MIN_TILE_THREADS threads; None for 1, for groups and elsewhere."""
    dn, rhs = conv.attrs.conv_dnums, conv.operands[1].shape
    if (conv.attrs.feature_group_count or 1) != 1 or (conv.attrs.batch_group_count or 1) != 1:
        return None
    if rhs.layout is None or rhs.layout.minor_to_major[0] == dn.kernel_output_feature_dimension:
        return None
    return Tile.fitting(conv.shape, dn.output_feature_dimension, MAX_FEATURE_TILE,
                        MIN_TILE_THREADS)


def _conv(kb: KernelBuild) -> Instruction:
    conv = find_core(kb.items()[0].instr)
    if conv is None or conv.opcode != Opcode.CONVOLUTION or kb.scratch is None:
        raise ValueError(f"kernel {kb.recipe.name}: no convolution core and scratch")
    return conv


@variant(CORE)
def emit_core(kb: KernelBuild) -> None:
    """The convolution alone, into the scratch: one thread per element (the loop kernel's
    indexing), or threads sharing elements for long sums (conv_split's group/tile modes)."""
    conv = _conv(kb)
    scratch = scratch_of(conv, kb.instr)

    def store(index, value) -> None:
        store_element(kb.ctx, scratch.shape, kb.scratch, scratch.index(kb, index), value)

    if not kb.recipe.param("unroll", 0):  # planned with a group or slices (split_part)
        emit_split(kb, conv, conv.shape, store)
        return
    b = kb.b
    tile = recipe_tile(kb.recipe, conv)
    threads = conv.shape if tile is None else tile.starts(conv.shape)  # a thread per tile
    linear = b.add(b.mul(kb.ctaid(), kb.ntid()), kb.tid())
    with b.if_then(b.icmp_unsigned("<", linear, kb.i64(max(1, threads.num_elements)))):
        index = physical_index(kb, threads, linear)
        if tile is None:
            store(index, kb.gen(conv)(index))
        else:
            index = tile.first(kb.ctx, index)
            gens = [kb.gen(op) for op in conv.operands]
            for j, value in enumerate(tile_generator(kb.ctx, conv, gens, tile)(index)):
                store(tile.at(kb.ctx, index, j), value)


@variant(EPILOGUE)
def emit_epilogue(kb: KernelBuild) -> None:
    """The loop kernel with the convolution's value read back from the scratch."""
    conv = _conv(kb)
    scratch = scratch_of(conv, kb.instr)
    kb.gens = generators_with(kb, {id(conv): lambda index: load_element(
        kb.ctx, scratch.shape, kb.scratch, scratch.index(kb, list(index)))})
    emit_loop(kb)


def described(made: Thunk, instr: Instruction, operands) -> Thunk | None:
    """A split fusion's thunks with the core's launch as a ConvLaunch carrying its cuDNN form
    (y: the scratch slice, the launch's last argument); None when `made` is no split."""
    if not isinstance(made, Sequential) or len(made.thunks) != 2:
        return None
    core, epilogue = made.thunks
    if not isinstance(core, Launch) or not isinstance(epilogue, Launch) or \
            core.variant != CORE or epilogue.variant != EPILOGUE:
        return None
    conv = split_core(instr, kernel_computation(instr).root)
    if conv is None:
        return None
    call = core_call(instr, conv, operands, core.args[-1], scratch_of(conv, instr).shape)
    fields = {f: getattr(core, f) for f in ("name", "kernel", "variant", "grid", "block",
                                             "shared_bytes", "args")}
    return Sequential(made.name, (ConvLaunch(**fields, dnn=call), epilogue))
