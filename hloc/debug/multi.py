"""`--localize`, `--perturb` and `--trace` on multi-device bundles: in-process and MPI ranks.

A `Session` is what one process sees of a multi-device run: its instrumented devices (every
device of an in-process `SpmdBundleExecutable`, each on its own thread; this rank's device
under MPI, `RankExecutable`), how to run them with probes, and `gather`, which brings every
rank's picklable summary to rank 0 (in-process: all of them are here already). A device's
`Instrumented.rank` is its position in `DeviceGrid.devices()`: its MPI rank and its trace pid.

Every device gets its own probes. `--perturb THUNK[=REL]` perturbs the thunk on every device,
`THUNK[=REL]@RANK` on that rank's device only.
The localizer does not stop at a divergence (a device that stopped would leave its peers
waiting in the next collective): each device notes its first divergent thunk and runs on, and
the first over all devices, by (execution number, rank), is reported with its rank and
device. Collective thunks are not value-checked: the reference of a collective needs every
participant's inputs, which one device does not have; they are counted as
`collectives_unchecked`, and a wrong collective result shows in the final outputs
(`--expected`, `--reference`), not here. device-id thunks are checked (the reference reads
the device bound to the thread). The outputs are those of the instrumented run (perturbed
under `--perturb`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import click

from ..errors import HlocError, InputError
from ..util.record import dataclass
from .probe import Instrumented, instrument


@dataclass
class Session:
    """This process's share of a multi-device run with probes."""

    targets: list[Instrumented]
    devices: dict[int, tuple[int, int]]  # rank -> (replica, partition), this process's ranks
    run: Callable[[list, dict[int, list]], list]  # (args, probes by rank) -> GLOBAL outputs
    gather: Callable[[list], list | None] = lambda items: items  # all ranks' items on rank 0
    sync: Callable[[], None] = lambda: None  # a barrier before the run (ranks)
    shared: Callable[[HlocError], HlocError] = lambda e: e  # an error every rank raises
    is_root: bool = True
    count: int = 1  # devices in the whole run


def session_of(exe) -> Session | None:
    """The Session of a multi-device executable; None for a one-device one."""
    if hasattr(exe, "executables") and hasattr(exe, "grid"):
        return _in_process(exe)
    if hasattr(exe, "world") and hasattr(exe, "local"):
        return _ranks(exe)
    return None


def _in_process(exe) -> Session:
    """Every device of an SpmdBundleExecutable, each run on its own thread."""
    from ..runtime.spmd import assemble_outputs, run_device_threads, shard_inputs

    devices = exe.grid.devices()
    targets = {}
    for rank, d in enumerate(devices):
        targets[d] = instrument(exe.executables[d])
        targets[d].rank = rank

    def run(args, probes):
        def run_one(ctx, a):
            target = targets[ctx.device]
            return target.run(a, probes[target.rank])
        results = run_device_threads(exe.grid, run_one, shard_inputs(exe.module, args),
                                     exe.timeout)
        return assemble_outputs(exe.module, results, output_sharding_texts=exe.output_sharding_texts,
                                output_shapes=exe.output_shapes)
    return Session(list(targets.values()), {i: d for i, d in enumerate(devices)}, run,
                   count=len(devices))


def _ranks(exe) -> Session:
    """This rank's device of a RankExecutable; summaries gathered to rank 0."""
    from ..collectives import bind
    from ..runtime.ranks import on_all_ranks

    try:
        target = instrument(getattr(exe.local, "executable", exe.local))
    except InputError as e:
        raise on_all_ranks(e) from None
    target.rank = exe.rank

    def run(args, probes):
        local = exe._distribute(args)
        bind(exe.ctx)
        try:
            outputs = target.run(local, probes[exe.rank])
        finally:
            bind(None)
        return exe._collect(outputs)

    def gather(items):
        got = exe.world.gather(items, root=0)
        return None if got is None else [x for part in got for x in part]
    return Session([target], {exe.rank: exe.ctx.device}, run, gather=gather,
                   sync=exe.world.Barrier, shared=on_all_ranks, is_root=exe.is_root,
                   count=exe.size)


