"""hloc: an XLA-style ahead-of-time compiler driver for HLO modules."""

__version__ = "0.1.0"
