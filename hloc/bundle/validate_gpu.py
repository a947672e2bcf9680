"""GPU members checked against the thunk program before any device loads them.

Every kernel `gpu_thunks.json` launches must exist in each code image the runtimes may load:
an `.entry` of every `kernels.<arch>.ptx` and a defined global symbol of every
`kernels.<arch>.cubin` (read with the bounds-checked ELF reader). Otherwise a re-hashed bundle
could launch a kernel the image lacks (a driver error mid-run) or pair one program with
another program's code. Checked on cuda and cuda-emulated alike, from `validate_bundle`.
"""

from __future__ import annotations

import re

from .elf import ElfError, read_symbols
from .validate import MemberProblem, iter_fields

_ENTRY = re.compile(r"^[ \t]*(?:\.visible[ \t]+|\.weak[ \t]+)?\.entry[ \t]+([\w$.]+)", re.M)
_MAX_PTX_BYTES = 1 << 30  # bounds the regex scan; hloc's PTX is far smaller


def launched_kernels(program) -> set[str]:
    """Names of the kernels the program's Kernel thunks launch (nested thunks included)."""
    from ..thunks.gpu import Launch

    return {value for owner, field, value in iter_fields(program)
            if isinstance(owner, Launch) and field == "kernel" and isinstance(value, str)}


def ptx_entries(path: str, member: str, data: bytes) -> set[str]:
    """The `.entry` names of a PTX member (MemberProblem if it is not PTX text)."""
    if len(data) > _MAX_PTX_BYTES:
        raise MemberProblem(path, member, f"PTX of {len(data)} bytes is larger than hloc writes")
    try:
        text = bytes(data).decode("ascii")
    except UnicodeDecodeError:
        raise MemberProblem(path, member, "not PTX text (non-ASCII bytes)") from None
    return set(_ENTRY.findall(text))


def cubin_symbols(path: str, member: str, data: bytes) -> set[str]:
    """Global symbols a cubin defines (MemberProblem if it is not a well-formed ELF image)."""
    try:
        return set(read_symbols(data, executable=True).defined)
    except ElfError as e:
        raise MemberProblem(path, member, f"bad cubin: {e}") from None


def validate_gpu(bundle, program) -> None:
    """Each code image defines every kernel `program` (decoded gpu_thunks.json) launches."""
    kernels = launched_kernels(program)
    images = [n for n in bundle.members if n.startswith("kernels.") and n.endswith((".ptx", ".cubin"))]
    if kernels and not images:
        raise MemberProblem(bundle.path, "gpu_thunks.json", "launches kernels but the bundle has no PTX or cubin")
    for name in sorted(images):
        data = bytes(bundle.members[name])
        have = (ptx_entries if name.endswith(".ptx") else cubin_symbols)(bundle.path, name, data)
        missing = sorted(kernels - have)
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise MemberProblem(bundle.path, name, f"lacks kernel {missing[0]}{more}, which "
                                                   "gpu_thunks.json launches")
