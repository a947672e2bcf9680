"""Complex numbers (c64, c128) in the elemental emitter: CPU kernels and cuda-emulated kernels
against the reference interpreter, plus XLA's own results where the interpreter (numpy)
differs from XLA on special values.

Comparison (`complex_mismatches`): every complex value is classified as C99 Annex G does —
infinite (a part is ±inf, even next to a NaN), NaN (no infinite part, some NaN) or finite —
and the classes must agree; finite values must agree within `ulps` units in the last place
of the part type, measured norm-wise (|got - want| <= ulps * ulp * |want|, ulp = 2**-23 for
c64, 2**-52 for c128), plus an absolute 4 * smallest-normal for flush-to-zero effects (the
kernels run with FTZ/DAZ, like XLA CPU). Tolerance 0 means bit-exact parts.
"""

from __future__ import annotations

import numpy as np
import pytest

from hloc.bundle import read_bundle
from hloc.codegen.elemental import registry
from hloc.codegen.elemental.types import elem_type
from hloc.errors import UnsupportedError
from hloc.ir import Opcode, PrimitiveType
from hloc.ir.text.parser import parse_module
from hloc.runtime.cuda.emulated import CudaEmulatedExecutable

from .conftest import SAMPLES, sample_arrays, sample_meta
from .support.bundles import compile_bundle, kernels_json, load_cpu, sample_bundle
from .support.hlo import nary
from .support.kernels import Compiled, entry_spec, reference
from .support.run import emulate_hlo, run_cases
from .test_interp_samples import mismatch

pytestmark = pytest.mark.cpu

TYPES = {"c64": (np.complex64, np.float32), "c128": (np.complex128, np.float64)}
UNARY = ["negate", "sign", "exponential", "log", "sqrt", "rsqrt", "sine", "cosine", "tan",
         "tanh", "exponential-minus-one", "log-plus-one", "cbrt"]
BINARY = ["add", "subtract", "multiply", "divide", "power"]
# Norm-wise error bounds in ulps (see the module docstring); measured maxima are about half.
ULPS = {"negate": 0, "add": 0, "subtract": 0, "multiply": 2, "divide": 4, "abs": 2, "sign": 4,
        "sqrt": 2, "rsqrt": 4, "exponential": 4, "log": 4, "sine": 4, "cosine": 4, "tan": 8,
        "tanh": 8, "exponential-minus-one": 8, "log-plus-one": 8, "cbrt": 8, "power": 16}


# ---- comparison -------------------------------------------------------------------------------

def _klass(z: np.ndarray) -> np.ndarray:
    inf = np.isinf(z.real) | np.isinf(z.imag)
    nan = ~inf & (np.isnan(z.real) | np.isnan(z.imag))
    return np.where(inf, 2, np.where(nan, 1, 0))


