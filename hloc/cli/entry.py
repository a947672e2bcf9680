"""The `hloc` command's entry point: `hloc compile` goes to a running compile server when
there is one for this hloc (hloc.server), before click or the compiler is imported; without
one, a compile whose command line cli/compile_cmd.py reads runs here without click; anything
else runs hloc.cli.main in this process."""

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
        _compile_here(sys.argv[2:])
    from .main import main as run_here

    run_here()


def _compile_here(args: list[str]) -> None:
    """A compile in this process for a command line read without click (cli/compile_cmd.py),
    which then ends the process; returns for any line left to click."""
    from .compile_cmd import compile_command, read_argv

    params = read_argv(args)
    if params is None:
        return
    from ..util.safe_write import install_sigterm_cleanup
    from .common import exit_without_teardown, guarded

    install_sigterm_cleanup()  # a killed compile leaves no temp file behind
    try:
        guarded("hloc")(compile_command)(**params)
    except SystemExit as e:
        exit_without_teardown(e.code)
    exit_without_teardown(None)


if __name__ == "__main__":
    main()
