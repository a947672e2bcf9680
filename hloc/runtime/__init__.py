"""Runtimes: load a bundle and execute it on a device (cpu, cuda, cuda-emulated, interpreter)."""

from .executable import load

__all__ = ["load"]
