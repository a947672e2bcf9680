"""The emulator's entry point for the runtime: a bundle's kernels rebuilt and compiled for the
host (`--device cuda-emulated` JIT-compiles at load time, so it needs this codegen step)."""

from __future__ import annotations

from ....errors import InputError, UnsupportedError
from ....ir import Module
from ...cuda.build import emit_recipe, ir_digest
from ...cuda.target import cuda_target
from .host import EmulatedLibrary, build_host_ir, compile_for_host, link_host_texts

# Above every parameter value a compile writes (the largest: bitonic sort sizes up to 2048).
MAX_RECIPE_PARAM = 4096


def load_kernels(program, module: Module, archs: tuple[str, ...], where: str | None = None):
    """Rebuild every kernel of GpuProgram `program` from its recipe and `module`, check it
    against the recorded digest of the bundled IR, rewrite it for the host and compile it."""
    target = cuda_target(archs or ("sm_80",))
    instructions = {i.name: i for c in module.computations for i in c.instructions}
    digests = dict(program.kernel_ir_sha256)
    texts, infos = [], {}
    for recipe in program.kernels:
        instr = instructions.get(recipe.instruction)
        if instr is None:
            raise InputError(f"kernel {recipe.name}: the bundle's module has no instruction "
                             f"%{recipe.instruction}", where)
        items = recipe.items
        if not items or len(set(items)) != len(items) or min(items) < 0:
            raise InputError(f"kernel {recipe.name}: recipe root items {list(items)} are not "
                             "distinct indices", where)
        wild = [f"{k}={v}" for k, v in recipe.params if not 0 <= v <= MAX_RECIPE_PARAM]
        if wild:  # an edited recipe: emitting it could take hours (an unrolled loop, a tile)
            raise InputError(f"kernel {recipe.name}: recipe parameter {wild[0]} is outside "
                             f"0-{MAX_RECIPE_PARAM}", where)
        try:
            mod = emit_recipe(recipe, instr, target)
        except (LookupError, ValueError, ArithmeticError, TypeError, AttributeError,
                UnsupportedError) as e:
            # A recipe hloc wrote always rebuilds (the compile emitted it): this one was edited.
            raise InputError(f"kernel {recipe.name}: its recipe ({recipe.variant}, "
                             f"{dict(recipe.params)}) cannot be rebuilt: {e}", where) from None
        if digests.get(recipe.name) not in (None, ir_digest(mod)):
            raise InputError(f"kernel {recipe.name}: rebuilt IR differs from the bundled "
                             "kernel (bundle from another hloc version?)", where)
        host = build_host_ir(mod, [recipe.name])
        texts.append(host.text)
        infos.update(host.kernels)
    return EmulatedLibrary(compile_for_host(link_host_texts(texts)), infos)