def complex_mismatches(got, want, ulps: float) -> np.ndarray:
    """Positions where `got` is not an acceptable result for `want` (complex or real)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, want.dtype)
    part = np.finfo(got.dtype)
    g, w = got.astype(np.complex128), want.astype(np.complex128)
    bad = _klass(g) != _klass(w)
    finite = (_klass(g) == 0) & (_klass(w) == 0)
    if ulps == 0:
        same = (g.real == w.real) & (g.imag == w.imag)
        same &= (np.signbit(g.real) == np.signbit(w.real)) & (np.signbit(g.imag) == np.signbit(w.imag))
    else:
        with np.errstate(all="ignore"):
            same = np.abs(g - w) <= ulps * part.eps * np.abs(w) + 4 * part.tiny
    return bad | (finite & ~same)


def assert_complex_close(got, want, ulps: float, inputs=(), what: str = "") -> None:
    bad = complex_mismatches(got, want, ulps)
    if bad.any():
        k = np.argwhere(bad).ravel()[:5]
        args = [np.asarray(a).reshape(-1)[k] for a in inputs]
        pytest.fail(f"{what}: {bad.sum()}/{bad.size} mismatches at inputs {args}: "
                    f"got {np.asarray(got).reshape(-1)[k]}, want {np.asarray(want).reshape(-1)[k]}")


# ---- inputs -----------------------------------------------------------------------------------

def edge_parts(type_name: str, finite: bool = False) -> np.ndarray:
    """Part values: zeros, ones, halfway-ish values, huge and tiny magnitudes, the smallest
    normal and denormal, the largest finite value, infinities and NaN."""
    fdt = TYPES[type_name][1]
    fi = np.finfo(fdt)
    v = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-30, 1e30, 88.5, -103.0, float(fi.max),
         -float(fi.max), float(fi.tiny), float(fi.smallest_subnormal)]
    if not finite:
        v += [np.inf, -np.inf, np.nan]
    return np.array(v, fdt)


def make_complex(re, im, type_name: str) -> np.ndarray:
    z = np.empty(np.shape(re), TYPES[type_name][0])
    z.real, z.imag = re, im
    return z


def edge_grid(type_name: str, finite: bool = False) -> np.ndarray:
    """Every combination of edge parts as (re, im)."""
    e = edge_parts(type_name, finite)
    re, im = np.meshgrid(e, e, indexing="ij")
    return make_complex(re.ravel(), im.ravel(), type_name)


def random_complex(type_name: str, n: int, rng, scale: float = 3.0) -> np.ndarray:
    return make_complex(rng.standard_normal(n) * scale, rng.standard_normal(n) * scale, type_name)


def pairs(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.meshgrid(z, z, indexing="ij")
    return a.ravel(), b.ravel()


# ---- where the interpreter is not the oracle -------------------------------------------------------

def _known_interpreter_gaps(op: str, type_name: str, args: list[np.ndarray]) -> np.ndarray:
    """Inputs whose interpreter result is not XLA's (numpy's formulas), checked elsewhere:
    divide by or of infinities/NaN and rsqrt of infinite parts (XLA's recovery gives zeros
    and infinities where numpy's Smith division gives NaN: test_xla_special_cases), and
    log1p where numpy's a^2 + 2a + b^2 cancels or overflows (-1 + tiny i, a = -inf, |z| >
    1e150 in c128: ours is the accurate log|1 + z|). power is tested on moderate values."""
    if op == "divide":
        return ~np.isfinite(args[0]) | ~np.isfinite(args[1])
    if op == "rsqrt":
        return np.isinf(args[0].real) | np.isinf(args[0].imag)
    if op == "log-plus-one":
        z = args[0]
        gap = (z.real == -1) | (z.real == -np.inf)
        return gap | (np.abs(z) > 1e150) if type_name == "c128" else gap
    return np.zeros(args[0].shape, bool)


# XLA CPU's results (jaxlib 0.10.2) for special values where numpy's (the interpreter's)
# differ: (op, operands, result); the same for c64 and c128 unless noted.
XLA_SPECIAL = [
    ("divide", (0j, complex(np.inf, np.inf)), 0j),
    ("divide", (1 + 1j, complex(np.inf, np.inf)), 0j),
    ("divide", (1 + 1j, complex(np.nan, np.inf)), complex(0.0, -0.0)),
    ("divide", (-2.5 + 3j, complex(np.nan, np.inf)), 0j),
    ("divide", (1e-30 - 1e-30j, complex(np.nan, np.inf)), complex(-0.0, -0.0)),
    ("divide", (complex(np.nan, np.inf), 1 + 1j), complex(np.inf, np.inf)),
    ("divide", (complex(np.nan, np.inf), -2.5 + 3j), complex(np.inf, -np.inf)),
    ("divide", (complex(np.nan, np.inf), 0.5j), complex(np.inf, np.nan)),
    ("divide", (3e38 + 3e38j, 1 + 3e38j), 1 - 1j),
    ("rsqrt", (complex(0, np.inf),), complex(0.0, -0.0)),
    ("rsqrt", (complex(0, -np.inf),), 0j),
    ("rsqrt", (complex(1, np.inf),), complex(0.0, -0.0)),
]


# ---- CPU: elementwise ops ---------------------------------------------------------------------------

@pytest.mark.parametrize("type_name", TYPES)
def test_random_values_match_the_interpreter(type_name):
    rng = np.random.default_rng(11)
    n = 512
    cases = {}
    for op in UNARY:
        cases[op] = (nary(op, type_name, n, 1), [random_complex(type_name, n, rng)])
    for op in BINARY:
        scale = 0.5 if op == "power" else 3.0
        cases[op] = (nary(op, type_name, n, 2), [random_complex(type_name, n, rng),
                                                   random_complex(type_name, n, rng, scale)])
    part = "f32" if type_name == "c64" else "f64"
    cases["abs"] = (nary("abs", type_name, n, 1, part), [random_complex(type_name, n, rng)])
    for op, o in run_cases(cases, "cpu-kernels").items():
        got, want = o.got[0], o.want[0]
        assert_complex_close(got, want, ULPS[op], cases[op][1], f"{type_name} {op}")


@pytest.mark.parametrize("type_name", TYPES)
def test_special_values_match_the_interpreter(type_name):
    """Zeros, infinities, NaN, huge and tiny (incl. denormal) parts, every combination."""
    z = edge_grid(type_name)
    cases = {op: (nary(op, type_name, z.size, 1), [z]) for op in UNARY if op != "cbrt"}
    a, b = pairs(z)
    for op in ("add", "subtract", "multiply", "divide"):
        cases[op] = (nary(op, type_name, a.size, 2), [a, b])
    part = "f32" if type_name == "c64" else "f64"
    cases["abs"] = (nary("abs", type_name, z.size, 1, part), [z])
    for op, o in run_cases(cases, "cpu-kernels").items():
        got, want = o.got[0], o.want[0]
        keep = ~_known_interpreter_gaps(op, type_name, cases[op][1])
        inputs = [x[keep] for x in cases[op][1]]
        assert_complex_close(got[keep], want[keep], ULPS[op], inputs, f"{type_name} {op}")


@pytest.mark.parametrize("type_name", TYPES)
def test_power_on_moderate_values(type_name):
    """Finite bases and exponents (incl. zero, ±1, integers and non-integers): away from
    huge exponents, where |w log z| amplifies any rounding beyond a meaningful bound."""
    parts = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 0.125], TYPES[type_name][1])
    re, im = np.meshgrid(parts, parts, indexing="ij")
    z = make_complex(re.ravel(), im.ravel(), type_name)
    a, b = pairs(z)
    (o,) = run_cases({"p": (nary("power", type_name, a.size, 2), [a, b])}, "cpu-kernels").values()
    got, want = o.got[0], o.want[0]
    assert_complex_close(got, want, ULPS["power"], [a, b], f"{type_name} power")


@pytest.mark.parametrize("type_name", TYPES)
def test_xla_special_cases(type_name):
    """XLA's division recovery and rsqrt at infinity (the interpreter's numpy gives NaN)."""
    for op in ("divide", "rsqrt"):
        rows = [r for r in XLA_SPECIAL if r[0] == op]
        if type_name == "c128":
            rows = [r for r in rows if r[1] != (3e38 + 3e38j, 1 + 3e38j)]  # f32 overflow only
        arity = len(rows[0][1])
        inputs = [np.array([r[1][i] for r in rows], TYPES[type_name][0]) for i in range(arity)]
        want = np.array([r[2] for r in rows], TYPES[type_name][0])
        (o,) = run_cases({op: (nary(op, type_name, len(rows), arity), inputs)}, "cpu-kernels").values()
        got = o.got[0]
        assert_complex_close(got, want, 0, inputs, f"{type_name} {op} vs XLA")


@pytest.mark.parametrize("type_name", TYPES)
def test_compare_select_and_parts(type_name):
    """EQ/NE (NaN parts are unequal), select, complex/real/imag: bit-exact."""
    fdt_name = "f32" if type_name == "c64" else "f64"
    z = edge_grid(type_name, finite=False)
    a, b = pairs(z[::3])
    n = a.size
    text = f"""HloModule m
