"""hlo-run's file handling: loading inputs, writing outputs, comparing and summarizing."""

from __future__ import annotations

import json
import struct
import zipfile

import ml_dtypes
import numpy as np
import pytest

from hloc.errors import InputError
from hloc.runtime.io import (
    Signature,
    compare_arrays,
    compare_outputs,
    load_inputs,
    read_outputs,
    summarize,
    write_outputs,
)

pytestmark = pytest.mark.pure

BF16 = np.dtype(ml_dtypes.bfloat16)


def param(index, name, dtype, shape):
    return {"name": name, "index": index, "dtype": dtype, "shape": list(shape),
            "layout": list(range(len(shape)))[::-1]}


def result(index, dtype, shape):
    return {"index": index, "dtype": dtype, "shape": list(shape), "layout": None}


def signature(*params, results=None) -> Signature:
    results = results or [result(0, "f32", [4, 3])]
    return Signature.from_manifest({"entry": {
        "name": "main", "parameters": list(params), "results": results,
        "result_is_tuple": len(results) != 1}})


SIG = signature(param(0, "x", "f32", [4, 3]), param(1, "y", "f32", [4, 3]),
                param(2, "k", "s32", [2]))
X = np.arange(12, dtype=np.float32).reshape(4, 3)
Y = -X
K = np.array([7, -3], np.int32)


def bf16_bits(values) -> np.ndarray:
    """bf16 bit patterns computed independently: the top half of the f32 (exact values only)."""
    return np.array([struct.unpack("<I", struct.pack("<f", v))[0] >> 16 for v in values],
                    np.uint16)


# ---- signature --------------------------------------------------------------------------------


def test_signature_from_a_written_bundle(tmp_path):
    from hloc.bundle import read_bundle, write_bundle

    manifest = {"target": {"kind": "interpreter"},
                "entry": {"name": "main", "parameters": [param(0, "x", "bf16", [2, 2])],
                          "results": [result(0, "f32", [2]), result(1, "s8", [])],
                          "result_is_tuple": True},
                "compiler": {"version": "0", "flags": [], "passes": []},
                "input": {"sha256": "0" * 64, "form": "text"}}
    write_bundle(tmp_path / "m.bundle", manifest=manifest, members={"module.pb": b""})
    sig = Signature.from_manifest(read_bundle(tmp_path / "m.bundle").manifest)
    assert [(p.name, p.dtype, p.shape, p.layout) for p in sig.parameters] == [
        ("x", "bf16", (2, 2), (1, 0))]
    assert [(r.name, r.text) for r in sig.results] == [("out0", "f32[2]"), ("out1", "s8[]")]
    assert sig.result_is_tuple and sig.parameters[0].np_dtype == BF16


# ---- loading ----------------------------------------------------------------------------------


def test_npy_files_fill_parameters_in_order(tmp_path):
    for name, arr in (("a", X), ("b", Y), ("c", K)):
        np.save(tmp_path / f"{name}.npy", arr)
    got = load_inputs(SIG, [str(tmp_path / f"{n}.npy") for n in "abc"])
    for g, want in zip(got, (X, Y, K), strict=True):
        assert g.dtype == want.dtype
        np.testing.assert_array_equal(g, want)


def test_npz_by_arg_keys_and_names_mixed_with_npy(tmp_path):
    np.savez(tmp_path / "in.npz", arg2=K, x=X)
    np.save(tmp_path / "y.npy", Y)
    got = load_inputs(SIG, [str(tmp_path / "in.npz"), str(tmp_path / "y.npy")])
    np.testing.assert_array_equal(got[0], X)
    np.testing.assert_array_equal(got[1], Y)  # the .npy took the first free parameter
    np.testing.assert_array_equal(got[2], K)


def test_big_endian_input_is_accepted(tmp_path):
    np.save(tmp_path / "x.npy", X.astype(">f4"))
    sig = signature(param(0, "x", "f32", [4, 3]))
    (got,) = load_inputs(sig, [str(tmp_path / "x.npy")])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, X)


