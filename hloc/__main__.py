"""`python -m hloc`: the `hloc` command."""

from hloc.cli.entry import main

main()
