"""Property test over generated modules: random HLO with elementwise ops, in-place updates
(dynamic-update-slice, fusions rooted at one), sorts, tuples, nested while loops and
conditionals, roots that repeat values or return parameters and constants, and donated
parameters. Each module goes through copy insertion, scheduling, buffer assignment and thunk
emission; the assignment must satisfy the sharing properties, the arena executor (audited
byte by byte) must reproduce the reference interpreter bit for bit, and copy insertion must
be idempotent."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from hloc.ir.text.parser import parse_module
from hloc.ir.verifier import verify
from hloc.passes.copy_insertion import CopyInsertion

from .support.buffers import interpret, plan_checked, run_audited, same_bits

pytestmark = pytest.mark.pure

A = "f32[6]"
HELPERS = """
%cmp (a: f32[], b: f32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %lt = pred[] compare(%a, %b), direction=LT
}

%cmp2 (a: f32[], b: f32[], c: f32[], d: f32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %c = f32[] parameter(2)
  %d = f32[] parameter(3)
  ROOT %gt = pred[] compare(%a, %b), direction=GT
}

%sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%fadd (x: f32[6], y: f32[6]) -> f32[6] {
  %x = f32[6] parameter(0)
  %y = f32[6] parameter(1)
  %m = f32[6] multiply(%x, %y)
  ROOT %s = f32[6] add(%m, %x)
}

