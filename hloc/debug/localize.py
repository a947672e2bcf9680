"""`hlo-run --localize`: the first thunk whose outputs differ from the reference on its own inputs.

Before each checkable thunk runs (see thunk_io.py) its inputs are copied out of the arena;
after it ran (and after `--perturb`, which sits inside this probe) each output leaf is compared
with the reference interpreter's result on those same inputs, under hlo-run's --rtol/--atol
rule (hloc/runtime/tolerance.py, per-dtype defaults there). An error is therefore charged to
the thunk that made it: its successors see its wrong outputs as their inputs and agree with
the reference on them. Thunks inside loops are checked at every iteration; the report names
the iteration and the control-flow path. The run stops at the first divergence.

Independently the first thunk that produced a NaN or Inf from finite inputs is recorded
(`first_nonfinite`): even when the reference agrees (the model itself overflows), that is
where a NaN was born.
"""

from __future__ import annotations

from dataclasses import field

import numpy as np

from ..errors import UnsupportedError
from ..ir import dtypes
from ..runtime.interpreter.shadow import KEEP, ShadowUnavailable, shadow_copy
from ..runtime.tolerance import compare_arrays, judge_rounding
from ..thunks.base import Thunk, ThunkKind
from ..util.record import dataclass
from .probe import Frame, Instrumented, Stop
from .thunk_io import ThunkIO, thunk_io


def ulp_error(actual: np.ndarray, expected: np.ndarray) -> int:
    """Max distance in units in the last place between finite elements (0 for non-floats)."""
    if actual.dtype.kind == "c":
        real = np.dtype(f"f{actual.dtype.itemsize // 2}")
        return ulp_error(actual.view(real), expected.view(real))
    if _kind(actual.dtype) != "float" or actual.dtype != expected.dtype or actual.size == 0:
        return 0
    bits = np.dtype(f"i{actual.dtype.itemsize}")
    a, e = _ordered(actual, bits), _ordered(expected, bits)
    finite = np.isfinite(actual.astype(np.float64)) & np.isfinite(expected.astype(np.float64))
    return int(np.abs(a - e)[finite].max()) if finite.any() else 0


def _ordered(x: np.ndarray, bits: np.dtype) -> np.ndarray:
    """Float bit patterns as integers ordered like the floats (-0 and +0 meet at 0)."""
    i = np.ascontiguousarray(x).view(bits).astype(np.int64)
    sign = np.int64(1) << (8 * bits.itemsize - 1)
    magnitude = i & ~sign if bits.itemsize < 8 else i & np.int64(0x7FFFFFFFFFFFFFFF)
    return np.where(i < 0, -magnitude, magnitude)


def first_nonfinite(arrays: list[np.ndarray]) -> tuple[int, list[int], str] | None:
    """(output, element index, 'nan'/'inf') of the first NaN or Inf in `arrays`."""
    for k, arr in enumerate(arrays):
        if _kind(arr.dtype) not in ("float", "complex"):
            continue
        wide = arr.astype(np.complex128 if arr.dtype.kind == "c" else np.float64)
        bad = ~np.isfinite(wide)
        if bad.any():
            at = np.unravel_index(int(np.flatnonzero(bad)[0]), arr.shape)
            return k, [int(i) for i in at], "nan" if np.isnan(wide[at]) else "inf"
    return None


def _kind(dt: np.dtype) -> str:
    try:
        return dtypes.info(dtypes.from_numpy(dt)).kind
    except ValueError:
        return "other"


