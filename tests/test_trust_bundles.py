"""Issue 17, as an attacker: tampered bundles, re-hashed, are refused (exit 2, one line)."""

from __future__ import annotations

import json

import pytest

from hloc.errors import InputError
from hloc.runtime import load

from .conftest import SAMPLES
from .trust_support import ENDLESS_LOOP_HLO, compile_text, members_of, repack, system_object

pytestmark = pytest.mark.cpu


@pytest.fixture(scope="module")
def loop_bundle(tmp_path_factory):
    return compile_text(tmp_path_factory.mktemp("loop"), ENDLESS_LOOP_HLO, "loop")


@pytest.fixture(scope="module")
def mlp_bundle(tmp_path_factory):
    from hloc.compiler import compile

    out = tmp_path_factory.mktemp("mlp") / "mlp.bundle"
    compile(str(SAMPLES / "mlp.pb"), str(out))
    return out


def _refused(path, member: str, fragment: str = "", device=None) -> str:
    with pytest.raises(InputError) as info:
        load(str(path), device)
    text = str(info.value)
    assert "\n" not in text and str(path) in text and f"member {member}" in text, text
    assert fragment in text, text
    return text


def _first_slice_owner(doc):
    return doc["parameters"][0]["slice"]


def test_untampered_bundles_load(mlp_bundle, loop_bundle):
    load(str(mlp_bundle))
    load(str(loop_bundle))
    load(str(mlp_bundle), "interpreter")


@pytest.mark.parametrize("edit,fragment", [
    (lambda d: d["parameters"][0]["slice"].__setitem__(1, 1 << 20), "reaches past"),
    (lambda d: d["allocations"][0].__setitem__("size", 0), "reaches past"),
    (lambda d: d["allocations"][0].__setitem__("size", -8), "has size"),
    (lambda d: d["allocations"][0].__setitem__("index", 7), "numbered"),
    (lambda d: d["outputs"][0]["slice"].__setitem__(0, 999), "names allocation 999"),
    (lambda d: d["parameters"][0]["slice"].__setitem__(2, 4), "bytes for"),
    (lambda d: d["sequence"][0].__setitem__("kind", "no-such-kind"), "unknown thunk kind"),
])
def test_thunks_json_tampering(tmp_path, loop_bundle, edit, fragment):
    bad = repack(loop_bundle, tmp_path / "bad.bundle", edit_json={"thunks.json": edit})
    _refused(bad, "thunks.json", fragment)
    _refused(bad, "thunks.json", fragment, device="interpreter")  # on every device


def test_kernel_output_slice_of_wrong_size(tmp_path, mlp_bundle):
    def shrink(doc):
        kernel = next(t for t in doc["sequence"] if t["kind"] == "kernel")
        kernel["outputs"][0][2] -= 4
    _refused(repack(mlp_bundle, tmp_path / "b.bundle", edit_json={"thunks.json": shrink}),
             "thunks.json", "bytes for")


@pytest.mark.parametrize("obj,fragment", [
    (b"\x00" * 64, "not a valid object"),
    (b"\x7fELF\x02\x01" + bytes(58), "not a valid object"),
    (b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x01\x00" + bytes(46) + b"\x40\x00\xff\xff",
     "not a valid object"),
])
def test_bad_objects(tmp_path, loop_bundle, obj, fragment):
    _refused(repack(loop_bundle, tmp_path / "b.bundle", replace={"cpu.o": obj}), "cpu.o",
             fragment)


def test_object_from_another_bundle(tmp_path, loop_bundle, mlp_bundle):
    other = members_of(mlp_bundle)[1]["cpu.0.o"]  # mlp is compiled as several objects
    _refused(repack(loop_bundle, tmp_path / "a.bundle", replace={"cpu.o": other}, bind=False),
             "cpu.o", "hash differs")
    declare_none = {"kernels.json": lambda d: d.__setitem__("external_symbols", [])}
    text = _refused(repack(loop_bundle, tmp_path / "b.bundle", replace={"cpu.o": other},
                           edit_json=declare_none), "kernels.json", "not defined in the object")
    assert "symbol" in text


