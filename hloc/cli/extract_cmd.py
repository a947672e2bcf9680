"""`hloc extract BUNDLE --thunk NAME -o DIR`: one thunk as a standalone test (hloc/debug/extract.py)."""

from __future__ import annotations

import click

from .common import debug_enabled, guarded, setup_logging


@click.command(name="extract")
@click.argument("bundle_path", metavar="BUNDLE", type=click.Path(dir_okay=True))
@click.option("--thunk", "thunk", required=True, help="thunk name (`hloc inspect --json` thunk_list)")
@click.option("-o", "--output", "directory", required=True, help="directory to write")
@click.option("--inputs", "inputs", multiple=True, help=".npy/.npz bundle inputs (default: random, --seed)")
@click.option("--seed", default=0, show_default=True, help="seed for random inputs")
@click.option("--device", default=None, type=click.Choice(("cpu", "cuda-emulated")),
              help="default: cpu, or cuda-emulated for CUDA bundles")
@click.option("--debug", is_flag=True, help="tracebacks on internal errors")
@guarded("hloc")
def extract_cmd(bundle_path, thunk, directory, inputs, seed, device, debug):
    """Write DIR/module.hlo, inputs.npz and expected.npz reproducing one thunk of BUNDLE."""
    from ..debug.extract import capture, write_directory
    from ..debug.probe import instrument
    from ..runtime import load
    from ..runtime.io import Signature, load_inputs

    setup_logging(debug_enabled(debug))
    exe = load(bundle_path, device or _default_device(bundle_path))
    args = load_inputs(Signature.from_manifest(exe.bundle.manifest), list(inputs), random=True,
                       seed=seed)
    io, captured = capture(instrument(exe), thunk.lstrip("%"), args)
    for path in write_directory(directory, bundle_path, io, captured):
        click.echo(f"wrote {path}")


def _default_device(bundle_path: str) -> str | None:
    from ..bundle import read_bundle

    kind = read_bundle(bundle_path).manifest["target"]["kind"]
    return "cuda-emulated" if kind == "cuda" else None
