"""`hloc diff A B`: what changed from A (the baseline) to B, stage by stage.

Compared: flat metrics (instructions, computations, fusions, op:NAME per opcode, temp_bytes,
argument_bytes, output_bytes, constant_bytes, thunks and thunks:KIND where the side has them),
fusion decisions (each fusion as its kind and fused opcodes), instruction counts after every
dumped pass (dump directories), and a unified diff of the HLO text with canonical names:
computations and instructions renamed in dataflow order (p0.. for parameters, OPCODE.N for the
rest), metadata dropped, so that names alone never differ.

Gates (`--fail-on METRIC>LIMIT`): B's value minus A's must not exceed LIMIT (`instructions>0`),
or, with a percent sign, must not exceed LIMIT percent of A's value (`temp_bytes>5%`).
"""

from __future__ import annotations

import difflib
import re
from collections import Counter

from ..errors import InputError
from ..ir import Module, Opcode, OpMetadata
from ..ir.computation import dfs_post_order
from ..util.record import dataclass
from .diff_load import Side

BASE_METRICS = ("instructions", "computations", "fusions", "temp_bytes", "argument_bytes",
                "output_bytes", "constant_bytes", "thunks")


def canonical_text(module: Module) -> str:
    """The module's HLO text with deterministic names and no metadata (on a copy).

    Names are numbered per computation and opcode in dataflow order (`add.0`, `add.1`, ...;
    parameters `p0`, `p1`, ...), so an instruction added to one computation renames only the
    later instructions of its opcode there: diffs stay local. (The text is for reading: the
    same name may appear in two computations.)
    """
    from ..ir.text.printer import print_module

    copy = module.clone("m")
    copy.schedule = None
    for n, comp in enumerate(copy.computation_post_order()):
        comp.name = "main" if comp is copy.entry else f"comp.{n}"
        # Dataflow order from the root (operands in order), not the file's order.
        comp.instructions = dfs_post_order([comp.root, *comp.instructions],
                                           lambda i: i.operands + i.control_predecessors)
        seen: Counter = Counter()
        for instr in comp.instructions:
            instr.metadata = OpMetadata()
            if instr.opcode == Opcode.PARAMETER:
                instr.name = f"p{instr.attrs.parameter_number}"
                continue
            instr.name = f"{instr.opcode.value}.{seen[instr.opcode]}"
            seen[instr.opcode] += 1
    copy.computations = copy.computation_post_order()
    return print_module(copy, print_metadata=False)


@dataclass(frozen=True)
class Gate:
    """`METRIC>LIMIT` or `METRIC>LIMIT%`."""

    metric: str
    limit: float
    percent: bool

    @staticmethod
    def parse(text: str) -> Gate:
        m = re.fullmatch(r"\s*([\w:.\-]+)\s*>\s*(-?\d+(?:\.\d*)?)\s*(%?)\s*", text)
        if m is None:
            raise InputError(f"bad --fail-on '{text}': want METRIC>LIMIT or METRIC>LIMIT%")
        metric = m.group(1)
        if metric not in BASE_METRICS and not metric.startswith(("op:", "thunks:")):
            raise InputError(f"bad --fail-on '{text}': unknown metric '{metric}' (choose from "
                             f"{', '.join(BASE_METRICS)}, op:OPCODE, thunks:KIND)")
        return Gate(metric, float(m.group(2)), bool(m.group(3)))

    def check(self, a: dict, b: dict, sides: tuple[Side, Side]) -> dict:
        """{"gate", "a", "b", "change", "failed"}; InputError when a side lacks the metric."""
        values = [_value(a, self.metric), _value(b, self.metric)]
        for value, side in zip(values, sides, strict=True):
            if value is None:
                raise InputError(f"--fail-on {self.metric}: {side.path} ({side.kind}) has no "
                                 f"{self.metric.split(':')[0]} figures")
        delta = values[1] - values[0]
        change = (100.0 * delta / values[0] if values[0] else (0.0 if delta == 0 else float("inf"))
                  ) if self.percent else delta
        text = f"{self.metric}>{self.limit:g}{'%' if self.percent else ''}"
        return {"gate": text, "a": values[0], "b": values[1], "change": change,
                "failed": change > self.limit}