def test_system_import_is_refused(tmp_path, loop_bundle):
    members = members_of(loop_bundle)[1]
    obj = system_object(members["module.ll"].decode())

    def declare(doc):
        doc["external_symbols"] = sorted(doc["external_symbols"] + ["system"])
    bad = repack(loop_bundle, tmp_path / "evil.bundle", replace={"cpu.o": obj},
                 edit_json={"kernels.json": declare})
    _refused(bad, "cpu.o", "imports system")
    undeclared = repack(loop_bundle, tmp_path / "evil2.bundle", replace={"cpu.o": obj})
    _refused(undeclared, "cpu.o", "does not declare")


@pytest.mark.parametrize("edit,member,fragment", [
    (lambda d: d["drivers"][0].__setitem__("symbol", "hloc_nothing"), "kernels.json",
     "not defined"),
    (lambda d: d["drivers"][0]["slots"].__setitem__(0, ["slice", [0, 1 << 30, 4]]),
     "kernels.json", "reaches past"),
    (lambda d: d["drivers"][0]["slots"].__setitem__(0, ["exec", "sh"]), "kernels.json",
     "bad slot"),
    (lambda d: d["drivers"][0]["slots"].__setitem__(0, ["gemm", next(iter(d["kernels"]))]),
     "kernels.json", "bad slot"),  # a product list for a thunk that is no Gemm
    (lambda d: d.__setitem__("external_symbols", []), "cpu.o", "does not declare"),
    (lambda d: d.__setitem__("version", 1), "kernels.json", "unsupported version"),
    (lambda d: next(iter(d["kernels"].values())).__setitem__("num_operands", 99),
     "kernels.json", "counts differ"),
])
def test_kernels_json_tampering(tmp_path, loop_bundle, edit, member, fragment):
    _refused(repack(loop_bundle, tmp_path / "b.bundle", edit_json={"kernels.json": edit}),
             member, fragment)


def test_manifest_entry_must_match_module(tmp_path, loop_bundle):
    def widen(m):
        m["entry"]["parameters"][0]["shape"] = [1 << 20]
    _refused(repack(loop_bundle, tmp_path / "b.bundle", manifest_edit=widen), "manifest.json",
             "entry signature")


def test_module_from_another_bundle(tmp_path, loop_bundle, mlp_bundle):
    other = members_of(mlp_bundle)[1]["module.pb"]
    _refused(repack(loop_bundle, tmp_path / "b.bundle", replace={"module.pb": other}),
             "manifest.json", "entry signature")


def _hlo_run(*args):
    """`hlo-run ARGS` in-process (a subprocess costs seconds of imports): (exit code, output)."""
    from click.testing import CliRunner

    from hloc.cli.run import cli

    r = CliRunner().invoke(cli, [str(a) for a in args])
    return r.exit_code, r.output


def test_cli_exit_2_one_line_nothing_overwritten(tmp_path, loop_bundle):
    bad = repack(loop_bundle, tmp_path / "bad.bundle", edit_json={
        "thunks.json": lambda d: d["parameters"][0]["slice"].__setitem__(1, 1 << 20)})
    out = tmp_path / "out.npz"
    out.write_bytes(b"keep me")
    code, output = _hlo_run(bad, "--zero-inputs", "--output", out)
    assert code == 2, output
    assert output.count("\n") == 1 and "member thunks.json" in output
    assert out.read_bytes() == b"keep me"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.fixture(scope="module")
def mlp_cuda_bundle(tmp_path_factory):
    pytest.importorskip("llvmlite")
    from hloc.compiler import CompileOptions, compile

    good = tmp_path_factory.mktemp("mlp_cuda") / "mlp.cuda.bundle"
    compile(str(SAMPLES / "mlp.pb"), str(good), CompileOptions(target="cuda"))
    return good


def test_gpu_thunks_json_tampering(tmp_path, mlp_cuda_bundle):
    def stretch(doc):
        doc["allocations"][0]["size"] = 0
    bad = repack(mlp_cuda_bundle, tmp_path / "bad.bundle", edit_json={"gpu_thunks.json": stretch})
    _refused(bad, "gpu_thunks.json", "reaches past", device="cuda-emulated")
    assert json.loads(members_of(mlp_cuda_bundle)[1]["gpu_thunks.json"])  # the good one is JSON


