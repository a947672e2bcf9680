"""`hloc inspect`: what is inside a bundle, for humans (default) and scripts (--json)."""

from __future__ import annotations

import json
import math
import re

import click

from ..errors import InputError
from .common import guarded

_SAFE_MEMBER = re.compile(r"^[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*$")


def _array_bytes(entry: dict) -> int:
    from ..ir import dtypes

    return math.prod(entry["shape"]) * dtypes.info(dtypes.from_name(entry["dtype"])).byte_size


def inspect_summary(bundle) -> dict:
    """The JSON object `hloc inspect --json` prints."""
    m = bundle.manifest
    entry = m["entry"]
    memory = dict(m.get("memory") or {})
    memory.setdefault("argument_bytes", sum(_array_bytes(p) for p in entry["parameters"]))
    memory.setdefault("output_bytes", sum(_array_bytes(r) for r in entry["results"]))
    memory.setdefault("temp_bytes", None)
    memory.setdefault("constant_bytes", None)
    thunks = m.get("thunks", {}).get("counts", {}) if isinstance(m.get("thunks"), dict) else {}
    extra: dict[str, object] = _gpu_libraries(bundle) if "gpu_thunks.json" in bundle.members else {}
    from ..bundle.signing import bundle_signature

    signature = bundle_signature(bundle)
    extra["signature"] = signature.signer if signature is not None else None
    if m.get("devices"):
        extra["devices"] = m["devices"]
    from ..debug.thunk_list import thunk_list  # loads the module and program: only for --json

    extra["thunk_list"] = thunk_list(bundle)
    return {**extra,
        "format_version": m["format_version"],
        "hloc_version": m.get("hloc_version"),
        "target": m["target"],
        "entry": entry,
        "compiler": m.get("compiler", {}),
        "input": m.get("input", {}),
        "memory": memory,
        "thunks": thunks,
        "members": {name: info["size"] for name, info in sorted(m.get("members", {}).items())},
        "notes": m.get("notes", []),
        "cache_key": m.get("compiler", {}).get("cache_key"),
    }


def _gpu_libraries(bundle) -> dict:
    """A CUDA bundle's Gemm thunks and which of them cuBLAS may run (HLOC_CUDA_GEMM), its
    convolution thunks and which of them cuDNN may run (HLOC_CUDA_CONV)."""
    from ..thunks.gpu import ConvLaunch, GemmLaunch
    from ..thunks.serialize import gpu_program_from_json

    program, _ = gpu_program_from_json(bytes(bundle.members["gpu_thunks.json"]))
    gemms = [t for t in program.walk() if isinstance(t, GemmLaunch)]
    convs = [t for t in program.walk() if isinstance(t, ConvLaunch)]
    from ..runtime.cuda.graphs import describe, segments

    # The plan of a driver with conditional nodes (CUDA 12.8 and later), and how many
    # thunks an older driver (or HLOC_CUDA_CONDITIONAL_NODES=0) drives from the host.
    plan = segments(program.main, conditional=True)
    graphed = [s for s in plan if s.graph]
    older = segments(program.main)
    return {"gpu_graphs": {"graphs": len(graphed),
                           "host_driven": len(plan) - len(graphed),
                           "host_driven_without_conditional_nodes":
                               sum(not s.graph for s in older),
                           "segments": describe(program.main, conditional=True)},
            "gpu_gemm": {"gemm_thunks": len(gemms),
                         "cublas_eligible": [t.name for t in gemms if t.blas is not None]},
            "gpu_conv": {"conv_thunks": len(convs),
                         "cudnn_eligible": [t.name for t in convs if t.dnn is not None]}}


def _gpu_gemm_line(g: dict) -> str:
    names = g["cublas_eligible"]
    shown = "".join(f" %{n}" for n in names[:8]) + (" ..." if len(names) > 8 else "")
    return (f"GPU gemm-kernel thunks: {g['gemm_thunks']}, cuBLAS-eligible "
            f"(HLOC_CUDA_GEMM=cublas): {len(names)}{shown}")


def _gpu_graphs_line(g: dict) -> str:
    return (f"CUDA graphs (HLOC_CUDA_GRAPHS): {g['graphs']} of the main program's stretches, "
            f"{g['host_driven']} host-driven thunk(s) between them (without conditional "
            f"nodes: {g['host_driven_without_conditional_nodes']})")


def _gpu_conv_line(g: dict) -> str:
    names = g["cudnn_eligible"]
    shown = "".join(f" %{n}" for n in names[:8]) + (" ..." if len(names) > 8 else "")
    return (f"GPU convolution thunks: {g['conv_thunks']}, cuDNN-eligible "
            f"(HLOC_CUDA_CONV): {len(names)}{shown}")


