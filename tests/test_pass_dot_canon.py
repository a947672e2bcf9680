"""Golden and property tests for dot canonicalization ([B,M,K] x [B,K,N])."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hloc.ir import Opcode
from hloc.ir.text.parser import parse_module
from hloc.passes.dot_canonicalizer import is_canonical
from hloc.runtime.interpreter import evaluate

from .support.golden import golden, results_equal
from .support.hlo import run_passes

pytestmark = pytest.mark.pure


def dots(module):
    return [i for c in module.computations for i in c.instructions if i.opcode == Opcode.DOT]


def test_canonical_matmul_is_left_alone():
    module, printed = golden("""
HloModule mm
ENTRY e {
  a = s32[4,5] parameter(0)
  b = s32[5,3] parameter(1)
  ROOT d = s32[4,3] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""", "dot-canonicalizer", "CHECK: ROOT %d = s32[4,3]{1,0} dot(%a, %b)")
    assert "transpose" not in printed and "reshape" not in printed


def test_batch_dims_move_first_and_collapse():
    module, _ = golden("""
HloModule batched
ENTRY e {
  a = s32[3,2,4,5] parameter(0)
  b = s32[2,5,3,6] parameter(1)
  ROOT d = s32[2,3,4,6] dot(a, b), lhs_batch_dims={1,0}, lhs_contracting_dims={3}, rhs_batch_dims={0,2}, rhs_contracting_dims={1}
}
""", "dot-canonicalizer", """
        CHECK-DAG: transpose(%a), dimensions={1,0,2,3}
        CHECK-DAG: s32[6,4,5]{2,1,0} reshape(
        CHECK-DAG: transpose(%b), dimensions={0,2,1,3}
        CHECK-DAG: s32[6,5,6]{2,1,0} reshape(
        CHECK: s32[6,4,6]{2,1,0} dot(%_, %_), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
        CHECK: ROOT %_ = s32[2,3,4,6]{3,2,1,0} reshape(
    """)
    assert all(is_canonical(d) for d in dots(module))


def test_matrix_vector_and_outer_products_get_unit_dimensions():
    module, _ = golden("""
HloModule mv
ENTRY e {
  a = s32[4,5] parameter(0)
  v = s32[5] parameter(1)
  u = s32[3] parameter(2)
  mv = s32[4] dot(a, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  outer = s32[4,3] dot(mv, u), lhs_contracting_dims={}, rhs_contracting_dims={}
  vv = s32[] dot(v, v), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  ROOT t = (s32[4], s32[4,3], s32[]) tuple(mv, outer, vv)
}
""", "dot-canonicalizer")
    shapes = sorted((d.operands[0].shape.dims, d.operands[1].shape.dims) for d in dots(module))
    assert shapes == [((1, 5), (5, 1)), ((4, 1), (1, 3)), ((4, 5), (5, 1))]


def test_float_dot_values_survive_within_rounding():
    golden("""
HloModule f
ENTRY e {
  a = f32[3,7,2] parameter(0)
  b = f32[7,3,4] parameter(1)
  ROOT d = f32[3,2,4] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_batch_dims={1}, rhs_contracting_dims={0}, operand_precision={highest,highest}
}
""", "dot-canonicalizer", "CHECK: operand_precision={highest,highest}",
        same=lambda x, y: np.allclose(x.array, y.array, rtol=1e-5, atol=1e-5))


@st.composite
def dot_configs(draw):
    """(lhs dims, rhs dims, dnums, result dims) for a random valid dot."""
    sizes = st.integers(1, 3)
    batch = draw(st.lists(sizes, max_size=2))
    contract = draw(st.lists(sizes, max_size=2))
    lfree = draw(st.lists(sizes, max_size=2))
    rfree = draw(st.lists(sizes, max_size=2))
    lhs_kinds = [("b", i) for i in range(len(batch))] + [("c", i) for i in range(len(contract))] \
        + [("f", i) for i in range(len(lfree))]
    rhs_kinds = [("b", i) for i in range(len(batch))] + [("c", i) for i in range(len(contract))] \
        + [("f", i) for i in range(len(rfree))]
    lhs_order = draw(st.permutations(lhs_kinds))
    rhs_order = draw(st.permutations(rhs_kinds))
    size = {"b": batch, "c": contract}

    def dims(order, free):
        return [size[k][i] if k != "f" else free[i] for k, i in order]

    def where(order, kind):
        return [order.index((kind, i)) for i in range(len(size[kind]))]

    dn = (where(lhs_order, "b"), where(lhs_order, "c"), where(rhs_order, "b"),
          where(rhs_order, "c"))
    lf = sorted(p for p, (k, _) in enumerate(lhs_order) if k == "f")
    rf = sorted(p for p, (k, _) in enumerate(rhs_order) if k == "f")
    ldims, rdims = dims(lhs_order, lfree), dims(rhs_order, rfree)
    out = batch + [ldims[p] for p in lf] + [rdims[p] for p in rf]
    return ldims, rdims, dn, out


def _shape(dims) -> str:
    return "s32[" + ",".join(map(str, dims)) + "]"


def _ints(values) -> str:
    return "{" + ",".join(map(str, values)) + "}"


@settings(max_examples=80, deadline=None)
@given(dot_configs(), st.integers(0, 2**31))
def test_random_dots_become_canonical_and_exact(config, seed):
    ldims, rdims, (lb, lc, rb, rc), out = config
    text = f"""
HloModule r
ENTRY e {{
  a = {_shape(ldims)} parameter(0)
  b = {_shape(rdims)} parameter(1)
  ROOT d = {_shape(out)} dot(a, b), lhs_batch_dims={_ints(lb)}, lhs_contracting_dims={_ints(lc)}, rhs_batch_dims={_ints(rb)}, rhs_contracting_dims={_ints(rc)}
}}
"""
    module = parse_module(text)
    rng = np.random.default_rng(seed)
    args = [rng.integers(-9, 10, size=ldims).astype(np.int32),
            rng.integers(-9, 10, size=rdims).astype(np.int32)]
    before = evaluate(module, args)
    run_passes(module, "dot-canonicalizer")
    assert all(is_canonical(d) for d in dots(module))
    assert results_equal(before, evaluate(module, args))
