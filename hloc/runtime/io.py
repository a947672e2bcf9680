"""hlo-run's input and output files: loading, writing, comparing and summarizing arrays.

- `Signature.from_manifest(manifest)`: the entry's parameters and flattened results.
- `load_inputs(sig, files, random=, zero=, seed=, snapshot_args=)`: one array per parameter.
  Each `.npy` fills the lowest-numbered parameter not filled yet; a `.npz` fills parameters by
  key, `arg0`, `arg1`, ... or the parameter's name (argN wins if both could match; keys
  starting with `__` are ignored). Files are recognized by content. Then `snapshot_args`
  (e.g. an HloSnapshot's arguments, one per parameter) fill what is still missing, then
  `random` (deterministic in `seed` and the parameter number) or `zero`.
  Types whose numpy dtype comes from ml_dtypes (bf16, f8*, f4*, s4/u4/s2/u2) are accepted as
  the ml_dtypes array, as the void dtype numpy gives such arrays when loaded from a file
  (`V2`...), or as the unsigned integer of the same width holding the bit pattern (how the
  samples store them). Everything else must match exactly (byte order aside): a mismatch
  names the parameter, the expected and the given type, and the file. Helpers used on the
  way, public for the CLI: `read_arrays(file)` (never unpickles; float8_e5m2 arrays saved by
  ml_dtypes, which numpy itself cannot reload, come back as bits), `coerce(spec, arr, source)`,
  `random_array(spec, seed)`.
- `write_outputs(path, arrays)`: an `.npz` with keys out0, out1, ...; written atomically with
  fixed zip metadata. ml_dtypes arrays are stored as same-width unsigned bit patterns and the
  file then has one more key, `__dtypes__`, a JSON string {"out0": "bf16", ...}, which
  `read_outputs` and `compare_outputs` use to restore the types. (Plain numpy readers see
  the bit patterns, the samples' convention.)
- `compare_outputs(actual, expected_path, rtol=, atol=, dtypes=) -> Report` and
  `compare_arrays(actual, expected)`: per output the max absolute and relative error, the
  mismatch count and first mismatching index. Floats pass where |a-e| <= atol + rtol*|e|
  (numpy's isclose), NaN must meet NaN and an infinity the same infinity; integers and
  predicates must be equal. Unset tolerances come from `DEFAULT_TOLERANCES` by dtype.
- `summarize(arrays)`: a few lines for a human (dtype, shape, min/max/mean, first values).
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..ir import dtypes
from ..util.record import dataclass
from .tolerance import (
    DEFAULT_TOLERANCES,
    OutputCheck,
    Report,
    compare_arrays,
    describe,
    judge_rounding,
    narrow_float_type,
    summarize,
    without_finite_values,
)

__all__ = [
    "DEFAULT_TOLERANCES", "OutputCheck", "Report", "Signature", "TensorSpec", "compare_arrays",
    "judge_rounding", "narrow_float_type",
    "compare_outputs", "describe", "load_inputs", "read_outputs", "summarize", "without_finite_values", "write_outputs",
]

DTYPES_KEY = "__dtypes__"
_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")


@dataclass(frozen=True)
class TensorSpec:
    """One entry parameter or one flattened result: position, name, element type, dims."""

    index: int
    name: str
    dtype: str  # HLO type name, e.g. "f32", "bf16"
    shape: tuple[int, ...]
    layout: tuple[int, ...] | None = None

    @property
    def np_dtype(self) -> np.dtype:
        return dtypes.to_numpy(dtypes.from_name(self.dtype))

    @property
    def text(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"

    @property
    def label(self) -> str:
        return f"parameter {self.index} ({self.name})"


@dataclass(frozen=True)
class Signature:
    """An entry computation's parameters and depth-first flattened results."""

    parameters: tuple[TensorSpec, ...]
    results: tuple[TensorSpec, ...]
    result_is_tuple: bool

    @staticmethod
    def from_manifest(manifest: Mapping) -> Signature:
        entry = manifest["entry"]
        params = tuple(_spec(p, p["name"]) for p in entry["parameters"])
        results = tuple(_spec(r, f"out{r['index']}") for r in entry["results"])
        return Signature(params, results, bool(entry["result_is_tuple"]))


def _spec(d: Mapping, name: str) -> TensorSpec:
    layout = tuple(d["layout"]) if d.get("layout") is not None else None
    return TensorSpec(int(d["index"]), name, d["dtype"], tuple(d["shape"]), layout)


# ---- loading ---------------------------------------------------------------------------------


