"""CPU members: the objects against kernels.json against thunks.json.

Checks (MemberProblem naming the member at the first failure):
- kernels.json is a JSON object of version 3 (or 2, from earlier hlocs) whose objects' and
  `thunks_sha256` hashes are the sha256 of this bundle's members (members are bound to each
  other); version 3 lists 1..MAX_OBJECTS objects named cpu.o or cpu.N.o, each once, and every
  such member of the bundle is listed; version 2 has cpu.o alone (`object_sha256`);
- each object is an ELF64 little-endian relocatable object (a bounds-checked reader, elf.py)
  and no global symbol is defined by two of them;
- what they import and none defines equals kernels.json's `external_symbols`, and each name
  is allowed (symbols.py);
- every kernel, composite-step and driver symbol is defined in one of the objects;
- every kernel / composite entry names a thunk of thunks.json with that many operand and
  output slices; composite refs and scratch ranges lie inside the thunk and scratch_bytes;
- every driver names consecutive thunks that exist, and its slots are kernel thunks (their
  pointer arrays or pool jobs), Gemm thunks or LAPACK custom-call thunks the driver runs, or
  slices inside their allocations.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from .elf import ElfError, ElfSymbols, read_symbols
from .symbols import allowed_import
from .validate import MemberProblem, ProgramCheck, decode_program

KERNELS_VERSIONS = (2, 3)  # 2: one object, cpu.o (hloc before partitioned code generation)
OBJECT_MEMBER = re.compile(r"^cpu(\.[0-9]{1,3})?\.o$")
MAX_OBJECTS = 64  # far above what hloc writes (llvm_split: 6); bounds the work a lie can cause


def validate_cpu(bundle) -> None:
    """All checks of the module docstring for a bundle holding objects or kernels.json."""
    fail = _failer(bundle.path)
    meta = _kernels_json(bundle)
    if "thunks.json" not in bundle.members:
        raise fail("thunks.json", "missing (kernels.json refers to it)")
    objects = _objects(fail, bundle, meta)
    program_bytes = bytes(bundle.members["thunks.json"])
    if meta.get("thunks_sha256") != hashlib.sha256(program_bytes).hexdigest():
        raise fail("thunks.json", "is not the program kernels.json was compiled for "
                                  "(hash differs)")
    symbols, importer = _symbols(fail, objects)
    _check_imports(fail, meta, symbols.undefined, importer, objects[0][0])
    program = decode_program(bundle, "thunks.json")
    check = ProgramCheck(bundle.path, "kernels.json", program, _NoModule())
    check.sizes = [a.size for a in program.allocations]  # validated by validate_bundle
    thunks = {t.name: t for t in program.walk()}
    _check_entries(fail, meta, thunks, symbols.defined)
    _check_drivers(fail, check, meta, thunks, symbols.defined)


def listed_objects(meta: dict) -> list[tuple[Any, Any]]:
    """(member, sha256) of every object, in load order, as kernels.json gives them (not yet
    checked: see _objects)."""
    if meta.get("version") == 2:
        return [("cpu.o", meta.get("object_sha256"))]
    return [(o.get("member"), o.get("sha256")) if isinstance(o, dict) else (None, None)
            for o in meta.get("objects") or ()]


def _objects(fail, bundle, meta: dict) -> list[tuple[str, bytes]]:
    """(member, bytes) of every listed object, each checked against its hash."""
    listed = listed_objects(meta)
    names = [name for name, _ in listed]
    if not 1 <= len(listed) <= MAX_OBJECTS:
        raise fail("kernels.json", f"lists {len(listed)} objects (1 to {MAX_OBJECTS})")
    if not all(isinstance(n, str) and OBJECT_MEMBER.match(n) for n in names) \
            or len(set(names)) != len(names):
        raise fail("kernels.json", "objects must be distinct members named cpu.o or cpu.N.o")
    unlisted = sorted(n for n in bundle.members if OBJECT_MEMBER.match(n) and n not in names)
    if unlisted:
        raise fail(unlisted[0], "is an object kernels.json does not list")
    objects = []
    for name, digest in listed:
        if name not in bundle.members:
            raise fail(name, "missing (kernels.json lists it)")
        data = bytes(bundle.members[name])
        if digest != hashlib.sha256(data).hexdigest():
            raise fail(name, "is not the object kernels.json was compiled with (hash differs)")
        objects.append((name, data))
    return objects


def _symbols(fail, objects: list[tuple[str, bytes]]) -> tuple[ElfSymbols, dict[str, str]]:
    """The objects' global symbols together: defined by one, and imported by some but defined
    by none (what the loader resolves in the process); and which object imports each."""
    defined: dict[str, str] = {}
    importer: dict[str, str] = {}
    for name, data in objects:
        try:
            symbols = read_symbols(data)
        except ElfError as e:
            raise fail(name, f"not a valid object: {e}") from None
        for symbol in sorted(symbols.defined):
            if symbol in defined:
                raise fail(name, f"defines {symbol}, which {defined[symbol]} defines too")
            defined[symbol] = name
        for symbol in symbols.undefined:
            importer.setdefault(symbol, name)
    undefined = frozenset(importer.keys() - defined.keys())
    return ElfSymbols(frozenset(defined), undefined), importer


class _NoModule:
    computations = ()


def _failer(path: str):
    def fail(member: str, problem: str) -> MemberProblem:
        return MemberProblem(path, member, problem)
    return fail


def _kernels_json(bundle) -> dict:
    if "kernels.json" not in bundle.members:
        raise MemberProblem(bundle.path, "kernels.json", "missing (the bundle has object code)")
    try:
        meta = json.loads(bytes(bundle.members["kernels.json"]))
    except (ValueError, RecursionError) as e:
        raise MemberProblem(bundle.path, "kernels.json", f"not valid JSON ({e})") from None
    version = meta.get("version") if isinstance(meta, dict) else None
    if version not in KERNELS_VERSIONS or isinstance(version, bool):
        raise MemberProblem(bundle.path, "kernels.json",
                            f"unsupported version {version!r} (this hloc reads "
                            f"{' and '.join(map(str, KERNELS_VERSIONS))}; recompile the model)")
    assert isinstance(meta, dict)
    sections = (("kernels", dict), ("composites", dict), ("drivers", list),
                ("external_symbols", list)) + ((("objects", list),) if version == 3 else ())
    for key, kind in sections:
        if not isinstance(meta.get(key), kind):
            raise MemberProblem(bundle.path, "kernels.json", f"{key} is not a {kind.__name__}")
    return meta


def _check_imports(fail, meta: dict, undefined: frozenset[str], importer: dict[str, str],
                   first: str) -> None:
    """The imports against external_symbols and the allowed names (the failure names the
    object importing the first offending symbol)."""
    declared = meta["external_symbols"]
    if sorted(undefined) != sorted(str(n) for n in declared):
        extra = sorted(undefined - {str(n) for n in declared})
        raise fail(importer[extra[0]] if extra else first,
                   f"imports {', '.join(extra)} that kernels.json does not declare" if extra
                   else "imports differ from kernels.json's external_symbols")
    refused = sorted(n for n in undefined if not allowed_import(n))
    if refused:
        raise fail(importer[refused[0]], f"imports {', '.join(refused)}, which generated code "
                   "never calls (only libm, compiler-runtime and hloc runtime symbols)")


def _defined(fail, symbol, defined: frozenset[str], where: str) -> None:
    if not isinstance(symbol, str) or symbol not in defined:
        raise fail("kernels.json", f"{where}: symbol {symbol!r} is not defined in the object "
                                   "code")


def _check_entries(fail, meta: dict, thunks: dict, defined: frozenset[str]) -> None:
    for name, k in meta["kernels"].items():
        thunk = thunks.get(name)
        if thunk is None or not isinstance(k, dict):
            raise fail("kernels.json", f"kernel {name!r} names no thunk of thunks.json")
        _defined(fail, k.get("symbol"), defined, f"kernel {name}")
        operands, outputs = thunk.reads(), thunk.writes()
        if (k.get("num_operands"), k.get("num_outputs")) != (len(operands), len(outputs)):
            raise fail("kernels.json", f"kernel {name}: operand/output counts differ from "
                                       "its thunk")
    for name, c in meta["composites"].items():
        thunk = thunks.get(name)
        if thunk is None or not isinstance(c, dict):
            raise fail("kernels.json", f"composite {name!r} names no thunk of thunks.json")
        _check_composite(fail, name, c, (thunk.reads(), thunk.writes()), defined)


def _check_composite(fail, name: str, c: dict, io, defined: frozenset[str]) -> None:
    scratch_bytes = c.get("scratch_bytes")
    scratch = c.get("scratch")
    if not isinstance(scratch_bytes, int) or not 0 <= scratch_bytes <= 1 << 40:
        raise fail("kernels.json", f"composite {name}: bad scratch_bytes")
    if not isinstance(scratch, list) or not all(
            isinstance(r, list) and len(r) == 2 and all(isinstance(v, int) and v >= 0 for v in r)
            and r[0] + r[1] <= scratch_bytes for r in scratch):
        raise fail("kernels.json", f"composite {name}: scratch range outside scratch_bytes")
    limits = {"operand": len(io[0]), "output": len(io[1]), "scratch": len(scratch)}
    for step in c.get("steps") or ():
        if not isinstance(step, dict):
            raise fail("kernels.json", f"composite {name}: malformed step")
        if step.get("kind") == "kernel":
            _defined(fail, step.get("symbol"), defined, f"composite {name}")
        for ref in _refs(step):
            if (not isinstance(ref, list) or len(ref) != 2 or ref[0] not in limits
                    or not isinstance(ref[1], int) or not 0 <= ref[1] < limits[ref[0]]):
                raise fail("kernels.json", f"composite {name}: reference {ref!r} is outside "
                                           "its thunk's slices")


def _refs(step: dict) -> list:
    refs = list(step.get("buffers") or ())
    refs += [step[k] for k in ("lhs", "rhs", "output", "input", "kernel") if k in step]
    epilogue = step.get("epilogue")
    if epilogue is not None:  # a convolution's fused epilogue (codegen/cpu/conv_epilogue.py)
        ops = epilogue.get("ops") if isinstance(epilogue, dict) else None
        if not isinstance(ops, list) or not all(isinstance(op, list) and op for op in ops) \
                or epilogue.get("replaces") != 1:  # the step after the convolution
            return [None]  # reported as a bad reference
        refs.append(epilogue.get("output"))
        refs += [op[1] for op in ops if len(op) > 1]
    return refs


def _composite_step(meta: dict, value) -> str | None:
    """The kind of the composite step a driver's ["step", [thunk, index]] slot names."""
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)
            and isinstance(value[1], int)):
        return None
    steps = (meta.get("composites") or {}).get(value[0], {}).get("steps") or []
    step = steps[value[1]] if 0 <= value[1] < len(steps) else None
    return step.get("kind") if isinstance(step, dict) else None