ENTRY e {{
  a = {type_name}[{n}] parameter(0)
  b = {type_name}[{n}] parameter(1)
  eq = pred[{n}] compare(a, b), direction=EQ
  ne = pred[{n}] compare(a, b), direction=NE
  s = {type_name}[{n}] select(eq, a, b)
  re = {fdt_name}[{n}] real(a)
  im = {fdt_name}[{n}] imag(b)
  c = {type_name}[{n}] complex(im, re)
  ROOT t = (pred[{n}], pred[{n}], {type_name}[{n}], {type_name}[{n}]) tuple(eq, ne, s, c)
}}"""
    module = parse_module(text)
    got = Compiled([entry_spec(module)]).run("kernel", [a, b])
    want = reference(module.entry, [a, b])
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert_complex_close(got[2], want[2], 0, [a, b], "select")
    assert_complex_close(got[3], want[3], 0, [a, b], "complex(imag, real)")


# ---- CPU: conversions, constants, moves, reductions, dot --------------------------------------------

CONVERT_CASES = [("f32", "c64"), ("s32", "c64"), ("pred", "c64"), ("f64", "c128"),
                 ("c64", "c128"), ("c128", "c64"), ("c64", "f32"), ("c64", "pred")]


def _values(type_name: str, n: int, rng) -> np.ndarray:
    if type_name in TYPES:
        return random_complex(type_name, n, rng, 1e3)
    if type_name == "pred":
        return rng.random(n) < 0.5
    if type_name == "s32":
        return rng.integers(-1 << 31, 1 << 31, n).astype(np.int32)
    return (rng.standard_normal(n) * 1e3).astype(np.float32 if type_name == "f32" else np.float64)


@pytest.mark.parametrize("src,dst", CONVERT_CASES, ids=[f"{s}-{d}" for s, d in CONVERT_CASES])
def test_convert(src, dst):
    """real -> complex (imaginary +0), complex widths, and the interpreter's complex -> real
    (real part) and complex -> pred (a nonzero part); rounding c128 -> c64 is exact."""
    rng = np.random.default_rng(3)
    x = _values(src, 256, rng)
    if src in TYPES:
        x[:4] = [0, complex(0, -0.0), complex(np.nan, 0), complex(0, np.inf)]
    (o,) = run_cases({"c": (nary("convert", src, x.size, 1, dst), [x])}, "cpu-kernels").values()
    got, want = o.got[0], o.want[0]
    if dst == "pred":
        np.testing.assert_array_equal(got, want)
    else:
        assert_complex_close(got, want, 0, [x], f"convert {src} -> {dst}")


@pytest.mark.parametrize("type_name", TYPES)
def test_constants_and_index_remapping(type_name):
    """Scalar and array literals, broadcast, transpose (non-default layouts), reshape,
    bitcast, slice, reverse, pad, concatenate, dynamic-slice, iota: elements move unchanged."""
    t = type_name
    text = f"""HloModule m
