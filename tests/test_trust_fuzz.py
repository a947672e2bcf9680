"""Fuzz targets (issue 17): random and mutated inputs to the bundle reader and validator, the
ELF reader, the proto and text loaders and the .npz reader give clean errors, never a crash.
Bounded here; `make fuzz` runs them longer (tools/fuzz.py)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hloc.bundle.elf import ElfError, read_symbols
from hloc.errors import HlocError

pytestmark = pytest.mark.pure
FUZZ = settings(max_examples=int(os.environ.get("HLOC_FUZZ_EXAMPLES", "25")), deadline=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(st.binary(max_size=512))
def test_elf_reader(data):
    try:
        read_symbols(b"\x7fELF\x02\x01" + data)
    except ElfError:
        pass


@FUZZ
@given(st.binary(max_size=256))
def test_model_loader(data):
    from hloc.frontend import load_bytes

    try:
        load_bytes(data, "fuzz")
    except HlocError:
        pass


@FUZZ
@given(st.text(max_size=200))
def test_text_loader(text):
    from hloc.frontend import load_bytes

    try:
        load_bytes(("HloModule m\n" + text).encode(), "fuzz.hlo")
    except HlocError:
        pass


@FUZZ
@given(st.binary(max_size=300))
def test_npz_reader(tmp_path_factory, data):
    from hloc.runtime.io import read_arrays

    path = tmp_path_factory.mktemp("npz") / "x.npz"
    path.write_bytes(b"PK\x03\x04" + data)
    try:
        read_arrays(str(path), max_bytes=1 << 20)
    except HlocError:
        pass


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    from .trust_support import compile_text

    path = compile_text(tmp_path_factory.mktemp("img"),
                        "HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n", "m")
    return path.read_bytes()


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=4))
def test_bundle_reader_and_validator(tmp_path_factory, image, flips):
    from hloc.bundle import read_bundle
    from hloc.bundle.validate import validate_bundle

    data = bytearray(image)
    for at, value in flips:
        data[at % len(data)] = value
    path = tmp_path_factory.mktemp("b") / "m.bundle"
    path.write_bytes(bytes(data))
    try:
        validate_bundle(read_bundle(path))
    except HlocError:
        pass