def _first(doc, match, what: str) -> dict:
    """The first JSON object `match` accepts, depth-first."""
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if match(node):
                return node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    raise AssertionError(f"no {what}")


def _first_kernel(doc) -> dict:
    """The first JSON object with a string "kernel" field (a kernel launch)."""
    return _first(doc, lambda node: isinstance(node.get("kernel"), str), "kernel launch")


def _images(members: dict) -> tuple[str, str]:
    ptx = next(n for n in members if n.endswith(".ptx"))
    return ptx, ptx.removesuffix(".ptx") + ".cubin"


def test_gpu_kernel_names_must_exist_in_ptx_and_cubin(tmp_path, mlp_cuda_bundle):
    _, members = members_of(mlp_cuda_bundle)
    ptx, cubin = _images(members)
    name = _first_kernel(json.loads(members["gpu_thunks.json"]))["kernel"]
    renamed = repack(mlp_cuda_bundle, tmp_path / "renamed.bundle", edit_json={
        "gpu_thunks.json": lambda d: _first_kernel(d).__setitem__("kernel", "hloc_evil")})
    _refused(renamed, ptx.removesuffix(".ptx"), "lacks kernel hloc_evil", device="cuda-emulated")
    evil = name[:-1] + ("X" if name[-1] != "X" else "Y")  # same length: offsets stay valid
    text = members[ptx].replace(f".entry {name}(".encode(), f".entry {evil}(".encode())
    assert text != members[ptx]
    no_entry = repack(mlp_cuda_bundle, tmp_path / "no_entry.bundle", replace={ptx: text})
    _refused(no_entry, ptx, f"lacks kernel {name}", device="cuda-emulated")
    if cubin in members:
        image = members[cubin].replace(name.encode() + b"\0", evil.encode() + b"\0")
        no_symbol = repack(mlp_cuda_bundle, tmp_path / "no_symbol.bundle", replace={cubin: image})
        _refused(no_symbol, cubin, f"lacks kernel {name}", device="cuda-emulated")
        junk = repack(mlp_cuda_bundle, tmp_path / "junk.bundle", replace={cubin: b"\x7fELF" + bytes(60)})
        _refused(junk, cubin, "bad cubin")


def test_cuda_bundle_with_a_plain_dot_validates_and_runs(tmp_path):
    """A Gemm thunk of the GPU program (GemmLaunch: kernel arguments, no lhs/rhs/output) is
    validated through its BLAS descriptor, not refused: every such bundle failed on a GPU."""
    import numpy as np

    from hloc.compiler import CompileOptions, compile
    from hloc.runtime import load

    text = tmp_path / "dot.hlo"
    text.write_text("HloModule d\n\nENTRY e {\n  a = f32[16,8]{1,0} parameter(0)\n"
                    "  b = f32[8,4]{1,0} parameter(1)\n  ROOT d = f32[16,4]{1,0} dot(a, b), "
                    "lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n")
    compile(str(text), str(tmp_path / "d.bundle"), CompileOptions(target="cuda"))
    a = np.arange(128, dtype=np.float32).reshape(16, 8) / 7
    b = np.arange(32, dtype=np.float32).reshape(8, 4) / 5
    [got] = load(str(tmp_path / "d.bundle"), "cuda-emulated").run([a, b])
    np.testing.assert_allclose(got, a @ b, rtol=1e-5)



def test_an_edited_kernel_recipe_is_one_clear_line(tmp_path):
    """The emulator rebuilds kernels from their recipes: a recipe whose parameters no longer
    make sense is refused with the kernel's name, not an internal error."""
    from .test_cuda_conv_split import WGRAD, _text

    good = compile_text(tmp_path, _text(WGRAD, n=16, h=16, w=16, ci=3, co=16), "wgrad",
                        target="cuda")

    def no_group(doc):
        recipe = next(k for k in doc["kernels"] if k["variant"] == "conv.core")
        recipe["params"] = {"slices": 0}
    bad = repack(good, tmp_path / "bad.bundle", edit_json={"gpu_thunks.json": no_group})
    with pytest.raises(InputError) as info:
        load(str(bad), "cuda-emulated")
    text = str(info.value)
    assert "\n" not in text and "recipe (conv.core" in text and "cannot be rebuilt" in text