def _check_drivers(fail, check: ProgramCheck, meta: dict, thunks: dict,
                   defined: frozenset[str]) -> None:
    from ..buffers.assignment import Slice
    from ..thunks.base import walk

    for d in meta["drivers"]:
        if not isinstance(d, dict) or not isinstance(d.get("thunks"), list) or not d["thunks"]:
            raise fail("kernels.json", "malformed driver entry")
        _defined(fail, d.get("symbol"), defined, "driver")
        if any(not isinstance(t, str) or t not in thunks for t in d["thunks"]):
            raise fail("kernels.json", f"driver {d['symbol']} names a thunk thunks.json lacks")
        # Gemm and LAPACK slots name thunks the driver runs (the runtime builds their jobs
        # from the driver's own thunks).
        own = {v.thunk.name: v.thunk for v in walk(thunks[t] for t in d["thunks"])}
        for slot in d.get("slots") or ():
            kind, value = slot if isinstance(slot, list) and len(slot) == 2 else (None, None)
            if kind == "buffers" and value in meta["kernels"]:
                continue
            if kind == "kernel_job" and isinstance(value, str) and value in own \
                    and value in meta["kernels"]:
                continue
            if kind in ("gemm", "host") and isinstance(value, str) and value in own \
                    and own[value].kind == {"gemm": "gemm", "host": "custom-call"}[kind]:
                continue
            if kind == "step" and _composite_step(meta, value) in ("gemm", "kernel"):
                continue
            if kind == "slice" and isinstance(value, list) and len(value) == 3:
                check.member = "kernels.json"
                check.check_slice(Slice(*value), f"driver {d['symbol']}")
                continue
            raise fail("kernels.json", f"driver {d['symbol']}: bad slot {slot!r}")
