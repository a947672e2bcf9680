"""Validation of a bundle's members against each other, before any device uses them.

`read_bundle` proves a bundle is intact, not that it is sound: its hashes are unkeyed, so
anyone who can write the file can recompute them. A thunk program whose slices point past
their allocations, or kernels.json naming symbols the objects lack, would corrupt memory or crash
inside LLVM. `validate_bundle(bundle)` checks every member hloc reads, whatever the device,
and raises InputError("member NAME: problem", path=bundle) at the first problem:

- module.pb decodes, and its entry computation's signature equals the manifest's `entry`
  (inputs are allocated from the manifest); its custom calls name targets hloc runs, and
  LAPACK calls have the results their operands imply (hloc.ir.custom_calls.check_call);
- thunks.json / gpu_thunks.json decode; allocations are numbered 0..n-1 with sizes in
  0..MAX_ALLOCATION_BYTES; every slice anywhere in the program (a generic walk over the
  dataclass fields, nested thunks included) names an allocation and lies inside it;
- parameter, output, constant and upload/download slices are exactly their HLO shape's byte
  size, and every thunk named after an instruction with array results writes slices of those
  results' sizes (kernel outputs, gemm / copy / memset destinations);
- GPU BLAS descriptors reach only inside their slices (hloc.runtime.cuda.cublas.check_call),
  and so do cuDNN descriptors, whose sizes must also agree with each other
  (hloc.runtime.cuda.cudnn.check_conv), and whose x, w and y slices lie inside arguments of
  their launch (a split fusion's y inside its scratch slice: graph and stream dependencies
  know only the arguments);
- CPU members (the objects cpu*.o, kernels.json): see validate_cpu.py; GPU code images
  (PTX, cubin): see validate_gpu.py.

Walks are iterative: a deeply nested program is refused as data, never by RecursionError.
"""

from __future__ import annotations

import dataclasses

from ..errors import HlocError, InputError
from .manifest import entry_section

MAX_ALLOCATION_BYTES = 1 << 46  # 64 TiB: no host or device has more; bounds all arithmetic
# "scratch": the GPU program's per-stream scratch buffers (hloc.codegen.cuda.build).
_ALLOCATION_KINDS = frozenset({"parameter", "constant", "output", "temp", "scratch"})


class MemberProblem(InputError):
    """One member is unsound; `str()` is `bundle: member NAME: problem`."""

    def __init__(self, bundle_path: str, member: str, problem: str):
        super().__init__(f"member {member}: {problem}", path=bundle_path)
        self.member = member


def validate_bundle(bundle) -> None:
    """Every check of the module docstring; MemberProblem at the first failure."""
    module = _check_entry(bundle)
    for name in ("thunks.json", "gpu_thunks.json"):
        if name in bundle.members:
            program = decode_program(bundle, name)
            ProgramCheck(bundle.path, name, program, module).run()
            if name == "gpu_thunks.json":
                from .validate_gpu import validate_gpu

                validate_gpu(bundle, program)
    if "kernels.json" in bundle.members or any(n.startswith("cpu.") and n.endswith(".o")
                                               for n in bundle.members):
        from .validate_cpu import validate_cpu

        validate_cpu(bundle)


def decode_program(bundle, name: str):
    """The decoded thunk program of member `name` (MemberProblem if it does not decode)."""
    try:
        if name == "thunks.json":
            from ..thunks import program_from_json

            return program_from_json(bytes(bundle.members[name]))
        from ..thunks.serialize import gpu_program_from_json

        return gpu_program_from_json(bytes(bundle.members[name]))[0]
    except HlocError as e:
        raise MemberProblem(bundle.path, name, e.message.removeprefix(f"{name}: ")) from None
    except (RecursionError, TypeError, ValueError, AttributeError) as e:
        raise MemberProblem(bundle.path, name, f"malformed program ({type(e).__name__})") from None


def _check_entry(bundle):
    from ..frontend import load_bytes

    try:
        module = load_bytes(bytes(bundle.module_proto), f"{bundle.path}:module.pb").module
    except HlocError as e:
        raise MemberProblem(bundle.path, "module.pb", e.message) from None
    except RecursionError:
        raise MemberProblem(bundle.path, "module.pb", "nested too deeply") from None
    try:
        actual = entry_section(module)
        _check_custom_calls(module)
    except HlocError as e:
        raise MemberProblem(bundle.path, "module.pb", e.message) from None
    if actual != bundle.manifest["entry"]:
        raise MemberProblem(bundle.path, "manifest.json",
                            "entry signature differs from module.pb's entry computation")
    return module


def _is_count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_ALLOCATION_BYTES


def iter_fields(root):
    """(owner, field name, value) for every value reachable from `root` through dataclass
    fields and tuples/lists (owner: the nearest dataclass), depth-first and without
    recursion (programs may nest arbitrarily)."""
    stack = [(None, "", root)]
    while stack:
        owner, name, node = stack.pop()
        if node is not root:
            yield owner, name, node
        if dataclasses.is_dataclass(node) and not isinstance(node, type):
            stack.extend((node, f.name, getattr(node, f.name)) for f in dataclasses.fields(node))
        elif isinstance(node, tuple | list):
            stack.extend((owner, name, item) for item in node)


