"""Command-line interfaces: `hloc` (main.py) and `hlo-run` (run.py)."""
