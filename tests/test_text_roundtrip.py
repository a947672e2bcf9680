"""HLO text over the whole sample corpus, checked against XLA's own text and the protos.

Oracles: the text XLA printed (`*.opt.hlo` is XLA's long form, which the printer must
reproduce byte for byte), an independent line scan of every sample's instructions, and the
proto form of the same module read by the frontend (printed text must agree).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hloc.ir.text.parser import parse_module
from hloc.ir.text.printer import print_module, shape_text

from .conftest import SAMPLES, require_samples


def _texts() -> list[str]:
    if not SAMPLES.is_dir():
        return []
    files = sorted(SAMPLES.glob("*.hlo")) + sorted(SAMPLES.glob("ops/*.hlo"))
    return [str(p.relative_to(SAMPLES)) for p in files]


TEXTS = _texts()
OPT_TEXTS = [t for t in TEXTS if t.endswith(".opt.hlo")]


@pytest.fixture(autouse=True)
def _need_samples():
    require_samples()


@pytest.mark.parametrize("name", TEXTS)
def test_print_parse_print_is_a_fixpoint(name):
    text = (SAMPLES / name).read_text()
    first = print_module(parse_module(text, name))
    second = print_module(parse_module(first, name + " (reprinted)"))
    assert first == second


# An instruction line as XLA writes it, read without the parser: name, shape text, opcode.
_LINE = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.+?)\s+([a-z][a-z0-9\-]*)\(", re.M)
_COMP = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*(?:\([^\n]*\)\s*->\s*[^\n]*?)?\s*\{\s*$", re.M)


def _scan(text: str) -> dict[str, list[tuple[str, str, str]]]:
    """computation -> [(instruction, shape text, opcode)] straight from the text lines."""
    out: dict[str, list[tuple[str, str, str]]] = {}
    current = None
    for line in text.splitlines():
        head = _COMP.match(line)
        if head:
            current = out.setdefault(head.group(1), [])
            continue
        m = _LINE.match(line)
        if m and current is not None:
            current.append(m.groups())
    return out


@pytest.mark.parametrize("name", TEXTS)
def test_structure_matches_the_xla_text(name):
    text = (SAMPLES / name).read_text()
    module = parse_module(text, name)
    parsed = {c.name: [(i.name, shape_text(i.shape), i.opcode.value) for i in c.instructions]
              for c in module.computations}
    assert parsed == _scan(text)


def _xla_long_form(text: str) -> str:
    """XLA's text minus what hloc does not keep (stack-frame tables, SPMD propagation flags)."""
    text = re.sub(r"\n\nFileNames\n.*?\n\n\n", "\n\n", text, flags=re.S)
    text = re.sub(r", allow_spmd_sharding_propagation_to_\w+=\{[^}]*\}", "", text)
    return text.rstrip() + "\n"


@pytest.mark.parametrize("name", OPT_TEXTS)
def test_xla_text_reprints_byte_for_byte(name):
    text = (SAMPLES / name).read_text()
    assert print_module(parse_module(text, name)).rstrip() + "\n" == _xla_long_form(text)


def _proto_pairs() -> list[str]:
    return [t for t in TEXTS if (SAMPLES / (t[: -len(".hlo")] + ".pb")).exists()]


def _blocks(text: str) -> tuple[str, list[str]]:
    """Header and computations; XLA orders computations differently in protos and text."""
    header, *comps = text.split("\n\n")
    return header, sorted(c for c in comps if c)


@pytest.mark.parametrize("name", _proto_pairs())
def test_text_and_proto_give_the_same_module(name):
    load = pytest.importorskip("hloc.frontend").load
    optimized = name.endswith(".opt.hlo")
    # The unoptimized text (as_hlo_text) carries no metadata; both forms elide big constants.
    opts = dict(print_large_constants=False, print_metadata=optimized)
    from_proto = print_module(load(SAMPLES / (name[: -len(".hlo")] + ".pb")).module, **opts)
    from_text = print_module(parse_module((SAMPLES / name).read_text(), name), **opts)
    assert _blocks(from_text) == _blocks(from_proto)


def _chain(n: int) -> str:
    lines = ["HloModule chain", "", "ENTRY %main (p: f32[8,4]) -> f32[8,4] {",
             "  %p = f32[8,4]{1,0} parameter(0)", "  %a0 = f32[8,4]{1,0} add(%p, %p)"]
    lines += [f"  %a{i} = f32[8,4]{{1,0}} add(%a{i - 1}, %p)" for i in range(1, n - 1)]
    lines.append(f"  ROOT %a{n - 1} = f32[8,4]{{1,0}} add(%a{n - 2}, %p)")
    return "\n".join(lines) + "\n}\n"


def test_parses_20000_instructions():
    # Speed is measured in benchmarks/bench_frontend.py (`make bench`), not asserted here.
    module = parse_module(_chain(20_000))
    assert module.instruction_count() == 20_001
    assert len(module.entry.parameter(0).users) == 20_000


def test_chain_reprints_unchanged():
    text = _chain(50)
    assert print_module(parse_module(text)) == text.replace("HloModule chain", (
        "HloModule chain, entry_computation_layout={(f32[8,4]{1,0})->f32[8,4]{1,0}}")) + "\n"


def test_sample_list_is_not_empty_when_samples_exist():
    if any(Path(SAMPLES).glob("*.hlo")):
        assert TEXTS and OPT_TEXTS