def _check_custom_calls(module) -> None:
    """Every custom call names a target hloc runs, with results that fit its operands (a
    compile refuses any other; only a tampered bundle has one)."""
    from ..ir import Opcode
    from ..ir.custom_calls import check_call

    for comp in module.computations:
        for instr in comp.instructions:
            if instr.opcode == Opcode.CUSTOM_CALL:
                check_call(instr)


class ProgramCheck:
    """Slices against allocations and HLO shapes for one decoded thunk program."""

    def __init__(self, bundle_path: str, member: str, program, module):
        self.path, self.member, self.program, self.module = bundle_path, member, program, module
        self.sizes: list[int] = []
        self.instructions = {i.name: i for c in module.computations for i in c.instructions}

    def fail(self, problem: str) -> MemberProblem:
        return MemberProblem(self.path, self.member, problem)

    def run(self) -> None:
        self._allocations()
        from ..buffers.assignment import Slice

        for owner, name, value in iter_fields(self.program):
            if isinstance(value, Slice):
                self.check_slice(value, f"{_label(owner)}.{name}")
            elif type(value).__name__ == "BlasCall":
                self._blas(owner, value)
            elif type(value).__name__ == "ConvCall":
                self._dnn(owner, value)
        self._entry_slices()
        self._thunk_sizes()

    def _allocations(self) -> None:
        for i, a in enumerate(self.program.allocations):
            if a.index != i:
                raise self.fail(f"allocation {i} is numbered {a.index!r}")
            if not _is_count(a.size):
                raise self.fail(f"allocation {i} has size {a.size!r} (0..{MAX_ALLOCATION_BYTES})")
            if a.kind not in _ALLOCATION_KINDS:
                raise self.fail(f"allocation {i} has unknown kind {a.kind!r}")
            self.sizes.append(a.size)

    def check_slice(self, s, where: str) -> None:
        """A slice names an allocation and lies inside it."""
        if not all(_is_count(v) for v in (s.allocation, s.offset, s.size)):
            raise self.fail(f"{where}: malformed slice {s.to_json()!r}")
        if s.allocation >= len(self.sizes):
            raise self.fail(f"{where}: slice names allocation {s.allocation}, the program has "
                            f"{len(self.sizes)}")
        if s.offset + s.size > self.sizes[s.allocation]:
            raise self.fail(f"{where}: slice {s.to_json()} reaches past allocation "
                            f"{s.allocation} ({self.sizes[s.allocation]} bytes)")

    def expect_size(self, s, shape, where: str) -> None:
        if not shape.is_array or s.size != shape.byte_size:
            raise self.fail(f"{where}: slice of {s.size} bytes for {shape} "
                            f"({shape.byte_size if shape.is_array else '?'} bytes)")

    def _blas(self, owner, call) -> None:
        from ..runtime.cuda.cublas import check_call

        try:
            check_call(call, getattr(owner, "name", "?"))
        except HlocError as e:
            raise self.fail(e.message.removeprefix(f"{self.member}: ")) from None

    def _dnn(self, owner, call) -> None:
        from ..runtime.cuda.cudnn import check_conv

        name = getattr(owner, "name", "?")
        args = getattr(owner, "args", ())
        for label, s in (("x", call.x), ("w", call.w), ("y", call.y), *(("args", a) for a in args)):
            self.check_slice(s, f"{_label(owner)}.dnn.{label}")
        try:
            check_conv(call, name)
        except HlocError as e:
            raise self.fail(e.message.removeprefix(f"{self.member}: ")) from None
        for label in ("x", "w", "y"):
            s = getattr(call, label)
            if not any(_inside(s, a) for a in args):
                raise self.fail(f"cuDNN descriptor for %{name}: its {label} slice "
                                f"{s.to_json()} lies in no argument of its launch")

    def _entry_slices(self) -> None:
        from .validate_shapes import entry_slices

        for shape_of, s, where in entry_slices(self.program):
            try:
                shape = shape_of(self.module.entry, self.instructions)
            except (IndexError, KeyError, ValueError, TypeError, AttributeError, HlocError):
                raise self.fail(f"{where}: names no value of the entry computation") from None
            self.expect_size(s, shape, where)

    def _thunk_sizes(self) -> None:
        from .validate_shapes import thunk_outputs

        for thunk in self.program.walk():
            instr = self.instructions.get(getattr(thunk, "name", None))
            for shape, s, where in thunk_outputs(thunk, instr):
                self.expect_size(s, shape, where)


def _label(owner) -> str:
    name = getattr(owner, "name", None)
    kind = getattr(owner, "kind", None) or type(owner).__name__
    return f"{kind} %{name}" if isinstance(name, str) else kind


def _inside(s, a) -> bool:
    """Whether slice s lies inside slice a (slices checked well formed already)."""
    return s.allocation == a.allocation and a.offset <= s.offset and (
        s.offset + s.size <= a.offset + a.size)
