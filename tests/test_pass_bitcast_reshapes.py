"""bitcast-reshapes: reshapes/transposes that move no element become bitcasts, values unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from hloc.ir import Opcode
from hloc.ir.text.parser import parse_module
from hloc.passes import lookup_pass
from hloc.runtime.interpreter import evaluate

TEMPLATE = """
HloModule m

ENTRY main {{
  x = {src} parameter(0)
  ROOT r = {dst} {op}
}}
"""

CASES = [
    # (operand shape, result shape, op, becomes a bitcast)
    ("f32[4,6]{1,0}", "f32[24]{0}", "reshape(x)", True),
    ("f32[2,3,4]{2,1,0}", "f32[6,4]{1,0}", "reshape(x)", True),
    ("f32[4,1,6]{2,1,0}", "f32[1,4,6]{2,1,0}", "transpose(x), dimensions={1,0,2}", True),
    ("f32[4,6,1]{2,1,0}", "f32[4,1,6]{2,1,0}", "transpose(x), dimensions={0,2,1}", True),
    ("f32[4,6]{1,0}", "f32[6,4]{1,0}", "transpose(x), dimensions={1,0}", False),
    ("f32[2,3,4]{2,1,0}", "f32[3,2,4]{2,1,0}", "transpose(x), dimensions={1,0,2}", False),
    ("f32[4,6]{0,1}", "f32[24]{0}", "reshape(x)", False),  # column-major operand
]


def _run_pass(text: str):
    module = parse_module(text)
    changed = lookup_pass("bitcast-reshapes")().run(module)
    return module, changed


@pytest.mark.parametrize("src,dst,op,expect", CASES)
def test_bitcast_only_when_no_element_moves(src, dst, op, expect):
    text = TEMPLATE.format(src=src, dst=dst, op=op)
    before = parse_module(text)
    module, changed = _run_pass(text)
    assert changed == expect
    root = module.entry.root
    assert (root.opcode == Opcode.BITCAST) == expect
    dims = before.entry.parameters[0].shape.dims
    x = np.arange(np.prod(dims), dtype=np.float32).reshape(dims)
    want = evaluate(before, [x])
    got = evaluate(module, [x])
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_element_type_change_is_kept():
    text = TEMPLATE.format(src="s32[4]{0}", dst="s32[2,2]{1,0}", op="reshape(x)")
    module, changed = _run_pass(text)
    assert changed and module.entry.root.opcode == Opcode.BITCAST
    module, changed = _run_pass(text.replace("ROOT r = s32[2,2]{1,0} reshape(x)",
                                             "ROOT r = f32[4]{0} bitcast-convert(x)"))
    assert not changed
