"""Helpers for the attacker tests: real bundles, re-hashed the way an attacker would do it.

An attacker who can write a bundle can recompute every unkeyed digest: member sha256s in the
manifest (hloc's own writer does it), the header digest, and the binding hashes kernels.json
records. `repack` does all of that, so each test shows that the *validator* refuses the
change, not the checksums.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from hloc.bundle import read_bundle, write_bundle

ENDLESS_LOOP_HLO = """HloModule endless

cond {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  z = s32[] constant(-1)
  ROOT c = pred[] compare(i, z), direction=NE
}

body {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  lim = s32[] constant(1000)
  k = s32[] remainder(j, lim)
  x = f32[4] get-tuple-element(p), index=1
  y = f32[4] add(x, x)
  ROOT t = (s32[], f32[4]) tuple(k, y)
}

ENTRY main {
  a = f32[4] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[4]) tuple(zero, a)
  w = (s32[], f32[4]) while(init), condition=cond, body=body
  ROOT r = f32[4] get-tuple-element(w), index=1
}
"""


def compile_text(tmp: Path, text: str, name: str, **options) -> Path:
    from hloc.compiler import CompileOptions, compile

    src = tmp / f"{name}.hlo"
    src.write_text(text)
    out = tmp / f"{name}.bundle"
    compile(str(src), str(out), CompileOptions(**options))
    return out


def assert_refused_in_one_line(bad: Path, fragment: str, device: str = "cuda-emulated") -> str:
    """Loading bundle `bad` on `device` raises InputError matching `fragment`, and `hlo-run`
    on it prints one line naming the bundle and exits 2; the line."""
    import pytest
    from click.testing import CliRunner

    from hloc.cli.run import cli
    from hloc.errors import InputError
    from hloc.runtime import load

    with pytest.raises(InputError, match=fragment):
        load(str(bad), device)
    result = CliRunner().invoke(cli, [str(bad), "--device", device, "--zero-inputs"])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert bad.name in result.output
    return result.output


def members_of(path: Path) -> tuple[dict, dict[str, bytes]]:
    b = read_bundle(path)
    manifest = {k: v for k, v in b.manifest.items() if k not in ("members", "format_version")}
    return manifest, {name: b.members[name] for name in b.members}


def rebind(members: dict[str, bytes]) -> None:
    """Recompute kernels.json's binding hashes, as an attacker would."""
    if "kernels.json" not in members:
        return
    meta = json.loads(members["kernels.json"])
    if meta.get("version") == 2:
        meta["object_sha256"] = hashlib.sha256(members.get("cpu.o", b"")).hexdigest()
    objects = meta.get("objects")
    for entry in objects if isinstance(objects, list) else ():
        if isinstance(entry, dict) and isinstance(entry.get("member"), str):
            entry["sha256"] = hashlib.sha256(members.get(entry["member"], b"")).hexdigest()
    meta["thunks_sha256"] = hashlib.sha256(members["thunks.json"]).hexdigest()
    members["kernels.json"] = json.dumps(meta).encode()


def repack(src: Path, dst: Path, *, edit_json: dict | None = None,
           replace: dict | None = None, manifest_edit=None, bind: bool = True,
           sign_key=None) -> Path:
    """Copy bundle `src` to `dst` with members changed and every digest recomputed.

    edit_json: member -> fn(doc) editing the decoded JSON in place; replace: member -> bytes.
    """
    manifest, members = members_of(src)
    for name, fn in (edit_json or {}).items():
        doc = json.loads(members[name])
        fn(doc)
        members[name] = json.dumps(doc, sort_keys=True).encode()
    members.update(replace or {})
    if manifest_edit is not None:
        manifest_edit(manifest)
    if bind:
        rebind(members)
    write_bundle(dst, manifest=manifest, members=members, sign_key=sign_key)
    return dst


def system_object(obj_ir: str) -> bytes:
    """cpu.o compiled from the bundle's own IR plus a function that calls system()."""
    from hloc.codegen import llvm
    from hloc.codegen.target import host_target

    evil = obj_ir + ('\ndeclare i32 @system(ptr)\n@cmd = private constant [5 x i8] c"true\\00"\n'
                     'define void @hloc_evil() {\n  %r = call i32 @system(ptr @cmd)\n'
                     '  ret void\n}\n')
    return llvm.compile_ir(evil, host_target(), 0).object_code
