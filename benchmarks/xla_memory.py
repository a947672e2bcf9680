"""XLA CPU's buffer-assignment sizes for the benchmark cases (dev only: run in the jax venv).

`python benchmarks/xla_memory.py` compiles each benchmarks/cases/NAME.pb with XLA:CPU exactly
as xla_worker.py does and writes benchmarks/cases/xla_memory.json: per case the
`compiled.memory_analysis()` sizes (temp, argument, output, alias bytes) and the jax version.
The samples carry the same numbers in their own NAME.json (samples/generate.py);
tests/test_memory_vs_xla.py holds hloc's temp bytes to both.
"""

from __future__ import annotations

import json
from pathlib import Path

CASES_DIR = Path(__file__).resolve().parent / "cases"
TABLE = CASES_DIR / "xla_memory.json"


def measure(pb_path: Path) -> dict[str, int]:
    """XLA's memory analysis of one unoptimized HloModuleProto."""
    from jax._src import xla_bridge
    from jax._src.lib import _jax, xla_client

    backend = xla_bridge.get_backend("cpu")
    module = _jax.mlir.hlo_to_stablehlo(pb_path.read_bytes())
    exe = backend.compile_and_load(module, backend.devices()[:1], xla_client.CompileOptions())
    stats = exe.get_compiled_memory_stats()
    return {"temp_bytes": int(stats.temp_size_in_bytes),
            "argument_bytes": int(stats.argument_size_in_bytes),
            "output_bytes": int(stats.output_size_in_bytes),
            "alias_bytes": int(stats.alias_size_in_bytes)}


def main() -> None:
    import jax

    jax.config.update("jax_enable_x64", True)  # as xla_worker.py: parameters as given
    cases = {p.name[: -len(".pb")]: measure(p) for p in sorted(CASES_DIR.glob("*.pb"))}
    table = {"jax_version": jax.__version__, "cases": cases}
    TABLE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    for name, mem in cases.items():
        print(f"{name:>20} temp {mem['temp_bytes']:>10}")


if __name__ == "__main__":
    main()
