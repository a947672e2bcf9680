"""Benchmark statistics for `hlo-run --benchmark N` and the `--baseline` verdict.

`summarize(times)` is the report's "benchmark" object: n, median_s, min_s, mean_s, max_s, p10_s,
p90_s, cv (standard deviation / mean) and the raw `times_s`, so later runs can test against it.

`compare(current, baseline, max_regression_pct)` decides whether the median changed by more than
the noise. With per-run times on both sides (3 or more each) it uses the Mann-Whitney U test
(two-sided, normal approximation with tie correction, p < 0.05): no assumption of normal run
times, robust to the odd slow outlier. Against an older baseline without times it falls back to
a noise band: the change must exceed twice the larger coefficient of variation. Changes under
1% never count. The verdict is
"regression" when the median is slower by more than `max_regression_pct` percent and the change
is significant; "slower (within limit)", "faster" or "no significant change" otherwise.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from ..errors import InputError

ALPHA = 0.05
MIN_SAMPLES = 3
# Changes under 1% of the median are never reported: with many samples a test finds them
# "significant", but no one acts on them and machines drift that much between runs.
MIN_EFFECT_PCT = 1.0


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear interpolation between order statistics."""
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def summarize(times: Sequence[float]) -> dict:
    """The benchmark object of a report (see the module docstring)."""
    mean = statistics.fmean(times)
    sd = statistics.stdev(times) if len(times) > 1 else 0.0
    return {"n": len(times), "median_s": statistics.median(times), "min_s": min(times),
            "mean_s": mean, "max_s": max(times), "p10_s": percentile(times, 10),
            "p90_s": percentile(times, 90), "cv": sd / mean if mean > 0 else 0.0,
            "times_s": list(times)}


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the Mann-Whitney U test (normal approximation, ties corrected)."""
    n1, n2 = len(a), len(b)
    ranked = sorted([(v, 0) for v in a] + [(v, 1) for v in b])
    ranks = [0.0] * len(ranked)
    tie_term, i = 0.0, 0
    while i < len(ranked):
        j = i
        while j + 1 < len(ranked) and ranked[j + 1][0] == ranked[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2.0 + 1.0  # tied values share their mean rank
        tie_term += (j - i + 1) ** 3 - (j - i + 1)
        i = j + 1
    r1 = sum(r for r, (_, side) in zip(ranks, ranked, strict=True) if side == 0)
    u = r1 - n1 * (n1 + 1) / 2.0
    n = n1 + n2
    variance = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1)))
    if variance <= 0:
        return 1.0  # every value equal: no evidence of a difference
    z = (abs(u - n1 * n2 / 2.0) - 0.5) / math.sqrt(variance)  # with continuity correction
    return min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2.0)))


def baseline_benchmark(report: object, path: str) -> dict:
    """The "benchmark" object of an earlier --report; InputError when it has none."""
    bench = report.get("benchmark") if isinstance(report, dict) else None
    if not isinstance(bench, dict) or not isinstance(bench.get("median_s"), int | float):
        raise InputError("no benchmark in this report (write one with --benchmark N --report FILE)", path)
    if bench["median_s"] <= 0:
        raise InputError("the baseline's median_s must be positive", path)
    return bench


def compare(current: dict, baseline: dict, max_regression_pct: float) -> dict:
    """The verdict object (see the module docstring)."""
    change = 100.0 * (current["median_s"] / baseline["median_s"] - 1.0)
    noise = 100.0 * max(current.get("cv") or 0.0, baseline.get("cv") or 0.0)
    a, b = baseline.get("times_s") or [], current.get("times_s") or []
    if len(a) >= MIN_SAMPLES and len(b) >= MIN_SAMPLES:
        p_value = mann_whitney_p(a, b)
        test, significant = "mann-whitney-u", p_value < ALPHA
    else:
        p_value, test, significant = None, "noise band (2 x cv)", abs(change) > 2 * noise
    significant = significant and abs(change) >= MIN_EFFECT_PCT
    if significant and change > max_regression_pct:
        verdict = "regression"
    elif significant and change > 0:
        verdict = "slower (within limit)"
    elif significant and change < 0:
        verdict = "faster"
    else:
        verdict = "no significant change"
    return {"verdict": verdict, "median_s": current["median_s"], "baseline_median_s": baseline["median_s"],
            "change_pct": change, "noise_pct": noise, "test": test, "p_value": p_value,
            "significant": significant, "max_regression_pct": max_regression_pct}


def format_verdict(v: dict) -> str:
    """One line for people."""
    p = f", p={v['p_value']:.3g}" if v["p_value"] is not None else ""
    return (f"baseline: median {v['baseline_median_s'] * 1e3:.3f} ms -> {v['median_s'] * 1e3:.3f} ms "
            f"({v['change_pct']:+.1f}%, noise {v['noise_pct']:.1f}%, {v['test']}{p}): {v['verdict']}"
            f" (limit {v['max_regression_pct']:g}%)")