SIG_BF16 = signature(param(0, "h", "bf16", [2, 2]))


@pytest.mark.parametrize("form", ["ml_dtypes npz", "ml_dtypes npy", "bits npz", "bits npy"])
def test_bf16_inputs(tmp_path, form):
    values = [1.5, -2.0, 0.0078125, 256.0]
    arr = np.array(values, np.float32).astype(BF16).reshape(2, 2)
    data = arr if form.startswith("ml_dtypes") else bf16_bits(values).reshape(2, 2)
    path = tmp_path / ("in.npz" if form.endswith("npz") else "in.npy")
    if form.endswith("npz"):
        np.savez(path, arg0=data)
    else:
        np.save(path, data)
    if form.startswith("ml_dtypes"):  # what numpy gives back for an ml_dtypes array: void
        loaded = np.load(path)
        stored = loaded["arg0"] if form.endswith("npz") else loaded
        assert stored.dtype.kind == "V" and stored.dtype.itemsize == 2
    (got,) = load_inputs(SIG_BF16, [str(path)])
    assert got.dtype == BF16
    assert got.astype(np.float32).ravel().tolist() == values


@pytest.mark.parametrize("dtype,bits,values", [
    ("f8e4m3fn", np.uint8([0x38, 0xB8, 0x7E]), [1.0, -1.0, 448.0]),
    ("f8e5m2", np.uint8([0x3C, 0xC0]), [1.0, -2.0]),
    ("s4", np.uint8([0x01, 0x0F, 0x08]), [1, -1, -8]),
    ("u4", np.uint8([0x0F, 0x03]), [15, 3]),
])
def test_narrow_types_from_bit_patterns(tmp_path, dtype, bits, values):
    np.save(tmp_path / "a.npy", bits)
    sig = signature(param(0, "a", dtype, [len(values)]))
    (got,) = load_inputs(sig, [str(tmp_path / "a.npy")])
    assert got.dtype == sig.parameters[0].np_dtype
    assert got.astype(np.float64).tolist() == values


@pytest.mark.parametrize("data,message", [
    (np.zeros((3, 4), np.float32), "parameter 1 (y): expected f32[4,3], got f32[3,4] from"),
    (np.zeros((4, 3), np.float64), "parameter 1 (y): expected f32[4,3], got f64[4,3] from"),
    (np.zeros((4, 3), np.int32), "parameter 1 (y): expected f32[4,3], got s32[4,3] from"),
    (np.zeros((4, 3), np.uint32), "expected f32[4,3], got u32[4,3]"),  # bits only for narrow types
    (np.zeros(12, np.float32), "expected f32[4,3], got f32[12]"),
    (np.array(["a", "b"]), "expected f32[4,3], got <U1[2]"),
])
def test_wrong_type_or_shape_names_parameter_and_file(tmp_path, data, message):
    np.save(tmp_path / "a.npy", X)
    np.save(tmp_path / "b.npy", data)
    with pytest.raises(InputError) as info:
        load_inputs(SIG, [str(tmp_path / "a.npy"), str(tmp_path / "b.npy")], random=True)
    assert message in str(info.value)
    assert str(info.value).endswith(f"from {tmp_path / 'b.npy'}")


def test_bf16_wrong_width_or_signedness(tmp_path):
    for bad, got in ((np.zeros((2, 2), np.int16), "s16[2,2]"),
                     (np.zeros((2, 2), np.uint8), "u8[2,2]"),
                     (np.zeros((2, 2), np.float32), "f32[2,2]")):
        np.save(tmp_path / "h.npy", bad)
        with pytest.raises(InputError, match=rf"expected bf16\[2,2\], got {got.replace('[', '.')}"):
            load_inputs(SIG_BF16, [str(tmp_path / "h.npy")])


