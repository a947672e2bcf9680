"""hloc.registry.Registry, and that every registry's explicit module list is complete."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hloc.errors import UnsupportedError
from hloc.registry import Registry

HLOC = Path(__file__).resolve().parent.parent / "hloc"


def test_register_lookup_and_keys():
    reg: Registry[str, int] = Registry("thing")
    reg.register("a", "b")(1)
    reg.add("c", 2)
    assert reg.lookup("a") == reg.lookup("b") == 1
    assert reg.keys() == {"a", "b", "c"}
    assert list(reg) == ["a", "b", "c"]
    assert reg.get("zz") is None and "zz" not in reg


def test_remove_takes_a_temporary_entry_out():
    reg: Registry[str, int] = Registry("thing")
    reg.add("a", 1)
    reg.add("tmp", 2)
    reg.remove("tmp")
    reg.remove("never-there")
    assert list(reg) == ["a"] and "tmp" not in reg
    reg.add("tmp", 3)  # no longer a duplicate
    assert reg.lookup("tmp") == 3


def test_duplicates_are_rejected():
    reg: Registry[str, int] = Registry("thing")
    reg.add("a", 1)
    with pytest.raises(RuntimeError, match="duplicate thing for 'a'"):
        reg.add("a", 2)
    reg.add("a", 3, target="cpu")
    with pytest.raises(RuntimeError, match="duplicate thing for 'a' \\(target cpu\\)"):
        reg.register("a", target="cpu")(4)


def test_lookup_names_the_table():
    reg: Registry[str, int] = Registry("frobnicator")
    with pytest.raises(UnsupportedError, match="no frobnicator for 'x' \\(in y\\)"):
        reg.lookup("x", "in y")


def test_target_overrides():
    reg: Registry[str, str] = Registry("lowering")
    reg.add("add", "generic")
    reg.add("add", "cpu add", target="cpu")
    reg.add("dot", "cuda dot", target="cuda")
    assert reg.get("add") == "generic"
    assert reg.get("add", target="cpu") == "cpu add"
    assert reg.get("add", target="cuda") == "generic"
    assert reg.get("dot") is None and reg.lookup("dot", target="cuda") == "cuda dot"
    assert reg.keys() == {"add"} and reg.keys("cuda") == {"add", "dot"}


def test_modules_load_on_first_use():
    reg: Registry[str, int] = Registry("thing", modules=("hloc.registry_test_missing",),
                                       target_modules={"cpu": ("hloc.registry_test_gone",)})
    reg.add("a", 1)  # registering loads nothing
    with pytest.raises(ModuleNotFoundError, match="registry_test_missing"):
        reg.get("a")
    with pytest.raises(ModuleNotFoundError, match="registry_test_gone"):
        reg.get("a", target="cpu")


def _registering_modules(folder: str, decorator: str) -> set[str]:
    pattern = re.compile(rf"^@{decorator}\b", re.M)
    return {f"hloc.{folder.replace('/', '.')}.{p.stem}" for p in (HLOC / folder).glob("*.py")
            if pattern.search(p.read_text())}


@pytest.mark.parametrize("registry,folder,decorator", [
    ("hloc.passes.base:PASSES", "passes", "register_pass"),
    ("hloc.ir.shape_inference.registry:SPECS", "ir/shape_inference", "register"),
    ("hloc.runtime.interpreter.registry:IMPLS", "runtime/interpreter", "impl"),
    ("hloc.codegen.cpu.kernel:SPECIAL_SEGMENTS", "codegen/cpu", "special_segment"),
    ("hloc.codegen.cpu.thunk_kernels:NATIVE_KINDS", "codegen/cpu", "native_kind"),
    ("hloc.codegen.cuda.parts:ITEM_PLANNERS", "codegen/cuda", "plans"),
    ("hloc.codegen.cuda.kernel:VARIANTS", "codegen/cuda", "variant"),
])
def test_module_lists_are_complete(registry, folder, decorator):
    """A new module that registers must be listed, or its entries would never load."""
    import importlib

    module, name = registry.split(":")
    reg = getattr(importlib.import_module(module), name)
    listed = set(reg._modules) | {module}
    assert _registering_modules(folder, decorator) <= listed


def test_elemental_module_list_is_complete():
    from hloc.codegen.elemental import registry

    found = _registering_modules("codegen/elemental", "(emits|emits_complex|register)")
    assert found <= set(registry.LOWERINGS._modules)
    targeted = set()
    for folder in ("codegen/cpu", "codegen/cuda"):
        targeted |= {m for m in _registering_modules(folder, "emits")}
    assert targeted == {m for ms in registry._TARGET_MODULES.values() for m in ms}
