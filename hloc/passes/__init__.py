"""HLO → HLO passes: the framework, the registry and one module per pass.

Reading the compiler starts at pipelines.py, the default pass lists per target and -O level.
"""

from __future__ import annotations

import importlib
import pkgutil

from .base import Pass, all_passes, lookup_pass, register_pass
from .pipeline import PassRunner
from .spec import Fixpoint, parse_spec, spec_string

_FRAMEWORK = {"base", "spec", "pipeline", "pipelines", "pipeline_file", "rewrite"}


def _load_passes() -> None:
    for info in pkgutil.iter_modules(__path__):
        if info.name not in _FRAMEWORK and not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


_load_passes()

__all__ = ["Fixpoint", "Pass", "PassRunner", "all_passes", "lookup_pass", "parse_spec",
           "register_pass", "spec_string"]
