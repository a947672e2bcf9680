"""The `hloc` command's entry point: `hloc compile` goes to a running compile server when
there is one for this hloc (hloc.server), before click or the compiler is imported; anything
else, and a compile without a server, runs hloc.cli.main in this process."""

from __future__ import annotations

import gc
import os
import sys


def main() -> None:
    if sys.argv[1:2] == ["compile"]:
        # A compile runs with the cyclic collector off (cli.main.without_gc); turning it off
        # here already spares the imports' 20-odd collections (15-20 ms of a cold compile).
        gc.disable()
        from ..server.client import ModeError, run_compile

        try:
            code = run_compile(sys.argv[1:])
        except ModeError as e:
            print(f"hloc compile: error: {e}", file=sys.stderr)
            sys.exit(2)
        except KeyboardInterrupt:  # Ctrl-C before a server answered: as the command says it
            print("hloc: interrupted", file=sys.stderr)
            sys.exit(130)
        if code is not None:  # served: nothing of this process's needs tearing down
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):  # a closed pipe: the compile's output went anyway
                    pass
            os._exit(code)
    from .main import main as run_here

    run_here()


if __name__ == "__main__":
    main()