@dataclass
class Localizer:
    """The probe: checks every checkable thunk; raises Stop at the first divergence."""

    target: Instrumented
    rtol: float | None = None
    atol: float | None = None
    stop: bool = True  # raise Stop at the divergence; False: note the first one, run on
    skip_collectives: bool = False  # multi-device: collectives are not value-checked
    checked: int = 0
    collectives: int = 0  # collective executions left unchecked (skip_collectives)
    divergent: dict | None = None
    nonfinite: dict | None = None
    _io: dict[str, ThunkIO | None] = field(default_factory=dict)
    _shadow: dict | None = None  # the f64 shadow's instructions by name, built at first need

    def __post_init__(self) -> None:
        mod = self.target.module
        self._instructions = {i.name: i for c in mod.computations for i in c.instructions}

    def io(self, frame: Frame) -> ThunkIO | None:
        thunk = frame.thunk
        if frame.parent is not None and frame.parent.thunk.name == thunk.name:
            return None  # a launch of a multi-launch GPU thunk: checked as a whole
        if thunk.name not in self._io:
            neutral = self.target.neutral.get(thunk.name)
            self._io[thunk.name] = None if neutral is None else thunk_io(neutral, self._instructions)
        return self._io[thunk.name]

    def around(self, frame: Frame, run) -> None:
        if self.skip_collectives and frame.thunk.kind == ThunkKind.COLLECTIVE:
            self.collectives += 1
            run()
            return
        io = None if self.divergent is not None else self.io(frame)
        if io is None:
            run()
            return
        inputs = io.read_inputs(self.target.raw)
        run()
        actual = [np.array(v) for v in io.views(self.target.raw)]
        expected = io.reference(inputs)
        self.checked += 1
        self._note_nonfinite(frame, io, inputs, actual)
        record = self._compare(frame, io, actual, expected, inputs)
        if record is not None:
            self.divergent = record
            if self.stop:
                raise Stop

    def _compare(self, frame: Frame, io: ThunkIO, actual, expected, inputs) -> dict | None:
        report = compare_arrays(actual, expected, rtol=self.rtol, atol=self.atol)
        if not report.ok and self.rtol is None and self.atol is None:
            exact = self._exact(io, inputs)
            if exact is not None:  # rounding or error? (as hlo-run --reference decides)
                report = judge_rounding(actual, expected, exact, report)[0]
        if report.ok:
            return None
        bad = [c for c in report.checks if not c.ok]
        where = first_nonfinite(actual)
        return {**describe(frame, self.target, self._instructions),
                "max_abs_err": max(c.max_abs for c in report.checks),
                "max_rel_err": max(c.max_rel for c in report.checks),
                "max_ulp_err": max(ulp_error(a, e) for a, e in zip(actual, expected, strict=True)),
                "mismatches": sum(c.mismatches for c in report.checks),
                "outputs": [{"output": c.index, "type": c.type_text, "mismatches": c.mismatches,
                             "first_mismatch": list(c.first_mismatch or ()),
                             "values": c.first_values, "rtol": c.rtol, "atol": c.atol}
                            for c in bad],
                "first_nonfinite": None if where is None else
                {"output": where[0], "index": where[1], "value": where[2]},
                "report": report.format()}

    def _exact(self, io: ThunkIO, inputs) -> list[np.ndarray] | None:
        """The thunk's outputs from the module's f64 shadow (runtime/interpreter/shadow.py)
        on these inputs, or None where it has none (copies, kept bit-level steps)."""
        if self._shadow is None:
            self._shadow = _shadow_instructions(self.target.module)
        instr = self._shadow.get(io.instruction.name) if io.instruction is not None else None
        if instr is None or instr.opcode in KEEP:
            return None
        wide = [_widen(v, op.shape) for v, op in zip(inputs, instr.operands, strict=True)]
        try:
            return io.evaluate(instr, wide)
        except UnsupportedError:  # an operation the interpreter has only at narrower types
            return None

    def _note_nonfinite(self, frame: Frame, io: ThunkIO, inputs, actual) -> None:
        if self.nonfinite is not None:
            return
        where = first_nonfinite(actual)
        if where is None or first_nonfinite(_arrays(inputs)) is not None:
            return
        self.nonfinite = {**describe(frame, self.target, self._instructions), "output": where[0],
                          "element": where[1], "value": where[2]}


def _shadow_instructions(module) -> dict:
    """{name: instruction} of `module`'s f64 shadow ({} if it has none)."""
    try:
        shadow = shadow_copy(module)
    except ShadowUnavailable:
        return {}
    return {i.name: i for c in shadow.computations for i in c.instructions}


def _widen(value, shape):
    """An input value in the types of the shadow's operand `shape`."""
    if shape.is_tuple:
        return tuple(_widen(v, s) for v, s in zip(value, shape.tuple_shapes, strict=True))
    if not shape.is_array:
        return value
    return np.asarray(value).astype(shape.np_dtype)


def _arrays(values) -> list[np.ndarray]:
    out = []
    for v in values:
        if isinstance(v, tuple):
            out.extend(_arrays(list(v)))
        elif v is not None:
            out.append(np.asarray(v))
    return out


def describe(frame: Frame, target: Instrumented, instructions: dict) -> dict:
    """The identifying part of a per-thunk record: name, kind, position, HLO."""
    from .thunk_list import hlo_ops, hlo_text

    thunk: Thunk = frame.thunk
    return {"thunk": thunk.name, "kind": str(thunk.kind), "index": target.index_of.get(thunk.name),
            "execution": frame.order, "iteration": frame.iteration, "path": frame.path(),
            "hlo": hlo_ops(instructions.get(thunk.name)),
            "hlo_text": hlo_text(instructions.get(thunk.name))}


def format_result(loc: Localizer) -> str:
    """The text --localize prints."""
    head = f"localize: checked {loc.checked} thunk execution(s) against the reference"
    return format_record(head, loc.divergent, loc.nonfinite)


def format_record(head: str, d: dict | None, n: dict | None) -> str:
    """The --localize text from its first line, the first divergence and the first NaN/Inf
    (records of a multi-device run carry `rank` and `device`, named after the thunk)."""
    lines = [head]
    if d is None:
        lines.append("localize: no thunk diverges")
    else:
        where = f" in {d['path']}" if d["path"] else ""
        lines += [f"localize: first divergent thunk: {d['thunk']}{_on(d)} (kind {d['kind']}, execution "
                  f"#{d['execution']}, schedule index {d['index']}{where}, iteration {d['iteration']})",
                  f"  max abs err {d['max_abs_err']:.3e}, max rel err {d['max_rel_err']:.3e}, "
                  f"max ulp err {d['max_ulp_err']}, {d['mismatches']} mismatching element(s)",
                  "  " + d["report"].replace("\n", "\n  "), "  HLO:",
                  "    " + d["hlo_text"].replace("\n", "\n    ")]
    if n is not None:
        lines.append(f"localize: first NaN/Inf: {n['value']} in output {n['output']} at "
                     f"{n['element']} of thunk {n['thunk']}{_on(n)} (execution #{n['execution']})")
    return "\n".join(lines)


def _on(record: dict) -> str:
    if "rank" not in record:
        return ""
    replica, partition = record["device"]
    return f" on rank {record['rank']} (replica {replica}, partition {partition})"


def report(loc: Localizer) -> dict:
    """The --report entry: {"first_divergent": ... | null, "first_nonfinite", "checked"}."""
    d = None if loc.divergent is None else {k: v for k, v in loc.divergent.items() if k != "report"}
    return {"first_divergent": d, "first_nonfinite": loc.nonfinite, "checked": loc.checked,
            "rtol": loc.rtol, "atol": loc.atol}
