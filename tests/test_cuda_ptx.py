"""NVPTX code generation through llvmlite and cubins through ptxas (pure: no GPU needed)."""

from __future__ import annotations

import os
import stat

import pytest
from llvmlite import ir

from hloc.codegen.cuda import ptx, ptxas
from hloc.codegen.cuda.nvvm import Nvvm, kernel_function
from hloc.codegen.cuda.target import cuda_target
from hloc.codegen.elemental.context import EmitContext
from hloc.codegen.elemental.types import F32
from hloc.errors import CheckFailed, InputError

pytestmark = pytest.mark.pure

PTXAS = ptxas.find_ptxas()
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas not found")


def vector_add_module(name: str = "vadd", n: int = 1000) -> str:
    m = ir.Module("k")
    m.triple = "nvptx64-nvidia-cuda"
    fn = kernel_function(m, name, 3, 256)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    nv = Nvvm(m, b, name)
    ctx = EmitContext(m, b, cuda_target())
    i = b.add(b.mul(nv.sreg64("ctaid"), nv.sreg64("ntid")), nv.sreg64("tid"))
    with b.if_then(b.icmp_signed("<", i, ctx.i64(n))):
        x = b.load(b.gep(fn.args[0], [i], source_etype=F32), typ=F32)
        y = b.load(b.gep(fn.args[1], [i], source_etype=F32), typ=F32)
        b.store(b.fadd(x, y), b.gep(fn.args[2], [i], source_etype=F32))
    b.ret_void()
    nv.finish()
    return str(m)


def test_ptx_for_each_arch():
    out = ptx.compile_ptx(vector_add_module(), cuda_target(("sm_80", "sm_90")))
    assert set(out) == {"sm_80", "sm_90"}
    for arch, result in out.items():
        assert f".target {arch}" in result.ptx
        assert ".visible .entry vadd(" in result.ptx
        assert ptx.ptx_version(result.ptx) is not None
        # f32 flush-to-zero (the reference's denormal behaviour) reaches the instructions.
        assert "add.rn.ftz.f32" in result.ptx


def test_version_is_lowered_only_when_needed():
    text = ".version 7.8\n.target sm_90\n"
    same, notes = ptx.limit_ptx_version(text, (9, 0))
    assert same == text and notes == ()
    lowered, notes = ptx.limit_ptx_version(text, (7, 5))
    assert ".version 7.5" in lowered and notes


def test_bad_arch_names():
    with pytest.raises(InputError, match="sm_XX"):
        cuda_target(("compute_80",))
    with pytest.raises(InputError, match="too old"):
        cuda_target(("sm_50",))


def test_link_keeps_every_kernel():
    linked = ptx.link_texts([vector_add_module("a"), vector_add_module("b")])
    assert "@a(" in linked and "@b(" in linked


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_accepts_and_reports(arch):
    code = ptx.emit_ptx(vector_add_module(), arch).ptx
    result = ptxas.assemble(code, arch, PTXAS)
    assert result.cubin[:4] == b"\x7fELF"
    res = result.kernels["vadd"]
    assert 0 < res.registers < 64 and res.spill_stores == 0


@needs_ptxas
def test_ptxas_error_names_the_kernel():
    code = ptx.emit_ptx(vector_add_module("broken"), "sm_80").ptx
    code = code.replace("add.rn.ftz.f32", "bogus.f32", 1)
    with pytest.raises(CheckFailed, match="kernel broken"):
        ptxas.assemble(code, "sm_80", PTXAS)


def test_resource_log_parsing():
    log = ("ptxas info    : Compiling entry function 'k1' for 'sm_80'\n"
           "ptxas info    : Function properties for k1\n"
           "    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 40 registers, used 1 barriers, 2112 bytes smem, 368 bytes cmem[0]\n"
           "ptxas info    : Compiling entry function 'k2' for 'sm_80'\n"
           "ptxas info    : Used 8 registers\n")
    res = ptxas.parse_resources(log)
    assert res["k1"] == ptxas.KernelResources(40, 2112, 16, 8, 4)
    assert res["k2"].registers == 8 and res["k2"].shared_bytes == 0


def test_kernel_at_line():
    text = ".version 7.0\n.visible .entry a(\n)\n{\n}\n.visible .entry b(\n)\n{\nbad\n}\n"
    assert ptxas.kernel_at_line(text, 3) == "a"
    assert ptxas.kernel_at_line(text, 9) == "b"


def test_find_ptxas_prefers_the_environment(tmp_path, monkeypatch):
    fake = tmp_path / "ptxas"
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.99'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("HLOC_PTXAS", str(fake))
    assert ptxas.find_ptxas() == str(fake)
    assert ptxas.ptxas_version(str(fake)) == (12, 4)
    assert ptxas.max_ptx_isa(str(fake)) == (8, 4)


def test_find_ptxas_in_cuda_home(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "ptxas"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.delenv("HLOC_PTXAS", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert ptxas.find_ptxas() == os.path.join(str(tmp_path), "bin", "ptxas")
