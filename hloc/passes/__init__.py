"""HLO → HLO passes: the framework, the registry and one module per pass.

The pass modules are listed in base.PASS_MODULES and imported by the registry on first lookup.

Reading the compiler starts at pipelines.py, the default pass lists per target and -O level.
"""

from __future__ import annotations

from .base import Pass, all_passes, lookup_pass, register_pass
from .pipeline import PassRunner
from .spec import Fixpoint, parse_spec, spec_string

__all__ = ["Fixpoint", "Pass", "PassRunner", "all_passes", "lookup_pass", "parse_spec",
           "register_pass", "spec_string"]