def _first_of_kind(doc, kind: str) -> dict:
    return _first(doc, lambda node: node.get("kind") == kind, f"{kind} thunk")


@pytest.mark.parametrize("sample, edit, fragment", [
    # A conditional that claims a pred selector where its instruction's is an s32: the set
    # kernel of its SWITCH node (and the host path) would read it as the other type.
    ("switch", lambda d: _first_of_kind(d, "conditional").__setitem__("selector_is_pred", True),
     "selector (as the thunk reads it)"),
    # A while predicate slice longer than a pred.
    ("while_dynamic", lambda d: _first_of_kind(d, "while")["predicate"].__setitem__(2, 4),
     "predicate"),
])
def test_control_flow_reads_are_checked(tmp_path, sample, edit, fragment):
    """The scalar a loop or conditional decides on (on the host, or in the runtime's kernel
    that sets a conditional graph node) is exactly its instruction's pred or s32."""
    from hloc.compiler import CompileOptions, compile

    good = tmp_path / f"{sample}.bundle"
    compile(str(SAMPLES / f"{sample}.pb"), str(good), CompileOptions(target="cuda"))
    load(str(good), "cuda-emulated")
    bad = repack(good, tmp_path / "bad.bundle", edit_json={"gpu_thunks.json": edit})
    text = _refused(bad, "gpu_thunks.json", fragment, device="cuda-emulated")
    assert "bytes for" in text, text


@pytest.fixture(scope="module")
def lapack_loop_bundle(tmp_path_factory):
    """The linalg_in_loop sample: two drivers (a scan, a fori_loop) with LAPACK slots."""
    from hloc.compiler import compile

    out = tmp_path_factory.mktemp("lapack") / "loop.bundle"
    compile(str(SAMPLES / "ops/linalg_in_loop.pb"), str(out))
    return out


def _host_slot_to(pick):
    """An edit pointing the first driver's first ["host", ...] slot at pick(kernels.json)."""
    def edit(doc):
        slots = next(d["slots"] for d in doc["drivers"] if any(s[0] == "host" for s in d["slots"]))
        at = next(i for i, s in enumerate(slots) if s[0] == "host")
        slots[at] = ["host", pick(doc)]
    return edit


@pytest.mark.parametrize("pick", [
    lambda d: next(iter(d["kernels"])),  # a kernel thunk, no custom call
    lambda d: "no_such_thunk",
    lambda d: ["lu"],
], ids=["kernel", "missing", "not-a-name"])
def test_a_drivers_lapack_slot_must_name_one_of_its_own_calls(tmp_path, lapack_loop_bundle, pick):
    load(str(lapack_loop_bundle))
    _refused(repack(lapack_loop_bundle, tmp_path / "b.bundle",
                    edit_json={"kernels.json": _host_slot_to(pick)}), "kernels.json", "bad slot")


@pytest.fixture(scope="module")
def kernel_job_bundle(tmp_path_factory):
    """A loop around a kernel big enough to run as a pool job inside its driver."""
    from .test_cpu_runtime import BIG_LOOP

    return compile_text(tmp_path_factory.mktemp("kjob"), BIG_LOOP, "loop")


@pytest.mark.parametrize("pick", [
    lambda d: "no_such_thunk",
    lambda d: ["t"],
    lambda d: next(s[1] for s in d["drivers"][0]["slots"] if s[0] == "slice"),
], ids=["missing", "not-a-name", "a-slice"])
def test_a_drivers_kernel_job_slot_must_name_one_of_its_own_kernels(tmp_path, kernel_job_bundle,
                                                                    pick):
    """The runtime builds a ["kernel_job", thunk] slot's job from that kernel's own pointer
    array and units: a slot naming anything else is refused before any code runs."""
    load(str(kernel_job_bundle))

    def edit(doc):
        slots = doc["drivers"][0]["slots"]
        at = next(i for i, s in enumerate(slots) if s[0] == "kernel_job")
        slots[at] = ["kernel_job", pick(doc)]
    _refused(repack(kernel_job_bundle, tmp_path / "b.bundle",
                    edit_json={"kernels.json": edit}), "kernels.json", "bad slot")