ENTRY e {{
  a = {t}[4,6]{{0,1}} parameter(0)
  k = {t}[] constant((1.5, -2))
  arr = {t}[2] constant({{(1, 2), (-3, 0.25)}})
  tr = {t}[6,4]{{1,0}} transpose(a), dimensions={{1,0}}
  rs = {t}[24] reshape(tr)
  bc = {t}[4,6]{{1,0}} bitcast(tr)
  sl = {t}[2,3] slice(a), slice={{[1:3], [0:6:2]}}
  rv = {t}[4,6] reverse(a), dimensions={{0,1}}
  pd = {t}[6,7] pad(a, k), padding=1_1x0_1
  bb = {t}[4,2] broadcast(arr), dimensions={{1}}
  cc = {t}[4,8] concatenate(a, bb), dimensions={{1}}
  i0 = s32[] constant(2)
  ds = {t}[2,2] dynamic-slice(a, i0, i0), dynamic_slice_sizes={{2,2}}
  io = {t}[5] iota(), iota_dimension=0
  ROOT r = ({t}[24], {t}[4,6], {t}[2,3], {t}[4,6], {t}[6,7], {t}[4,8], {t}[2,2], {t}[5]) tuple(rs, bc, sl, rv, pd, cc, ds, io)
}}"""
    module = parse_module(text)
    a = random_complex(t, 24, np.random.default_rng(5)).reshape(4, 6)
    got = Compiled([entry_spec(module)]).run("kernel", [a])
    want = reference(module.entry, [a])
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert_complex_close(g, w, 0, [], f"{t} output {i}")


REDUCE = """HloModule m
sum {{
  x = {t}[] parameter(0)
  y = {t}[] parameter(1)
  ROOT s = {t}[] {op}(x, y)
}}
ENTRY e {{
  a = {t}[{rows},{cols}] parameter(0)
  z = {t}[] constant({init})
  rows = {t}[{rows}] reduce(a, z), dimensions={{1}}, to_apply=sum
  cols = {t}[{cols}] reduce(a, z), dimensions={{0}}, to_apply=sum
  ROOT r = ({t}[{rows}], {t}[{cols}]) tuple(rows, cols)
}}"""


def _reducenary(t: str, op: str, rows: int, cols: int) -> str:
    init = "(0, 0)" if op == "add" else "(1, 0)"
    return REDUCE.format(t=t, op=op, rows=rows, cols=cols, init=init)


@pytest.mark.parametrize("type_name", TYPES)
@pytest.mark.parametrize("op", ["add", "multiply"])
def test_reductions(type_name, op):
    """Row and column (vectorized column segment) sums and products of complex values."""
    rows, cols = (37, 300) if op == "add" else (9, 7)
    module = parse_module(_reducenary(type_name, op, rows, cols))
    scale = 3.0 if op == "add" else 0.6
    a = random_complex(type_name, rows * cols, np.random.default_rng(8), scale).reshape(rows, cols)
    got = Compiled([entry_spec(module)]).run("kernel", [a], chunks=3)
    want = reference(module.entry, [a])
    # Summation order differs (reassociated, vectorized): error relative to sum |x_i|.
    for g, w, axis in zip(got, want, (1, 0), strict=True):
        bound = np.abs(a).sum(axis=axis) if op == "add" else np.abs(w)
        err = np.abs(g.astype(np.complex128) - w)
        assert (err <= 64 * np.finfo(g.dtype).eps * bound).all(), (type_name, op, err.max())


@pytest.mark.parametrize("type_name", TYPES)
def test_dot_and_map(type_name):
    """The elemental dot (inside a fused computation) and map over a complex computation."""
    t = type_name
    text = f"""HloModule m
