"""Composing lowerings over a computation: one generator per instruction, cached per block.

`computation_generators` walks a (fused) computation in dataflow order and builds each
instruction's generator from its operands' generators. `emit_scalar_computation` inlines a
scalar computation (reducers, comparators, scatter combiners, map bodies) on given values.
"""

from __future__ import annotations

from collections.abc import Sequence

from llvmlite import ir

from ...errors import UnsupportedError
from ...ir import Computation, Instruction, Opcode
from .registry import Generator, lookup


def _index_key(v: ir.Value):
    if isinstance(v, ir.Constant):
        return ("c", str(v))
    return id(v)


def cached(ctx, gen: Generator) -> Generator:
    """Reuse a generator's value for the same index within one basic block.

    Values computed in block B can be reused later in B; a generator that emits control flow
    ends in another block, so entries are filed under the block current after the call.
    """
    cache: dict[tuple, tuple] = {}

    def generate(index):
        key = (id(ctx.builder.block), tuple(_index_key(v) for v in index))
        hit = cache.get(key)
        if hit is not None:
            return hit[0]
        value = gen(index)
        end_key = (id(ctx.builder.block), key[1])
        # Keep index, block alive: the key holds their ids.
        cache[end_key] = (value, list(index), ctx.builder.block)
        return value

    return generate


def computation_generators(ctx, comp: Computation,
                           params: Sequence[Generator]) -> dict[int, Generator]:
    """Generators of every instruction reachable in `comp`, keyed by id(instruction)."""
    gens: dict[int, Generator] = {}
    for instr in comp.post_order():
        if instr.opcode == Opcode.PARAMETER:
            n = instr.attrs.parameter_number
            if n >= len(params):
                raise UnsupportedError(f"{comp.name}: parameter {n} has no value")
            gens[id(instr)] = params[n]
            continue
        try:
            lowering = lookup(instr, ctx.target_kind)
        except UnsupportedError as e:
            # Kernel emitters handle some roots (scatter, ...) themselves: fail only if used.
            gens[id(instr)] = _unsupported(e)
            continue
        operand_gens = [gens[id(o)] for o in instr.operands]
        gens[id(instr)] = cached(ctx, lowering(ctx, instr, operand_gens))
    return gens


def regenerate(ctx, root: Instruction, gens: dict[int, Generator],
               replaced: dict[int, Generator]) -> Generator:
    """`root`'s generator with the generators of some instructions below it replaced
    (`replaced`, by id): every instruction between them and `root` gets a new generator on
    the new operands; the rest keep theirs (`gens`)."""
    fresh = dict(replaced)
    depends: dict[int, bool] = {}

    def build(instr: Instruction) -> bool:
        key = id(instr)
        if key not in depends:
            below = [build(o) for o in instr.operands]  # operands first: post order
            depends[key] = key in replaced or any(below)
            if depends[key] and key not in replaced:
                lowering = lookup(instr, ctx.target_kind)
                operand_gens = [fresh.get(id(o), gens[id(o)]) for o in instr.operands]
                fresh[key] = cached(ctx, lowering(ctx, instr, operand_gens))
        return depends[key]

    build(root)
    return fresh.get(id(root), gens[id(root)])


def _unsupported(error: UnsupportedError) -> Generator:
    def generate(index):
        raise error

    return generate


def root_generator(ctx, comp: Computation, params: Sequence[Generator]) -> Generator:
    return computation_generators(ctx, comp, params)[id(comp.root)]


def constant_generator(value):
    def generate(index):
        return value

    return generate


def emit_scalar_computation(ctx, comp: Computation, args: Sequence) -> list[ir.Value]:
    """Inline scalar computation `comp` on `args`; returns the root's leaf values in order."""
    result = root_generator(ctx, comp, [constant_generator(a) for a in args])([])
    return flatten(result)


def flatten(value) -> list:
    if isinstance(value, tuple | list):
        return [leaf for v in value for leaf in flatten(v)]
    return [value]


def operand_index(instr: Instruction, i: int, index: list) -> list:
    """The index to read operand i of an elementwise op (scalar operands broadcast)."""
    if instr.operands[i].shape.rank == 0:
        return []
    return index