def test_npz_shape_error_names_the_key(tmp_path):
    np.savez(tmp_path / "in.npz", x=X.T)
    with pytest.raises(InputError, match=r"parameter 0 \(x\): expected f32\[4,3\], got f32\[3,4\] "
                                         r"from .*in\.npz\[x\]$"):
        load_inputs(SIG, [str(tmp_path / "in.npz")], zero=True)


def test_too_many_inputs(tmp_path):
    for n, arr in (("a", X), ("b", Y), ("c", K), ("d", K)):
        np.save(tmp_path / f"{n}.npy", arr)
    files = [str(tmp_path / f"{n}.npy") for n in "abcd"]
    with pytest.raises(InputError, match="too many inputs: the entry takes 3") as info:
        load_inputs(SIG, files)
    assert info.value.path == files[3]


def test_missing_inputs_are_listed(tmp_path):
    np.save(tmp_path / "a.npy", X)
    with pytest.raises(InputError, match=r"no input for parameter\(s\) 1 \(y: f32\[4,3\]\), "
                                         r"2 \(k: s32\[2\]\); pass --inputs"):
        load_inputs(SIG, [str(tmp_path / "a.npy")])


def test_unknown_key_and_duplicates(tmp_path):
    np.savez(tmp_path / "u.npz", w=X)
    with pytest.raises(InputError, match="unknown key 'w': expected arg0..arg2 or a parameter "
                                         "name \\(x, y, k\\)"):
        load_inputs(SIG, [str(tmp_path / "u.npz")])
    np.savez(tmp_path / "d.npz", arg0=X, x=X)
    with pytest.raises(InputError, match=r"parameter 0 \(x\) is given twice"):
        load_inputs(SIG, [str(tmp_path / "d.npz")], zero=True)
    np.savez(tmp_path / "e.npz", arg9=X)  # out of range: not an argN key
    with pytest.raises(InputError, match="unknown key 'arg9'"):
        load_inputs(SIG, [str(tmp_path / "e.npz")])


@pytest.mark.parametrize("content,fragment", [
    (None, "no such file"),
    (b"just text", "not a .npy or .npz file"),
    (b"", "not a .npy or .npz file"),
    (b"PK\x03\x04" + b"\0" * 50, "cannot read npz file"),
    (b"\x93NUMPY\x01\x00garbage", "cannot read npy file"),
])
def test_unreadable_input_files(tmp_path, content, fragment):
    path = tmp_path / "in.npz"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InputError, match=fragment) as info:
        load_inputs(SIG, [str(path)])
    assert info.value.path == str(path)