mul_conj {{
  x = {t}[] parameter(0)
  y = {t}[] parameter(1)
  re = {"f32" if t == "c64" else "f64"}[] real(y)
  im = {"f32" if t == "c64" else "f64"}[] imag(y)
  nim = {"f32" if t == "c64" else "f64"}[] negate(im)
  cj = {t}[] complex(re, nim)
  ROOT m = {t}[] multiply(x, cj)
}}
ENTRY e {{
  a = {t}[5,7] parameter(0)
  b = {t}[7,3] parameter(1)
  d = {t}[5,3] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  e = {t}[5,3] exponential(d)
  m = {t}[5,7] map(a, a), dimensions={{0,1}}, to_apply=mul_conj
  ROOT r = ({t}[5,3], {t}[5,3], {t}[5,7]) tuple(d, e, m)
}}"""
    module = parse_module(text)
    rng = np.random.default_rng(9)
    a = random_complex(t, 35, rng, 0.3).reshape(5, 7)
    b = random_complex(t, 21, rng, 0.3).reshape(7, 3)
    got = Compiled([entry_spec(module)]).run("kernel", [a, b])
    want = reference(module.entry, [a, b])
    bound = np.abs(a) @ np.abs(b)
    err = np.abs(got[0].astype(np.complex128) - want[0])
    assert (err <= 16 * np.finfo(got[0].dtype).eps * bound).all(), err.max()
    assert_complex_close(got[1], want[1], 64, [], "exp(dot)")  # exp amplifies the dot's error
    assert_complex_close(got[2], want[2], ULPS["multiply"], [a], "map")


# ---- dispatch ------------------------------------------------------------------------------------------

def test_complex_types_only_for_code_that_asks():
    """elem_type still rejects complex unless asked (real-only kernels reject it cleanly)."""
    with pytest.raises(UnsupportedError):
        elem_type(PrimitiveType.C64)
    et = elem_type(PrimitiveType.C128, complex_ok=True)
    assert et.is_complex and et.part.ptype == PrimitiveType.F64
    assert str(et.value_type) == "{double, double}"


def test_real_instructions_keep_their_lowerings():
    """The complex registry is consulted only for complex instructions: an f32 add gets the
    very lowering registered for it, a c64 add the complex one."""
    module = parse_module(nary("add", "f32", 4, 2))
    real_add = module.entry.root
    assert registry.lookup(real_add, "cpu") is registry.generic_lowering(Opcode.ADD)
    cplx_add = parse_module(nary("add", "c64", 4, 2)).entry.root
    assert registry.lookup(cplx_add, "cpu") is not registry.generic_lowering(Opcode.ADD)
    clamp = parse_module(nary("clamp", "c64", 4, 3)).entry.root
    with pytest.raises(UnsupportedError, match="complex lowering for 'clamp'"):
        registry.lookup(clamp, "cpu")


# ---- cuda-emulated ------------------------------------------------------------------------------------

CUDA_UNARY = {"c64": [op for op in UNARY if op != "cbrt"],
              # c128 transcendental functions need f64 math, which has no CUDA lowering yet.
              "c128": ["negate", "sign", "sqrt", "rsqrt"]}
CUDA_BINARY = {"c64": ["add", "subtract", "multiply", "divide"],
               "c128": ["add", "subtract", "multiply", "divide"]}


def _tuple_module(type_name: str, n: int, unary: list[str], binary: list[str]) -> str:
    t = type_name
    part = "f32" if t == "c64" else "f64"
    lines = [f"  a = {t}[{n}] parameter(0)", f"  b = {t}[{n}] parameter(1)",
             f"  abs = {part}[{n}] abs(a)"]
    names = ["abs"]
    for i, op in enumerate(unary + binary):
        args = "a" if op in unary else "a, b"
        lines.append(f"  o{i} = {t}[{n}] {op}({args})")
        names.append(f"o{i}")
    shapes = ", ".join([f"{part}[{n}]"] + [f"{t}[{n}]"] * (len(names) - 1))
    lines.append(f"  ROOT r = ({shapes}) tuple({', '.join(names)})")
    return "HloModule m\nENTRY e {\n" + "\n".join(lines) + "\n}\n"


@pytest.mark.parametrize("type_name", TYPES)
def test_cuda_elementwise(type_name):
    """Loop kernels on the emulator: edge grid (special-value gaps of the interpreter left
    out as on the CPU) and random values, every op in one kernel."""
    rng = np.random.default_rng(21)
    z = edge_grid(type_name)
    a = np.concatenate([z, random_complex(type_name, 200, rng)])
    b = np.concatenate([z[::-1], random_complex(type_name, 200, rng)])
    unary, binary = CUDA_UNARY[type_name], CUDA_BINARY[type_name]
    text = _tuple_module(type_name, a.size, unary, binary)
    got, want, ex = emulate_hlo(text, [a, b])
    assert not [n for n in ex.program.notes if "host" in n], ex.program.notes
    for op, g, w in zip(["abs"] + unary + binary, got, want, strict=True):
        args = [a] if op in unary or op == "abs" else [a, b]
        keep = ~_known_interpreter_gaps(op, type_name, args)
        assert_complex_close(np.asarray(g)[keep], np.asarray(w)[keep], ULPS[op],
                             [x[keep] for x in args], f"cuda {type_name} {op}")


@pytest.mark.parametrize("type_name", TYPES)
def test_cuda_reductions_dot_and_transpose(type_name):
    """Row (warp shuffles of both parts), column (shared-memory partials) and per-thread
    reductions, the elemental dot and a transpose, all as GPU kernels."""
    t = type_name
    text = f"""HloModule m