def instrumented_multi(session: Session, args, *, localize: bool, perturb: str | None,
                       trace: str | None, rtol, atol, result: dict) -> tuple[list, list[str]]:
    """hlo-run's instrumented run of a multi-device bundle: (GLOBAL outputs on rank 0,
    failures); rank 0 prints and fills `result`."""
    from .chrome_trace import Tracer
    from .localize import Localizer
    from .perturb import Perturber, parse_spec

    probes: dict[int, list] = {t.rank: [] for t in session.targets}
    only = perturb_rank(perturb)[1] if perturb else None
    if only is not None and only >= session.count:
        raise session.shared(InputError(f"--perturb {perturb}: the run has ranks 0 to "
                                        f"{session.count - 1}"))
    locs, tracers = [], []
    for t in session.targets:
        if localize:
            locs.append(Localizer(t, rtol, atol, stop=False, skip_collectives=True))
            probes[t.rank].append(locs[-1])
        if perturb:
            spec, only = perturb_rank(perturb)
            name, rel = parse_spec(spec)
            try:
                perturber = Perturber(t, name, rel)
            except InputError as e:
                raise session.shared(e) from None
            if only is None or only == t.rank:
                probes[t.rank].append(perturber)
            result["perturb"] = {"thunk": name, "rel": rel, "rank": only}
        if trace:
            tracers.append(Tracer(t))
            probes[t.rank].append(tracers[-1])
    session.sync()
    start = time.perf_counter_ns()
    for tracer in tracers:  # ts 0: the run's start on every device of this process
        tracer.start = start
    outputs = session.run(args, probes)
    if trace:
        _write_trace(session, trace, tracers)
    return outputs, _localized(session, locs, result) if localize else []


def perturb_rank(spec: str) -> tuple[str, int | None]:
    """"THUNK[=REL][@RANK]" → ("THUNK[=REL]", RANK or None: every device)."""
    head, at, rank = spec.rpartition("@")
    if not at:
        return spec, None
    if not rank.isdigit():
        raise InputError(f"--perturb {spec}: '@{rank}' is not a rank number")
    return head, int(rank)


def _write_trace(session: Session, path: str, tracers: list) -> None:
    from .chrome_trace import write_parts

    parts = session.gather([t.part() for t in tracers])
    if parts is None:
        return
    write_parts(path, parts)
    slices = sum(len(p["events"]) for p in parts)
    click.echo(f"trace: {slices} thunk slice(s) of {len(parts)} device(s) written to {path}",
               err=True)


def _localized(session: Session, locs: list, result: dict) -> list[str]:
    """Gather every device's findings; on rank 0 print the first divergence over all of them."""
    from .localize import format_record, report

    mine = []
    for loc in locs:
        rank = loc.target.rank
        where = {"rank": rank, "device": list(session.devices[rank])}
        part = {**report(loc), **where, "collectives": loc.collectives,
                "divergent": None if loc.divergent is None else {**loc.divergent, **where}}
        if part["first_nonfinite"] is not None:
            part["first_nonfinite"] = {**part["first_nonfinite"], **where}
        mine.append(part)
    parts = session.gather(mine)
    if parts is None:
        return []
    first = _first([p["divergent"] for p in parts])
    nonfinite = _first([p["first_nonfinite"] for p in parts])
    checked = sum(p["checked"] for p in parts)
    unchecked = sum(p["collectives"] for p in parts)
    click.echo(format_record(
        f"localize: checked {checked} thunk execution(s) on {len(parts)} device(s) against the "
        f"reference ({unchecked} collective execution(s) not value-checked)", first, nonfinite))
    result["localize"] = {
        "first_divergent": None if first is None else
        {k: v for k, v in first.items() if k != "report"},
        "first_nonfinite": nonfinite, "checked": checked, "collectives_unchecked": unchecked,
        "devices": len(parts), "rtol": parts[0]["rtol"], "atol": parts[0]["atol"]}
    return [] if first is None else [
        f"thunk {first['thunk']} diverges from the reference on rank {first['rank']}"]


def _first(records: list[dict | None]) -> dict | None:
    """The earliest record by (execution number, rank); None when there is none."""
    found = [r for r in records if r is not None]
    return min(found, key=lambda r: (r["execution"], r["rank"])) if found else None
