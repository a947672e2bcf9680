"""gpu_check's report: the markdown table of results.json's rows, its geomean rows and the
exit code. Pure functions of plain dicts (tests/test_gpu_check.py feeds them made-up rows).

A row: {"case": label, "kind": "case" | "model", "hloc": SIDE, "xla": SIDE, "match": str,
"resident": spec (models), "note": str (a row not run)}; a SIDE is what gpu_check_case.py
writes: {"host_ms", "resident_ms", "runs", ...}, {"error": why} or {"resident_error": why}.
"""

from __future__ import annotations

import math

LIMIT = 1.3  # the goal: no row above 1.3x XLA
COLUMNS = ("case", "hloc host→host ms", "XLA host→host ms", "ratio", "hloc resident ms",
           "XLA resident ms", "ratio", "outputs match", "notes")
KEYS = ("host_ms", "resident_ms")


def ratio(row: dict, key: str) -> float | None:
    """hloc / XLA of one timing (`host_ms` or `resident_ms`), None where a side lacks it."""
    ours, theirs = row.get("hloc", {}).get(key), row.get("xla", {}).get(key)
    if ours is None or not theirs:
        return None
    return ours / theirs


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def ms(value: float | None) -> str:
    """Milliseconds with about four significant digits."""
    if value is None:
        return "-"
    return f"{value:.3f}" if value < 10 else f"{value:.2f}" if value < 100 else f"{value:.1f}"


def _ratio_cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def notes(row: dict) -> str:
    """Why cells are empty: errors of either side, a row not run; the weights kept resident."""
    parts = [row["note"]] if row.get("note") else []
    if row.get("resident"):
        parts.append(f"host→host with {row['resident']} resident")
    for side in ("hloc", "xla"):
        for key, what in (("error", ""), ("resident_error", "resident ")):
            if key in row.get(side, {}):
                parts.append(f"{side} {what}{row[side][key]}")
    return "; ".join(parts).replace("|", "/").replace("\n", " ")[:240]


def table_row(row: dict) -> str:
    ours, theirs = row.get("hloc", {}), row.get("xla", {})
    cells = [row["case"]]
    for key in KEYS:
        cells += [ms(ours.get(key)), ms(theirs.get(key)), _ratio_cell(ratio(row, key))]
    cells += [row.get("match", "-"), notes(row)]
    return "| " + " | ".join(cells) + " |"


def summary_cell(rows: list[dict], key: str) -> str:
    """`geomean (N > 1.3)` of one ratio column over `rows`, "-" where none has a ratio."""
    values = [r for r in (ratio(row, key) for row in rows) if r is not None]
    mean = geomean(values)
    if mean is None:
        return "-"
    return f"{mean:.2f} ({sum(v > LIMIT for v in values)} of {len(values)} > {LIMIT})"


def summary_rows(rows: list[dict]) -> list[str]:
    """The geomean rows: the cases, the models, and all of them when there are both."""
    groups = [("cases", [r for r in rows if r.get("kind", "case") == "case"]),
              ("models", [r for r in rows if r.get("kind") == "model"])]
    groups = [(name, members) for name, members in groups if members]
    if len(groups) > 1:
        groups.append(("all", rows))
    lines = []
    for name, members in groups:
        cells = [f"**geomean, {name}**", "", "", summary_cell(members, "host_ms"), "", "",
                 summary_cell(members, "resident_ms"), "", ""]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def format_table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += [table_row(r) for r in rows]
    return "\n".join(lines + summary_rows(rows))


CAPTION = (
    "ratio = hloc / XLA of the medians (< 1: hloc is faster); TF32 off on both sides. "
    "host→host: host arrays in, host arrays out, every run; on the models/ rows the weights "
    "(every parameter but the `x:` data inputs: the notes give the --resident spec) stay on "
    "the device on both sides, as in a serving process (hloc's set_resident, XLA arrays put "
    "once), and only the data inputs are uploaded. resident: every input uploaded once "
    "before timing, outputs left on the device, each run synchronized. Geomean rows: the "
    f"geomean of the ratio column and how many rows are above {LIMIT}x. outputs match: "
    "hloc against XLA GPU (cases: rtol 2e-3, atol 2e-4; models: their tests' tolerance).")


def report(device, summary: str, rows: list[dict], seconds: float) -> str:
    return (f"# gpu-check on {device[0]} ({device[1]})\n\n"
            f"pytest -m gpu: {summary}\n\n{format_table(rows)}\n\n{CAPTION}\n\n"
            f"{seconds:.0f} s in all\n")


def geomeans(rows: list[dict]) -> dict:
    """results.json's summary: geomean and count above the limit per group and column."""
    out = {}
    for kind in ("case", "model", None):
        members = [r for r in rows if kind is None or r.get("kind", "case") == kind]
        for key in KEYS:
            values = [v for v in (ratio(r, key) for r in members) if v is not None]
            out[f"{kind or 'all'}/{key}"] = {"geomean": geomean(values), "rows": len(values),
                                             "above_limit": sum(v > LIMIT for v in values)}
    return out


def failed(summary: str, rows: list[dict]) -> bool:
    """Exit 1: a test failed, outputs differ, or hloc could not run a row (rows left out
    for the budget do not count)."""
    if "failed" in summary or "error" in summary:
        return True
    for row in rows:
        if row.get("match", "-").startswith("no"):
            return True
        if "error" in row.get("hloc", {}) and "(budget)" not in row["hloc"]["error"]:
            return True
    return False