%fdus (x: f32[6], y: f32[6]) -> f32[6] {
  %x = f32[6] parameter(0)
  %y = f32[6] parameter(1)
  %u = f32[2] slice(%y), slice={[1:3]}
  %n = f32[2] negate(%u)
  %i = s32[] constant(3)
  ROOT %d = f32[6] dynamic-update-slice(%x, %n, %i)
}
"""


class Gen:
    """Emits HLO text for random computations; every array value is f32[6]."""

    def __init__(self, data):
        self.data = data
        self.comps: list[str] = []
        self.count = 0

    def draw(self, strategy):
        return self.data.draw(strategy)

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}.{self.count}"

    def pick(self, pool: list[str]) -> str:
        return self.draw(st.sampled_from(pool))

    def emit(self, lines: list[str], shape: str, text: str, base: str = "v") -> str:
        n = self.name(base)
        lines.append(f"  %{n} = {shape} {text}")
        return n

    def body(self, lines: list[str], pool: list[str], depth: int) -> None:
        """Append 1..6 random instructions to a computation, growing the pool."""
        for _ in range(self.draw(st.integers(1, 6))):
            kinds = ["unary", "binary", "const", "dus", "reverse", "sort", "sort2", "tuple",
                     "copy", "bitcast", "fusion", "fusion_dus", "scatter", "barrier"]
            if depth < 2:
                kinds += ["while", "cond", "call"]
            kind = self.draw(st.sampled_from(kinds))
            pool.extend(getattr(self, f"op_{kind}")(lines, pool, depth))

    def op_unary(self, lines, pool, depth):
        op = self.draw(st.sampled_from(["negate", "abs", "sine"]))
        return [self.emit(lines, A, f"{op}(%{self.pick(pool)})")]

    def op_binary(self, lines, pool, depth):
        op = self.draw(st.sampled_from(["add", "multiply", "subtract", "maximum"]))
        return [self.emit(lines, A, f"{op}(%{self.pick(pool)}, %{self.pick(pool)})")]

    def op_const(self, lines, pool, depth):
        k = self.draw(st.integers(-3, 3))
        return [self.emit(lines, A, "constant({" + ",".join(str(k + i) for i in range(6)) + "})", "c")]

    def op_dus(self, lines, pool, depth):
        upd = self.emit(lines, "f32[2]", f"slice(%{self.pick(pool)}), slice={{[2:4]}}")
        idx = self.emit(lines, "s32[]", f"constant({self.draw(st.integers(-1, 5))})")
        return [self.emit(lines, A, f"dynamic-update-slice(%{self.pick(pool)}, %{upd}, %{idx})")]

    def op_reverse(self, lines, pool, depth):
        return [self.emit(lines, A, f"reverse(%{self.pick(pool)}), dimensions={{0}}")]

    def op_sort(self, lines, pool, depth):
        return [self.emit(lines, A, f"sort(%{self.pick(pool)}), dimensions={{0}}, to_apply=%cmp")]

    def op_sort2(self, lines, pool, depth):
        t = self.emit(lines, f"({A}, {A})", f"sort(%{self.pick(pool)}, %{self.pick(pool)}), "
                      f"dimensions={{0}}, is_stable=true, to_apply=%cmp2")
        return [self.emit(lines, A, f"get-tuple-element(%{t}), index={i}") for i in range(2)]

    def op_tuple(self, lines, pool, depth):
        a, b = self.pick(pool), self.pick(pool)
        t = self.emit(lines, f"({A}, {A})", f"tuple(%{a}, %{b})", "t")
        return [self.emit(lines, A, f"get-tuple-element(%{t}), index={self.draw(st.integers(0, 1))}")]

    def op_copy(self, lines, pool, depth):
        return [self.emit(lines, A, f"copy(%{self.pick(pool)})")]

    def op_bitcast(self, lines, pool, depth):
        return [self.emit(lines, A, f"bitcast(%{self.pick(pool)})")]

    def op_fusion(self, lines, pool, depth):
        return [self.emit(lines, A, f"fusion(%{self.pick(pool)}, %{self.pick(pool)}), kind=kLoop, "
                          f"calls=%fadd")]

    def op_fusion_dus(self, lines, pool, depth):
        return [self.emit(lines, A, f"fusion(%{self.pick(pool)}, %{self.pick(pool)}), kind=kLoop, "
                          f"calls=%fdus")]

    def op_scatter(self, lines, pool, depth):
        idx = self.emit(lines, "s32[2,1]", f"constant({{{{{self.draw(st.integers(0, 5))}}}, {{1}}}})")
        upd = self.emit(lines, "f32[2]", f"slice(%{self.pick(pool)}), slice={{[0:2]}}")
        return [self.emit(lines, A, f"scatter(%{self.pick(pool)}, %{idx}, %{upd}), "
                          "update_window_dims={}, inserted_window_dims={0}, "
                          "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%sum")]

    def op_barrier(self, lines, pool, depth):
        a, b = self.pick(pool), self.pick(pool)
        t = self.emit(lines, f"({A}, {A})", f"tuple(%{a}, %{b})", "t")
        o = self.emit(lines, f"({A}, {A})", f"opt-barrier(%{t})", "b")
        return [self.emit(lines, A, f"get-tuple-element(%{o}), index={i}") for i in range(2)]

    def op_call(self, lines, pool, depth):
        k = self.draw(st.integers(1, 2))
        arg = "(" + ", ".join([A] * k) + ")"
        callee = self.name("callee")
        clines = [f"  %q = {arg} parameter(0)"]
        cpool = [self.emit(clines, A, f"get-tuple-element(%q), index={j}", "g") for j in range(k)]
        self.body(clines, cpool, depth + 1)
        outs = [self.pick(cpool) for _ in range(self.draw(st.integers(1, 2)))]
        out = "(" + ", ".join([A] * len(outs)) + ")"
        clines.append(f"  ROOT %r = {out} tuple(" + ", ".join(f"%{o}" for o in outs) + ")")
        self.comps.append(f"%{callee} (q: {arg}) -> {out} {{\n" + "\n".join(clines) + "\n}")
        t = self.emit(lines, arg, "tuple(" + ", ".join(f"%{self.pick(pool)}" for _ in range(k)) + ")")
        c = self.emit(lines, out, f"call(%{t}), to_apply=%{callee}")
        return [self.emit(lines, A, f"get-tuple-element(%{c}), index={j}") for j in range(len(outs))]

    def op_while(self, lines, pool, depth):
        k = self.draw(st.integers(1, 3))
        state = "(s32[], " + ", ".join([A] * k) + ")"
        cond, body = self.name("cond"), self.name("body")
        trips = self.draw(st.integers(0, 3))
        self.comps.append(
            f"%{cond} (s: {state}) -> pred[] {{\n  %s = {state} parameter(0)\n"
            f"  %i = s32[] get-tuple-element(%s), index=0\n  %n = s32[] constant({trips})\n"
            f"  ROOT %lt = pred[] compare(%i, %n), direction=LT\n}}")
        blines = [f"  %s = {state} parameter(0)", "  %i = s32[] get-tuple-element(%s), index=0",
                  "  %one = s32[] constant(1)", "  %i1 = s32[] add(%i, %one)"]
        bpool = [self.emit(blines, A, f"get-tuple-element(%s), index={j + 1}", "g") for j in range(k)]
        self.body(blines, bpool, depth + 1)
        slots = [self.pick(bpool) for _ in range(k)]
        blines.append(f"  ROOT %r = {state} tuple(%i1, " + ", ".join(f"%{x}" for x in slots) + ")")
        self.comps.append(f"%{body} (s: {state}) -> {state} {{\n" + "\n".join(blines) + "\n}")
        zero = self.emit(lines, "s32[]", "constant(0)")
        init = self.emit(lines, state, f"tuple(%{zero}, " + ", ".join(
            f"%{self.pick(pool)}" for _ in range(k)) + ")", "init")
        w = self.emit(lines, state, f"while(%{init}), condition=%{cond}, body=%{body}", "w")
        return [self.emit(lines, A, f"get-tuple-element(%{w}), index={j + 1}") for j in range(k)]

    def op_cond(self, lines, pool, depth):
        k, m = self.draw(st.integers(1, 2)), self.draw(st.integers(1, 2))
        arg, out = "(" + ", ".join([A] * k) + ")", "(" + ", ".join([A] * m) + ")"
        branches = []
        for _ in range(self.draw(st.integers(2, 3))):
            b = self.name("branch")
            blines = [f"  %q = {arg} parameter(0)"]
            bpool = [self.emit(blines, A, f"get-tuple-element(%q), index={j}", "g") for j in range(k)]
            self.body(blines, bpool, depth + 1)
            blines.append(f"  ROOT %r = {out} tuple(" + ", ".join(
                f"%{self.pick(bpool)}" for _ in range(m)) + ")")
            self.comps.append(f"%{b} (q: {arg}) -> {out} {{\n" + "\n".join(blines) + "\n}")
            branches.append(b)
        sel = self.emit(lines, "s32[]", f"constant({self.draw(st.integers(-1, 3))})")
        ops = []
        for _ in branches:
            ops.append(self.emit(lines, arg, "tuple(" + ", ".join(
                f"%{self.pick(pool)}" for _ in range(k)) + ")", "arg"))
        c = self.emit(lines, out, f"conditional(%{sel}, " + ", ".join(f"%{o}" for o in ops)
                      + "), branch_computations={" + ", ".join(f"%{b}" for b in branches) + "}")
        return [self.emit(lines, A, f"get-tuple-element(%{c}), index={j}") for j in range(m)]


def generate(data) -> tuple[str, int]:
    g = Gen(data)
    nparams = g.draw(st.integers(1, 3))
    lines = [f"  %p{i} = {A} parameter({i})" for i in range(nparams)]
    pool = [f"p{i}" for i in range(nparams)]
    g.body(lines, pool, 0)
    outs = [g.pick(pool) for _ in range(g.draw(st.integers(1, 4)))]
    out_shape = "(" + ", ".join([A] * len(outs)) + ")"
    lines.append(f"  ROOT %root = {out_shape} tuple(" + ", ".join(f"%{o}" for o in outs) + ")")
    # Donate up to two parameters to distinct outputs.
    pairs = g.draw(st.lists(st.tuples(st.integers(0, len(outs) - 1), st.integers(0, nparams - 1)),
                            max_size=2, unique_by=(lambda p: p[0], lambda p: p[1])))
    aliases = ", ".join(f"{{{o}}}: ({p}, {{}}, may-alias)" for o, p in pairs)
    header = "HloModule gen" + (f", input_output_alias={{ {aliases} }}" if pairs else "")
    params = ", ".join(f"p{i}: {A}" for i in range(nparams))
    entry = f"ENTRY %main ({params}) -> {out_shape} {{\n" + "\n".join(lines) + "\n}"
    return "\n\n".join([header, HELPERS, *g.comps, entry]) + "\n", nparams


# Hypothesis draws new modules on every run: `make test` checks 100 per run, `make test-all`
# 300 more (test_more_generated_modules), the same check on the same generator.
SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck))
SCHEDULERS = st.sampled_from(["auto", "list", "dfs", "post-order"])


@settings(max_examples=100, **SETTINGS)
@given(st.data(), SCHEDULERS)
def test_generated_modules(data, scheduler):
    check_generated(data, scheduler)


@pytest.mark.slow
@settings(max_examples=300, **SETTINGS)
@given(st.data(), SCHEDULERS)
def test_more_generated_modules(data, scheduler):
    check_generated(data, scheduler)


def check_generated(data, scheduler) -> None:
    text, nparams = generate(data)
    note(text)
    module = parse_module(text)
    verify(module)
    rng = np.random.default_rng(len(text))
    args = [rng.standard_normal(6).astype(np.float32) for _ in range(nparams)]
    reference = interpret(module, args)
    plan = plan_checked(module, target=data.draw(st.sampled_from(["cpu", "cuda"])),
                        scheduler=scheduler)
    got = run_audited(plan, args)
    assert len(got) == len(reference)
    for i, (g, r) in enumerate(zip(got, reference, strict=True)):
        assert same_bits(g, r), f"out{i}: {g} != {r}\n{text}"
    assert not CopyInsertion().run(module), "copy insertion is not idempotent"