sum {{
  x = {t}[] parameter(0)
  y = {t}[] parameter(1)
  ROOT s = {t}[] add(x, y)
}}
ENTRY e {{
  a = {t}[64,700] parameter(0)
  b = {t}[700,5] parameter(1)
  z = {t}[] constant((0.5, -1))
  rows = {t}[64] reduce(a, z), dimensions={{1}}, to_apply=sum
  cols = {t}[700] reduce(a, z), dimensions={{0}}, to_apply=sum
  d = {t}[64,5] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  tr = {t}[700,64] transpose(a), dimensions={{1,0}}
  ROOT r = ({t}[64], {t}[700], {t}[64,5], {t}[700,64]) tuple(rows, cols, d, tr)
}}"""
    rng = np.random.default_rng(4)
    a = random_complex(t, 64 * 700, rng, 0.5).reshape(64, 700)
    b = random_complex(t, 700 * 5, rng, 0.5).reshape(700, 5)
    got, want, ex = emulate_hlo(text, [a, b])
    used = {k.variant for k in ex.program.kernels}
    assert {"column-reduce"} <= used and used & {"row-reduce.warp", "row-reduce.block"}, used
    assert not ex.program.notes, ex.program.notes
    eps = np.finfo(TYPES[t][1]).eps
    for g, w, bound in ((got[0], want[0], np.abs(a).sum(1) + 1.2),
                        (got[1], want[1], np.abs(a).sum(0) + 1.2),
                        (got[2], want[2], np.abs(a) @ np.abs(b))):
        err = np.abs(np.asarray(g).astype(np.complex128) - w)
        assert (err <= 64 * eps * bound).all(), (t, err.max())
    assert_complex_close(got[3], want[3], 0, [], "transpose")


# ---- the complex samples, end to end ---------------------------------------------------------------

SAMPLE_CASES = [(n, s) for n in ("complex", "ops/complex_edges") for s in (".pb", ".opt.pb")]


def _check_outputs(name: str, outputs) -> None:
    meta = sample_meta(name)
    for i, (g, e, d) in enumerate(zip(outputs, sample_arrays(name, "expected"), meta["outputs"],
                                      strict=True)):
        g = np.asarray(g)
        assert mismatch(g, e, d) is None, (name, i, mismatch(g, e, d))
        if e.dtype.kind == "c":  # NaN/infinity classes too (isclose lumps complex NaNs)
            assert not (_klass(g.astype(np.complex128)) != _klass(e.astype(np.complex128))).any()


@pytest.mark.parametrize("name,suffix", SAMPLE_CASES, ids=[n + s for n, s in SAMPLE_CASES])
def test_samples_have_no_complex_fallback(name, suffix, tmp_path):
    path = SAMPLES / f"{name}{suffix}"
    if not path.exists():
        pytest.skip(f"{path} not generated")
    inputs = sample_arrays(name, "inputs")
    cpu = sample_bundle(path, tmp_path / "cpu.bundle")
    fallbacks = kernels_json(cpu)["fallbacks"]
    assert not fallbacks, fallbacks
    _check_outputs(name, load_cpu(cpu).run(inputs))
    compile_bundle(path, tmp_path / "cuda.bundle", target="cuda")
    bundle = read_bundle(str(tmp_path / "cuda.bundle"))
    executable = CudaEmulatedExecutable(bundle)
    assert not executable.program.notes, executable.program.notes
    _check_outputs(name, executable.run(inputs))