def load_inputs(signature: Signature, files: Sequence[str], *, random: bool = False,
                zero: bool = False, seed: int = 0,
                snapshot_args: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
    """One checked array per parameter, in parameter order (see the module docstring)."""
    if random and zero:
        raise InputError("--random-inputs and --zero-inputs exclude each other")
    params = signature.parameters
    slots: list[tuple[np.ndarray, str] | None] = [None] * len(params)
    for file in files:
        for index, array, source in _read_input_file(signature, file, slots):
            if slots[index] is not None:
                raise InputError(f"{params[index].label} is given twice "
                                 f"({slots[index][1]} and {source})")
            slots[index] = (coerce(params[index], array, source), source)
    for i, arr in enumerate((snapshot_args or [])[:len(params)]):
        if slots[i] is None:
            slots[i] = (coerce(params[i], arr, "the snapshot"), "the snapshot")
    missing = [p for p, s in zip(params, slots, strict=True) if s is None]
    if missing and not (random or zero):
        names = ", ".join(f"{p.index} ({p.name}: {p.text})" for p in missing)
        raise InputError(f"no input for parameter(s) {names}; pass --inputs, --random-inputs "
                         "or --zero-inputs")
    fill = random_array if random else _zero_array
    return [slot[0] if slot is not None else fill(spec, seed)
            for spec, slot in zip(params, slots, strict=True)]


def _zero_array(spec: TensorSpec, seed: int) -> np.ndarray:
    return np.zeros(spec.shape, spec.np_dtype)


def _read_input_file(signature: Signature, file: str, slots: list):
    """Yield (parameter index, array, source) for the arrays of one input file."""
    kind, arrays = read_arrays(file, max_bytes=_input_budget(signature))
    if kind == "npy":
        free = [i for i, s in enumerate(slots) if s is None]
        if not free:
            raise InputError(f"too many inputs: the entry takes {len(slots)} parameter(s), "
                             "all given before this file", path=file)
        yield free[0], arrays["arr"], file
        return
    by_name = {p.name: p.index for p in signature.parameters}
    for key, arr in arrays.items():
        if key.startswith("__"):
            continue
        index = _arg_index(key, len(slots))
        index = by_name.get(key) if index is None else index
        if index is None:
            raise InputError(f"unknown key {key!r}: expected arg0..arg{len(slots) - 1} or a "
                             f"parameter name ({', '.join(by_name) or 'none'})", path=file)
        yield index, arr, f"{file}[{key}]"


def _arg_index(key: str, count: int) -> int | None:
    if key.startswith("arg") and key[3:].isdigit() and int(key[3:]) < count:
        return int(key[3:])
    return None


# Room for .npy headers (and bit-pattern metadata) on top of the parameters' own bytes.
_HEADER_SLACK = 1 << 16


def _input_budget(signature: Signature) -> int:
    """The most bytes the input files may inflate to: every parameter once, plus headers."""
    total = sum(math.prod(p.shape) * p.np_dtype.itemsize for p in signature.parameters)
    return total + _HEADER_SLACK * (len(signature.parameters) + 1)


def _check_size(size: int, max_bytes: int | None, what: str) -> None:
    """Refuse a member or file larger than the parameters could need, before reading it."""
    if max_bytes is not None and size > max_bytes:
        raise ValueError(f"{what} holds {size} bytes, more than the {max_bytes} the entry "
                         "parameters need; refused before reading it")


def read_arrays(file: str, max_bytes: int | None = None) -> tuple[str, dict[str, np.ndarray]]:
    """("npy", {"arr": a}) or ("npz", {key: a}); never unpickles; InputError names the file.
    With `max_bytes`, a file or member that would inflate past it is refused unread."""
    kind = _sniff(file)
    try:
        if kind == "npy":
            _check_size(os.path.getsize(file), max_bytes, "the file")
            return kind, {"arr": _parse_npy(Path(file).read_bytes())}
        arrays = {}
        with zipfile.ZipFile(file) as zf:
            infos = zf.infolist()
            _check_size(sum(i.file_size for i in infos), max_bytes, "the archive")
            for info in infos:
                key = info.filename.removesuffix(".npy")
                arrays[key] = _parse_npy(zf.read(info))
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as e:
        raise InputError(f"cannot read {kind} file ({_first_line(e)})", path=file) from None
    return kind, arrays


def _parse_npy(data: bytes) -> np.ndarray:
    """One .npy payload. float8_e5m2 arrays saved by ml_dtypes carry the descr '<f1', which
    numpy cannot read back; those come back as their uint8 bit patterns."""
    shape, fortran, offset = _checked_npy_header(data)
    try:
        return np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
    except ValueError as e:
        if "'<f1'" not in str(e) and "'|f1'" not in str(e):
            raise
    bits = np.frombuffer(data, np.uint8, count=math.prod(shape), offset=offset)
    return bits.reshape(shape, order="F" if fortran else "C").copy()


# The fields of a .npy header dict we need, read by pattern: nothing is evaluated.
_NPY_SHAPE = re.compile(r"'shape':\s*\(([0-9,\s]*)\)")
_NPY_FORTRAN = re.compile(r"'fortran_order':\s*(True|False)")
_NPY_DESCR = re.compile(r"'descr':\s*'([<>|=]?[a-zA-Z]\d{0,2})'")


def _checked_npy_header(data: bytes) -> tuple[tuple[int, ...], bool, int]:
    """(shape, fortran order, data offset) of a .npy, read by pattern. A header declaring more
    data than follows it is refused before numpy allocates the array (a 100-byte file claiming
    10^12 elements is refused at once, not by MemoryError)."""
    stream = io.BytesIO(data)
    version = np.lib.format.read_magic(stream)
    width = 2 if version == (1, 0) else 4
    header_length = int.from_bytes(stream.read(width), "little")
    header = stream.read(header_length).decode("latin1")
    shape_match = _NPY_SHAPE.search(header)
    order_match = _NPY_FORTRAN.search(header)
    if shape_match is None or order_match is None:
        raise ValueError("malformed .npy header")
    shape = tuple(int(d) for d in shape_match.group(1).replace(" ", "").split(",") if d)
    elements = math.prod(shape)
    descr = _NPY_DESCR.search(header)
    try:
        itemsize = np.dtype(descr.group(1)).itemsize if descr else 1
    except TypeError:
        itemsize = 1  # '<f1' (float8 bit patterns) and other types numpy cannot name: 1 byte
    declared = elements * max(itemsize, 1)
    available = len(data) - stream.tell()
    if declared > available:
        raise ValueError(f"the .npy header declares {elements} elements ({declared} bytes) but "
                         f"only {available} bytes follow it")
    return shape, order_match.group(1) == "True", stream.tell()


def _sniff(file: str) -> str:
    """"npy" or "npz", from the first bytes (extensions are not trusted)."""
    try:
        with open(file, "rb") as f:
            head = f.read(8)
    except FileNotFoundError:
        raise InputError("no such file", path=file) from None
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", path=file) from None
    if head.startswith(_NPY_MAGIC):
        return "npy"
    if head[:4] in _ZIP_MAGICS:
        return "npz"
    raise InputError("not a .npy or .npz file", path=file)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def coerce(spec: TensorSpec, arr: np.ndarray, source: str) -> np.ndarray:
    """The array as spec's dtype (reinterpreting bit patterns where allowed), shape-checked."""
    arr = np.asarray(arr)
    want = spec.np_dtype
    if arr.dtype != want and arr.dtype.newbyteorder("=") == want:
        arr = arr.astype(want)
    elif arr.dtype != want and _is_bit_pattern_of(arr.dtype, want):
        arr = _contiguous(arr).view(want)
    if arr.dtype != want or arr.shape != spec.shape:
        raise InputError(f"{spec.label}: expected {spec.text}, got {describe(arr)} from {source}")
    return _contiguous(arr)


def _is_bit_pattern_of(given: np.dtype, want: np.dtype) -> bool:
    """Void or same-width unsigned data stands for an ml_dtypes type (bf16, f8, s4, ...)."""
    if not is_ml_dtype(want) or given.itemsize != want.itemsize:
        return False
    return (given.kind == "V" and given.fields is None) or given.kind == "u"


def is_ml_dtype(dt: np.dtype) -> bool:
    """True for element types numpy lacks and ml_dtypes provides (files cannot name them)."""
    return dt.type.__module__.startswith("ml_dtypes")


def _contiguous(arr: np.ndarray) -> np.ndarray:
    # np.ascontiguousarray would turn a 0-d array into a 1-d one.
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def random_array(spec: TensorSpec, seed: int) -> np.ndarray:
    """Deterministic in (seed, parameter number): normal floats, small ints, random preds."""
    rng = np.random.default_rng([seed, spec.index])
    kind = dtypes.info(dtypes.from_name(spec.dtype)).kind
    return _RANDOM[kind](rng, spec)


def _random_float(rng: np.random.Generator, spec: TensorSpec) -> np.ndarray:
    if spec.dtype == "f8e8m0fnu":  # powers of two only: no sign, no zero
        return np.exp2(rng.integers(-4, 5, spec.shape)).astype(spec.np_dtype)
    return rng.standard_normal(spec.shape).astype(spec.np_dtype)


def _random_int(rng: np.random.Generator, spec: TensorSpec) -> np.ndarray:
    bits = dtypes.info(dtypes.from_name(spec.dtype)).bits
    signed = spec.dtype.startswith("s")
    lo = max(-8, -(1 << (bits - 1))) if signed else 0
    hi = min(8 if signed else 16, (1 << (bits - 1 if signed else bits)))
    return rng.integers(lo, hi, spec.shape).astype(spec.np_dtype)


def _random_complex(rng: np.random.Generator, spec: TensorSpec) -> np.ndarray:
    parts = rng.standard_normal((2, *spec.shape))
    return (parts[0] + 1j * parts[1]).astype(spec.np_dtype)


_RANDOM = {
    "float": _random_float,
    "int": _random_int,
    "uint": _random_int,
    "pred": lambda rng, spec: rng.random(spec.shape) < 0.5,
    "complex": _random_complex,
}


# ---- writing and reading outputs ---------------------------------------------------------------


def write_outputs(path: str | os.PathLike, arrays: Sequence[np.ndarray]) -> None:
    """Write out0.. (plus __dtypes__ when bit patterns are stored) atomically."""
    entries: dict[str, np.ndarray] = {}
    special: dict[str, str] = {}
    for i, arr in enumerate(arrays):
        arr = _contiguous(np.asarray(arr))
        if is_ml_dtype(arr.dtype):
            special[f"out{i}"] = dtypes.name(dtypes.from_numpy(arr.dtype))
            arr = arr.view(np.dtype(f"u{arr.dtype.itemsize}"))
        entries[f"out{i}"] = arr
    if special:
        entries[DTYPES_KEY] = np.array(json.dumps(special, sort_keys=True))
    _write_npz_atomic(Path(path), entries)


def _write_npz_atomic(target: Path, entries: dict[str, np.ndarray]) -> None:
    # The same exclusive, unpredictable temp file as bundles: no planted symlink is followed.
    from ..util.safe_write import safe_writer

    with safe_writer(str(target), "cannot write outputs") as f, zipfile.ZipFile(
            f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for key, arr in entries.items():
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o100644 << 16
            with zf.open(info, "w", force_zip64=True) as out:
                np.lib.format.write_array(out, arr, allow_pickle=False)


def read_outputs(path: str, dtypes_hint: Sequence[str] | None = None,
                 max_bytes: int | None = None) -> list[np.ndarray]:
    """out0..outN-1 of an outputs/expected file, bit patterns restored to their real types.

    Types come from the file's __dtypes__ key, else from dtypes_hint (HLO type names, e.g.
    the signature's result types), else the arrays stay as stored. With `max_bytes`, a file
    that would inflate past it is refused unread.
    """
    kind, arrays = read_arrays(path, max_bytes=max_bytes)
    if kind != "npz":
        raise InputError("expected an .npz file with keys out0, out1, ...", path=path)
    keys = [k for k in arrays if not k.startswith("__")]
    count = len(keys)
    if sorted(keys) != sorted(f"out{i}" for i in range(count)):
        raise InputError(f"keys must be out0..out{count - 1}, found {', '.join(sorted(keys))}",
                         path=path)
    names = _stored_dtypes(path, arrays)
    out = []
    for i in range(count):
        arr = arrays[f"out{i}"]
        name = names.get(f"out{i}") or (dtypes_hint[i] if dtypes_hint and i < len(dtypes_hint)
                                        else None)
        if name is not None:
            want = dtypes.to_numpy(dtypes.from_name(name))
            if arr.dtype != want and _is_bit_pattern_of(arr.dtype, want):
                arr = arr.view(want)
        out.append(arr)
    return out


def _stored_dtypes(path: str, arrays: Mapping[str, np.ndarray]) -> dict[str, str]:
    if DTYPES_KEY not in arrays:
        return {}
    try:
        names = json.loads(str(arrays[DTYPES_KEY]))
        if isinstance(names, dict) and all(dtypes.is_type_name(v) for v in names.values()):
            return names
    except ValueError:
        pass
    raise InputError(f"bad {DTYPES_KEY} entry", path=path)


def compare_outputs(actual: Sequence[np.ndarray], expected_path: str, *,
                    rtol: float | None = None, atol: float | None = None,
                    dtypes: Sequence[str] | None = None, computed_in: str | None = None) -> Report:
    """Compare results with an expected .npz (keys out0..); InputError if the count differs.
    `computed_in`: see compare_arrays."""
    hint = list(dtypes) if dtypes is not None else [_dtype_name(a) for a in actual]
    budget = sum(np.asarray(a).nbytes for a in actual) + _HEADER_SLACK * (len(actual) + 2)
    expected = read_outputs(expected_path, hint, max_bytes=budget)
    if len(expected) != len(actual):
        raise InputError(f"has {len(expected)} output(s), the bundle produces {len(actual)}",
                         path=expected_path)
    return compare_arrays(actual, expected, rtol=rtol, atol=atol, computed_in=computed_in)


def _dtype_name(arr: np.ndarray) -> str | None:
    try:
        return dtypes.name(dtypes.from_numpy(np.asarray(arr).dtype))
    except ValueError:
        return None