def test_truncated_npz_and_pickled_arrays_are_refused(tmp_path):
    np.savez(tmp_path / "ok.npz", arg0=X)
    data = (tmp_path / "ok.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="cannot read npz file"):
        load_inputs(SIG, [str(tmp_path / "cut.npz")])
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(InputError, match="cannot read npy file"):
        load_inputs(SIG, [str(tmp_path / "obj.npy")])


def test_random_inputs_are_deterministic_and_typed():
    sig = signature(param(0, "a", "f32", [50]), param(1, "b", "s8", [200]),
                    param(2, "c", "pred", [100]), param(3, "d", "bf16", [8]),
                    param(4, "e", "u4", [64]), param(5, "f", "f8e8m0fnu", [16]),
                    param(6, "g", "c64", [4]), param(7, "h", "s2", [40]))
    first = load_inputs(sig, [], random=True, seed=3)
    again = load_inputs(sig, [], random=True, seed=3)
    other = load_inputs(sig, [], random=True, seed=4)
    for spec, a, b, c in zip(sig.parameters, first, again, other, strict=True):
        assert a.dtype == spec.np_dtype and a.shape == spec.shape
        np.testing.assert_array_equal(a, b)
        assert a.tobytes() != c.tobytes(), spec.name
    assert np.isfinite(first[0]).all() and first[0].std() > 0.5
    assert -8 <= first[1].min() < 0 < first[1].max() <= 8
    assert first[2].any() and not first[2].all()
    assert 0 <= first[4].astype(int).min() and first[4].astype(int).max() <= 15
    assert (first[5].astype(np.float64) > 0).all() and np.isfinite(first[5].astype(float)).all()
    assert np.iscomplexobj(first[6]) and np.abs(first[6].imag).sum() > 0
    assert set(first[7].astype(int).tolist()) <= {-2, -1, 0, 1}


def test_random_fill_does_not_depend_on_given_inputs(tmp_path):
    np.save(tmp_path / "a.npy", X)
    all_random = load_inputs(SIG, [], random=True, seed=1)
    partly = load_inputs(SIG, [str(tmp_path / "a.npy")], random=True, seed=1)
    np.testing.assert_array_equal(partly[0], X)
    np.testing.assert_array_equal(partly[1], all_random[1])
    np.testing.assert_array_equal(partly[2], all_random[2])


def test_zero_inputs_and_exclusive_flags():
    got = load_inputs(SIG, [], zero=True)
    assert all(not g.any() for g in got) and got[2].dtype == np.int32
    with pytest.raises(InputError, match="exclude each other"):
        load_inputs(SIG, [], random=True, zero=True)


def test_snapshot_args_fill_missing_parameters(tmp_path):
    np.save(tmp_path / "a.npy", X)
    got = load_inputs(SIG, [str(tmp_path / "a.npy")], snapshot_args=[Y * 9, Y, K])
    np.testing.assert_array_equal(got[0], X)  # files win over the snapshot
    np.testing.assert_array_equal(got[1], Y)
    with pytest.raises(InputError, match="from the snapshot"):
        load_inputs(SIG, [], snapshot_args=[X, X, X])


# ---- writing outputs --------------------------------------------------------------------------


def test_write_outputs_plain_types(tmp_path):
    path = tmp_path / "out.npz"
    write_outputs(path, [X, K, np.array(True)])
    with np.load(path) as z:
        assert sorted(z.files) == ["out0", "out1", "out2"]
        np.testing.assert_array_equal(z["out0"], X)
        np.testing.assert_array_equal(z["out1"], K)
        assert z["out2"].dtype == np.bool_ and z["out2"].shape == ()
    first = path.read_bytes()
    write_outputs(path, [X, K, np.array(True)])
    assert path.read_bytes() == first  # fixed zip metadata: same arrays, same bytes
    assert [p.name for p in tmp_path.iterdir()] == ["out.npz"]


def test_write_outputs_narrow_types_as_bits_with_dtypes_key(tmp_path):
    values = [1.5, -2.0, 0.0078125]
    h = np.array(values, np.float32).astype(BF16)
    q = np.array([1, -1], dtype=ml_dtypes.int4)
    path = tmp_path / "out.npz"
    write_outputs(path, [X, h, q])
    with np.load(path, allow_pickle=False) as z:
        assert sorted(z.files) == ["__dtypes__", "out0", "out1", "out2"]
        assert z["out1"].dtype == np.uint16
        np.testing.assert_array_equal(z["out1"], bf16_bits(values))
        assert z["out2"].tolist() == [0x01, 0x0F]
        assert json.loads(str(z["__dtypes__"])) == {"out1": "bf16", "out2": "s4"}
    back = read_outputs(str(path))
    assert back[1].dtype == BF16 and back[1].astype(np.float32).tolist() == values
    assert back[2].dtype == q.dtype and back[2].astype(int).tolist() == [1, -1]


def test_write_outputs_failure_leaves_target(tmp_path):
    path = tmp_path / "out.npz"
    path.write_bytes(b"old")
    with pytest.raises(ValueError):
        write_outputs(path, [X, np.array([object()], dtype=object)])
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.npz"]
    with pytest.raises(InputError, match="cannot write outputs"):
        write_outputs(tmp_path / "missing" / "o.npz", [X])


def test_read_outputs_checks_keys(tmp_path):
    np.savez(tmp_path / "e.npz", out0=X, out2=X)
    with pytest.raises(InputError, match="keys must be out0..out1"):
        read_outputs(str(tmp_path / "e.npz"))
    np.save(tmp_path / "e.npy", X)
    with pytest.raises(InputError, match="expected an .npz file"):
        read_outputs(str(tmp_path / "e.npy"))


# ---- comparing --------------------------------------------------------------------------------


def _reference_check(actual, expected, rtol, atol):
    """Independent element loop: (mismatches, first index, max abs, max rel) in float64."""
    mismatches, first, max_abs, max_rel = 0, None, 0.0, 0.0
    for index in np.ndindex(expected.shape):
        a, e = float(actual[index]), float(expected[index])
        if np.isnan(a) or np.isnan(e):
            bad = np.isnan(a) != np.isnan(e)
        elif np.isinf(a) or np.isinf(e):
            bad = a != e
        else:
            d = abs(a - e)
            max_abs = max(max_abs, d)
            if e != 0:
                max_rel = max(max_rel, d / abs(e))
            bad = d > atol + rtol * abs(e)
        if bad:
            mismatches += 1
            first = first or index
    return mismatches, first, max_abs, max_rel


def test_compare_reports_known_float_differences():
    rng = np.random.default_rng(0)
    expected = rng.standard_normal((6, 7)).astype(np.float32)
    actual = expected.copy()
    actual[1, 2] += 0.5
    actual[4, 0] *= 1.001
    actual[5, 6] = expected[5, 6] + 1e-7
    actual[3, 3] = np.nan
    expected[2, 2] = actual[2, 2] = np.nan  # NaN meets NaN
    expected[0, 0] = actual[0, 0] = -np.inf  # same infinity
    report = compare_arrays([actual], [expected], rtol=1e-4, atol=1e-6)
    check = report.checks[0]
    count, first, max_abs, max_rel = _reference_check(actual, expected, 1e-4, 1e-6)
    assert (check.mismatches, check.first_mismatch) == (count, first) == (3, (1, 2))
    assert check.max_abs == pytest.approx(max_abs, rel=1e-12)
    assert check.max_rel == pytest.approx(max_rel, rel=1e-12)
    assert not report.ok and not check.ok
    assert "1 NaN/Inf mismatch" in check.note
    text = report.format()
    assert "MISMATCH at [1, 2]" in text and "FAIL: 0 of 1 output(s) match" in text


def test_nan_and_infinity_rules():
    e = np.array([np.nan, np.inf, -np.inf, 1.0, np.inf], np.float64)
    a = np.array([np.nan, np.inf, np.inf, np.nan, 1e308], np.float64)
    check = compare_arrays([a], [e], rtol=0.5, atol=0).checks[0]
    assert check.mismatches == 3 and check.first_mismatch == (2,)
    assert check.max_abs == 0.0  # no finite pair differs


def test_integers_and_predicates_are_exact():
    e = np.array([[1, 2], [3, 2_000_000_000]], np.int32)
    a = e.copy()
    a[1, 1] -= 1
    check = compare_arrays([a], [e], rtol=1.0, atol=10.0).checks[0]
    assert (check.mismatches, check.first_mismatch, check.max_abs) == (1, (1, 1), 1.0)
    p = np.array([True, False, True])
    check = compare_arrays([~p], [p]).checks[0]
    assert check.mismatches == 3 and check.first_values == "false vs true"


def test_type_and_shape_differences_fail_the_output():
    report = compare_arrays([X, K], [X.astype(np.float64), K[:1]])
    assert [c.ok for c in report.checks] == [False, False]
    assert "expected f64[4,3]" in report.checks[0].note
    assert "expected s32[1]" in report.checks[1].note


def test_default_tolerances_by_type():
    e = np.linspace(-3, 3, 50).astype(np.float32)
    assert compare_arrays([e * np.float32(1 + 1e-6)], [e]).ok
    assert not compare_arrays([e * np.float32(1 + 1e-2)], [e]).ok
    h = e.astype(BF16)
    one_ulp = (h.view(np.uint16) + 1).view(BF16)
    assert compare_arrays([one_ulp], [h]).ok
    assert not compare_arrays([(h.astype(np.float32) * 1.25).astype(BF16)], [h]).ok


def test_compare_outputs_against_samples_style_file(tmp_path):
    """Expected files store bf16 as uint16 bits (no __dtypes__); the dtypes hint restores them."""
    values = [1.5, -2.0, 0.0078125]
    np.savez(tmp_path / "exp.npz", out0=X, out1=bf16_bits(values))
    actual = [X.copy(), np.array(values, np.float32).astype(BF16)]
    assert compare_outputs(actual, str(tmp_path / "exp.npz"), dtypes=["f32", "bf16"]).ok
    assert compare_outputs(actual, str(tmp_path / "exp.npz")).ok  # hint from actual's types
    actual[1] = np.array([1.5, -2.0, 1.0], np.float32).astype(BF16)
    report = compare_outputs(actual, str(tmp_path / "exp.npz"))
    assert not report.ok and report.checks[1].first_mismatch == (2,)
    assert report.checks[1].first_values == "1 vs 0.0078125"
    with pytest.raises(InputError, match="has 2 output"):
        compare_outputs([X], str(tmp_path / "exp.npz"))


def test_compare_outputs_round_trip_through_write_outputs(tmp_path):
    h = np.array([0.5, 4.0], np.float32).astype(BF16)
    write_outputs(tmp_path / "o.npz", [X, h, K])
    report = compare_outputs([X, h, K], str(tmp_path / "o.npz"), rtol=0, atol=0)
    assert report.ok
    assert report.format().splitlines()[-1] == "OK: 3 of 3 output(s) match"


def test_f8e5m2_saved_by_ml_dtypes(tmp_path):
    """ml_dtypes writes float8_e5m2 with descr '<f1', which numpy cannot read back."""
    values = [1.0, -2.0, 0.5]
    arr = np.array(values, dtype=ml_dtypes.float8_e5m2)
    np.save(tmp_path / "a.npy", arr)
    with pytest.raises(ValueError):
        np.load(tmp_path / "a.npy")
    np.savez(tmp_path / "b.npz", arg1=arr.reshape(3, 1))
    sig = signature(param(0, "a", "f8e5m2", [3]), param(1, "b", "f8e5m2", [3, 1]))
    got = load_inputs(sig, [str(tmp_path / "a.npy"), str(tmp_path / "b.npz")])
    assert [g.dtype for g in got] == [arr.dtype, arr.dtype]
    assert got[0].astype(float).tolist() == values
    assert got[1].astype(float).ravel().tolist() == values


def test_unreadable_expected_file(tmp_path):
    (tmp_path / "e.npz").write_bytes(b"PK\x03\x04broken")
    with pytest.raises(InputError, match="cannot read npz file"):
        compare_outputs([X], str(tmp_path / "e.npz"))
    with zipfile.ZipFile(tmp_path / "f.npz", "w") as zf:
        zf.writestr("out0.npy", b"not an npy payload")
    with pytest.raises(InputError, match="cannot read npz file"):
        compare_outputs([X], str(tmp_path / "f.npz"))


# ---- summary ----------------------------------------------------------------------------------


def test_summarize():
    f = np.array([[1.5, -2.0], [np.nan, 4.0]], np.float32)
    text = summarize([f, np.array([True, False, True]), np.zeros((0, 3), np.int8),
                      np.array(7, np.int64)])
    lines = text.splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("out0  f32[2,2]")
    finite = f[np.isfinite(f)]
    assert f"min={finite.min():.4g}" in lines[0] and f"max={finite.max():.4g}" in lines[0]
    assert f"mean={finite.mean():.4g}" in lines[0] and "nan/inf=1" in lines[0]
    assert "[1.5, -2, nan, 4]" in lines[0]
    assert "true=2/3" in lines[1] and "(empty)" in lines[2]
    assert lines[3].startswith("out3  s64[]") and "[7]" in lines[3]
    long = summarize([np.arange(100, dtype=np.float32)])
    assert long.endswith("[0, 1, 2, 3, 4, 5, ...]")


# ---- the sample corpus (XLA's own inputs and outputs) ----------------------------------------


def _sample_signature(meta: dict) -> Signature:
    params = [param(i, f"p{i}", p["dtype"], p["shape"]) for i, p in enumerate(meta["params"])]
    results = [result(i, o["dtype"], o["shape"]) for i, o in enumerate(meta["outputs"])]
    return Signature.from_manifest({"entry": {"name": "main", "parameters": params,
                                              "results": results,
                                              "result_is_tuple": len(results) != 1}})


def _all_samples() -> list[str]:
    from tests.conftest import sample_names

    return sample_names() + sample_names("ops")


@pytest.mark.parametrize("name", _all_samples() or ["(no samples)"])
def test_sample_files_load_and_compare(tmp_path, name):
    """Every sample's inputs load with the right types; its expected outputs compare equal to
    themselves bit for bit after a write/read round trip (bf16/f8 bits included)."""
    from tests.conftest import SAMPLES, require_samples, sample_arrays, sample_meta

    require_samples()
    meta = sample_meta(name)
    if any(p["dtype"] == "token" for p in meta["params"] + meta["outputs"]):
        pytest.skip("token values are not files")
    sig = _sample_signature(meta)
    inputs = load_inputs(sig, [str(SAMPLES / f"{name}.inputs.npz")])
    for got, want in zip(inputs, sample_arrays(name, "inputs"), strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()
    expected = sample_arrays(name, "expected")
    path = str(SAMPLES / f"{name}.expected.npz")
    report = compare_outputs(expected, path, rtol=0, atol=0, dtypes=[r.dtype for r in sig.results])
    assert report.ok, report.format()
    write_outputs(tmp_path / "o.npz", expected)
    back = read_outputs(str(tmp_path / "o.npz"))
    assert [b.tobytes() for b in back] == [e.tobytes() for e in expected]
    assert [b.dtype for b in back] == [e.dtype for e in expected]


def test_outputs_of_a_module_computing_in_bf16_get_bf16_tolerances():
    from hloc.ir.text.parser import parse_module
    from hloc.runtime.io import narrow_float_type

    mixed = parse_module("""HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  h = bf16[4] convert(x)
  g = f16[4] convert(x)
  ROOT y = f32[4] convert(h)
}
""")
    plain = parse_module("HloModule p\nENTRY e {\n  x = f32[4] parameter(0)\n"
                         "  ROOT y = f32[4] negate(x)\n}\n")
    assert narrow_float_type(mixed) == "bf16"  # bf16's tolerances are the wider
    assert narrow_float_type(plain) is None
    expected = np.array([1.0, 2.0, -3.0, 0.5], np.float32)
    actual = expected * np.float32(1 + 2 ** -8)  # one bf16 rounding step off
    assert not compare_arrays([actual], [expected]).ok
    check = compare_arrays([actual], [expected], computed_in="bf16").checks[0]
    assert check.ok and "computed in bf16" in check.note
    # Given tolerances win; integer outputs stay exact.
    assert not compare_arrays([actual], [expected], rtol=1e-5, computed_in="bf16").ok
    ints = np.array([1, 2], np.int32)
    assert not compare_arrays([ints + 1], [ints], computed_in="bf16").ok