def compare(a: Side, b: Side, gates: list[Gate], *, hlo_diff: bool = True) -> dict:
    """The whole comparison as one JSON-ready object."""
    ma, mb = a.metrics(), b.metrics()
    metrics = {}
    for name in sorted(set(ma) | set(mb), key=_metric_order):
        va, vb = _value(ma, name), _value(mb, name)
        metrics[name] = {"a": va, "b": vb,
                         "delta": None if va is None or vb is None else vb - va}
    fa, fb = Counter(a.fusions()), Counter(b.fusions())
    result = {"a": {"path": a.path, "kind": a.kind}, "b": {"path": b.path, "kind": b.kind},
              "metrics": metrics,
              "fusions": {"only_a": sorted((fa - fb).elements()), "only_b": sorted((fb - fa).elements())},
              "stages": _stages(a, b),
              "gates": [g.check(ma, mb, (a, b)) for g in gates]}
    if hlo_diff:
        ta, tb = canonical_text(a.module), canonical_text(b.module)
        result["hlo_diff"] = "".join(difflib.unified_diff(
            ta.splitlines(keepends=True), tb.splitlines(keepends=True), f"A: {a.path}", f"B: {b.path}"))
    return result


def _value(metrics: dict, name: str):
    """A metric's value; 0 for an opcode or thunk kind a side has none of, None if unknown."""
    if name in metrics:
        return metrics[name]
    return 0 if name.startswith("op:") or (name.startswith("thunks:") and "thunks" in metrics) else None


def _metric_order(name: str) -> tuple[int, str]:
    base = name.split(":")[0]
    return (BASE_METRICS.index(base) if base in BASE_METRICS else len(BASE_METRICS), name)


def _stages(a: Side, b: Side) -> list[dict]:
    """Dumped passes whose instruction counts differ (or that only one side dumped)."""
    if not (a.stages or b.stages):
        return []
    labels = list(a.stages) + [k for k in b.stages if k not in a.stages]
    return [{"stage": k, "a": a.stages.get(k), "b": b.stages.get(k)} for k in labels
            if a.stages.get(k) != b.stages.get(k)]


def format_report(r: dict) -> str:
    """The human-readable form of `compare`'s result."""
    lines = [f"A: {r['a']['path']} ({r['a']['kind']})", f"B: {r['b']['path']} ({r['b']['kind']})",
             f"{'metric':<28} {'A':>12} {'B':>12} {'change':>16}"]
    for name, m in r["metrics"].items():
        if name.startswith(("op:", "thunks:")) and m["delta"] == 0:
            continue  # unchanged per-opcode rows only add noise
        lines.append(f"{name:<28} {_num(m['a']):>12} {_num(m['b']):>12} {_change(m):>16}")
    for side, key in (("A", "only_a"), ("B", "only_b")):
        for f in r["fusions"][key]:
            lines.append(f"fusion only in {side}: {f}")
    for s in r["stages"]:
        lines.append(f"stage {s['stage']}: {_num(s['a'])} -> {_num(s['b'])} instructions")
    for g in r["gates"]:
        lines.append(f"gate {g['gate']}: {'FAILED' if g['failed'] else 'ok'} "
                     f"({_num(g['a'])} -> {_num(g['b'])})")
    if r.get("hlo_diff"):
        lines.append(r["hlo_diff"].rstrip("\n"))
    elif "hlo_diff" in r:
        lines.append("HLO: identical up to names")
    return "\n".join(lines)


def _num(v) -> str:
    return "-" if v is None else str(v)


def _change(m: dict) -> str:
    if m["delta"] is None:
        return "-"
    if not m["a"]:
        return f"{m['delta']:+d}"
    return f"{m['delta']:+d} ({100.0 * m['delta'] / m['a']:+.1f}%)"
