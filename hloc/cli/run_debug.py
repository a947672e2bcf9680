"""hlo-run's per-thunk options: --localize, --perturb THUNK[=REL], --trace FILE.json.

They share one instrumented run (hloc/debug/probe.py); probes nest localize (outermost, so it
sees the perturbed outputs) → perturb → trace (innermost, timing the thunk alone).
"""

from __future__ import annotations

import click


def instrumented_run(exe, args, *, localize: bool, perturb: str | None, trace: str | None,
                     rtol, atol, result: dict) -> tuple[list, list[str]]:
    """Run once with the requested probes; (outputs, failures). With --localize the run stops
    at the first divergent thunk and its outputs are those of a plain run."""
    from ..debug.chrome_trace import Tracer, write_trace
    from ..debug.localize import Localizer, format_result, report
    from ..debug.multi import instrumented_multi, session_of
    from ..debug.perturb import Perturber, parse_spec
    from ..debug.probe import instrument

    session = session_of(exe)
    if session is not None:  # every device (or this rank's) instrumented: hloc/debug/multi.py
        return instrumented_multi(session, args, localize=localize, perturb=perturb, trace=trace,
                                  rtol=rtol, atol=atol, result=result)
    target = instrument(exe)
    probes: list = []
    loc = Localizer(target, rtol, atol) if localize else None
    if loc is not None:
        probes.append(loc)
    if perturb:
        name, rel = parse_spec(perturb)
        probes.append(Perturber(target, name, rel))
        result["perturb"] = {"thunk": name, "rel": rel}
    tracer = Tracer(target) if trace else None
    if tracer is not None:
        probes.append(tracer)
    outputs = target.run(args, probes)
    if tracer is not None:
        write_trace(trace, tracer)
        click.echo(f"trace: {len(tracer.events)} thunk slice(s) written to {trace}", err=True)
    if loc is None:
        return outputs, []
    click.echo(format_result(loc))
    result["localize"] = report(loc)
    if not outputs:
        # Stopped at the divergence: the outputs of a plain run (a perturbed loop state may
        # never let the loop end, so the perturbation is not replayed).
        outputs = exe.run(args)
    diverged = loc.divergent
    return outputs, [] if diverged is None else [f"thunk {diverged['thunk']} diverges from the reference"]
