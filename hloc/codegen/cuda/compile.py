"""`compile_cuda`: a planned module → the CUDA bundle members.

Members: `kernels.ll` (every kernel's LLVM IR, linked, before optimization), for every
`--cuda-arch` `kernels.ARCH.ptx` and, when ptxas is found, `kernels.ARCH.cubin`; and the GPU
schedule as `gpu_thunks.json` / `gpu_thunks.txt` (with each kernel's registers, shared
memory and spills from `ptxas -v`).
"""

from __future__ import annotations

from ...thunks.serialize import gpu_program_to_json
from ...thunks.text import gpu_program_to_text
from ...util.log import get_logger
from . import ptx as ptx_mod
from . import ptxas as ptxas_mod
from .build import build_gpu_program
from .target import cuda_target

log = get_logger("hloc.codegen.cuda")


def nvptx_opt_level(opt_level: int) -> int:
    # Even -O0 bundles get optimized PTX: unoptimized NVPTX code spills everything.
    return 3 if opt_level >= 2 else 1


def compile_cuda(module, plan, options) -> tuple[dict[str, bytes], dict]:
    """Plan, emit and compile every GPU kernel of `module` (scheduled and assigned by `plan`).

    Returns (bundle members, manifest additions: target.cuda_archs and notes).
    """
    target = cuda_target(tuple(getattr(options, "cuda_archs", ()) or ()))
    built = build_gpu_program(module, plan.program, target)
    program = built.program
    linked = ptx_mod.link_texts([str(m) for m in built.modules.values()])
    members: dict[str, bytes] = {"kernels.ll": linked.encode()}
    notes = list(program.notes)
    ptxas = ptxas_mod.find_ptxas()
    max_isa = ptxas_mod.max_ptx_isa(ptxas) if ptxas else None
    resources: dict[str, dict] = {}
    level = nvptx_opt_level(getattr(options, "opt_level", 2))
    for arch, result in ptx_mod.compile_ptx(linked, target, level, max_isa).items():
        members[f"kernels.{arch}.ptx"] = result.ptx.encode()
        notes.extend(result.notes)
        if ptxas is None:
            continue
        cubin = ptxas_mod.assemble(result.ptx, arch, ptxas)
        members[f"kernels.{arch}.cubin"] = cubin.cubin
        resources[arch] = {k: r.to_json() for k, r in sorted(cubin.kernels.items())}
    if ptxas is None:
        notes.append("ptxas not found (HLOC_PTXAS, PATH, CUDA_HOME, nvidia-cuda-nvcc): the "
                     "bundle holds PTX only; the driver compiles it when loaded")
    members["gpu_thunks.json"] = gpu_program_to_json(program, resources)
    first = resources.get(target.archs[0], {})
    members["gpu_thunks.txt"] = gpu_program_to_text(program, first).encode()
    return members, {"target": {"cuda_archs": list(target.archs)}, "notes": notes}