def _devices_lines(d: dict) -> list[str]:
    """A multi-device bundle's devices: count, grid, device assignment, shardings."""
    rows = "; ".join(f"replica {r}: {ids}" for r, ids in enumerate(d["device_assignment"]))
    lines = [f"devices: {d['count']} ({d['replica_count']} replica(s) x "
             f"{d['num_partitions']} partition(s)), device assignment {rows}"]
    lines += [f"  param {i} sharding: {t or 'none (replicated)'}"
              for i, t in enumerate(d["parameters"])]
    lines += [f"  out{i} sharding: {t or 'none (replicated)'}" for i, t in enumerate(d["outputs"])]
    return lines


def _sig(entry: dict) -> str:
    return f"{entry['dtype']}[{','.join(str(d) for d in entry['shape'])}]"


def _brief(value) -> str:
    """Long lists (e.g. CPU features) as a count plus a few items; --json has them all."""
    if isinstance(value, list) and len(value) > 6:
        return f"{len(value)} items ({', '.join(map(str, value[:4]))}, ...)"
    return str(value)


def format_summary(s: dict) -> str:
    t = s["target"]
    lines = [f"bundle format {s['format_version']}, built by hloc {s['hloc_version']}",
             f"signature: {s.get('signature') or 'none (unsigned)'}",
             f"target: {t.get('kind')}" + "".join(f", {k}={_brief(v)}" for k, v in sorted(t.items()) if k != "kind"),
             f"module: {s['input'].get('module_name')} (from {s['input'].get('form')}, "
             f"sha256 {str(s['input'].get('sha256'))[:16]}…)",
             f"entry {s['entry']['name']}:"]
    for p in s["entry"]["parameters"]:
        lines.append(f"  param {p['index']}: {p['name']:<20} {_sig(p)}")
    for r in s["entry"]["results"]:
        lines.append(f"  out{r['index']}: {_sig(r)}")
    if s.get("devices"):
        lines += _devices_lines(s["devices"])
    comp = s["compiler"]
    lines.append(f"compiler flags: {' '.join(comp.get('flags', []))}")
    lines.append(f"passes run ({len(comp.get('passes', []))}): {', '.join(comp.get('passes', []))}")
    lines.append(f"cache key: {s.get('cache_key') or 'none (built before format 1.1)'}")
    mem = s["memory"]
    lines.append("memory: " + ", ".join(f"{k}={v if v is not None else 'n/a'}" for k, v in sorted(mem.items())))
    if s["thunks"]:
        lines.append("thunks: " + ", ".join(f"{k}={v}" for k, v in sorted(s["thunks"].items())))
    if s.get("gpu_gemm", {}).get("gemm_thunks"):
        lines.append(_gpu_gemm_line(s["gpu_gemm"]))
    if s.get("gpu_conv", {}).get("conv_thunks"):
        lines.append(_gpu_conv_line(s["gpu_conv"]))
    if "gpu_graphs" in s:
        lines.append(_gpu_graphs_line(s["gpu_graphs"]))
    lines.append("members:")
    for name, size in s["members"].items():
        lines.append(f"  {name:<32} {size:>10} bytes")
    for note in s["notes"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def stage_reports(bundle) -> str:
    """The buffer assignment summary and the thunk schedule (GPU program when present)."""
    members = bundle.members
    out = []
    if "buffer_assignment.txt" in members:
        text = bytes(members["buffer_assignment.txt"]).decode()
        out.append("\n" + text.split("\n\n", 1)[0].rstrip() + "\n")
    for name in ("gpu_thunks.txt", "thunks.txt"):
        if name in members:
            out.append("\n" + bytes(members[name]).decode().rstrip() + "\n")
            break
    return "".join(out)


def extract(bundle, directory: str) -> list[str]:
    """Write every member to DIRECTORY (names are checked: no absolute or '..' paths)."""
    from ..util.safe_write import extract_members

    names = sorted(bundle.manifest.get("members", {}))
    for name in names:
        if not _SAFE_MEMBER.match(name) or ".." in name.split("/"):
            raise InputError(f"refusing to extract unsafe member name '{name}'", bundle.path)
    return extract_members(directory, names, bundle.members.__getitem__, bundle.path)


@click.command()
@click.argument("bundle_path", metavar="BUNDLE", type=click.Path(dir_okay=True))
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@click.option("--extract", "extract_dir", default=None, help="write the bundle's artifacts here")
@click.option("--debug", is_flag=True, help="tracebacks on internal errors")
@guarded("hloc")
def inspect(bundle_path, as_json, extract_dir, debug):
    """Show a bundle's manifest, signature, passes, memory, thunks and code sizes."""
    from ..bundle import read_bundle

    bundle = read_bundle(bundle_path)
    summary = inspect_summary(bundle)
    if extract_dir:
        for path in extract(bundle, extract_dir):
            click.echo(f"wrote {path}", err=True)
    if as_json:
        click.echo(json.dumps(summary, indent=1, sort_keys=True))
    else:
        click.echo(format_summary(summary))
        click.echo(stage_reports(bundle), nl=False)
