#!/usr/bin/env python3
"""Generate hloc's Python protobuf modules from proto/*.proto.

    python tools/gen_proto.py           # write hloc/frontend/gen/*.py
    python tools/gen_proto.py --check   # exit 1 if the committed files are stale

Runs ``python -m grpc_tools.protoc -I proto --python_out=<dir>`` on
proto/xla_data.proto and proto/hlo.proto, then turns hlo_pb2.py's absolute
``import xla_data_pb2`` into a package-relative import so the modules work as
``hloc.frontend.gen``. Output depends only on the .proto files and the
grpcio-tools (protoc) version, so regeneration is deterministic.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
OUT_DIR = ROOT / "hloc" / "frontend" / "gen"
PROTOS = ("xla_data.proto", "hlo.proto")
INIT_TEXT = '"""Generated protobuf modules; regenerate with make proto."""\n'
GENERATED = ("__init__.py", "xla_data_pb2.py", "hlo_pb2.py")

# protoc writes sibling imports as top-level modules: `import xla_data_pb2 as x`.
_ABS_IMPORT = re.compile(r"^import (\w+_pb2) as (\w+)$", re.MULTILINE)


def _relativize(source: str, local: set[str]) -> str:
    def repl(m: re.Match[str]) -> str:
        if m.group(1) in local:
            return f"from . import {m.group(1)} as {m.group(2)}"
        return m.group(0)

    return _ABS_IMPORT.sub(repl, source)


def generate() -> dict[str, str]:
    """Run protoc into a scratch dir; return {file name: final text}."""
    with tempfile.TemporaryDirectory(prefix="hloc-proto-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO_DIR}",
            f"--python_out={tmp}",
            *PROTOS,
        ]
        proc = subprocess.run(cmd, cwd=PROTO_DIR, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout + proc.stderr)
            raise SystemExit(f"gen_proto: protoc failed (exit {proc.returncode})")
        local = {Path(p).stem + "_pb2" for p in PROTOS}
        files = {"__init__.py": INIT_TEXT}
        for proto in PROTOS:
            name = Path(proto).stem + "_pb2.py"
            text = (Path(tmp) / name).read_text(encoding="utf-8")
            files[name] = _relativize(text, local)
    return files


def write(files: dict[str, str], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (out_dir / name).write_text(text, encoding="utf-8", newline="\n")


def stale_files(files: dict[str, str], out_dir: Path) -> list[str]:
    stale = []
    for name, text in files.items():
        path = out_dir / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(name)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="regenerate into a temp dir and fail if the committed files differ",
    )
    parser.add_argument("--out", type=Path, default=OUT_DIR, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    files = generate()
    if args.check:
        stale = stale_files(files, args.out)
        if stale:
            rel = args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out
            print(
                f"gen_proto: {rel} is stale ({', '.join(stale)}); run `make proto`",
                file=sys.stderr,
            )
            return 1
        return 0
    write(files, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
