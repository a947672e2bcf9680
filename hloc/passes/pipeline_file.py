"""JSON pipeline files (`--pipeline FILE.json`), validated against schemas/pipeline.schema.json.

Format:
    {"version": 1,
     "passes": ["call-inliner",
                {"pass": "fusion", "options": {"max-ops": 32}},
                {"fixpoint": ["algebraic-simplifier", "dce"], "max-iterations": 8}]}
"""

from __future__ import annotations

import json

from ..errors import InputError
from .base import lookup_pass
from .spec import MAX_NESTING, Fixpoint, PassItem, check_iterations, make_pass


def load_pipeline_file(path: str) -> list[PassItem]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise InputError(f"cannot read pipeline file: {e.strerror}", path) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"not valid JSON: {e}", path) from None
    except RecursionError:
        raise InputError("not valid JSON: nested too deeply", path) from None
    return parse_pipeline_json(data, path)


def parse_pipeline_json(data, path: str) -> list[PassItem]:
    def error(msg: str) -> InputError:
        return InputError(f"bad pipeline: {msg}", path)

    if not isinstance(data, dict):
        raise error("the top level must be an object")
    extra = set(data) - {"version", "passes", "description"}
    if extra:
        raise error(f"unknown key '{sorted(extra)[0]}'")
    if data.get("version") != 1:
        raise error("'version' must be 1")
    if not isinstance(data.get("passes"), list):
        raise error("'passes' must be a list")
    return [_item(entry, f"passes[{i}]", error) for i, entry in enumerate(data["passes"])]


def _item(entry, where: str, error, depth: int = 0) -> PassItem:
    if isinstance(entry, str):
        entry = {"pass": entry}
    if not isinstance(entry, dict):
        raise error(f"{where} must be a pass name or an object")
    if "fixpoint" in entry:
        extra = set(entry) - {"fixpoint", "max-iterations"}
        if extra or not isinstance(entry["fixpoint"], list):
            raise error(f"{where}: a fixpoint wants a list of passes and optional max-iterations")
        if depth >= MAX_NESTING:
            raise error(f"{where}: fixpoints nest more than {MAX_NESTING} deep")
        inner = tuple(_item(e, f"{where}.fixpoint[{i}]", error, depth + 1)
                      for i, e in enumerate(entry["fixpoint"]))
        if isinstance(entry.get("max-iterations"), str):
            raise error(f"{where}: max-iterations must be an integer")
        return Fixpoint(inner, check_iterations(entry.get("max-iterations", 16),
                                                lambda m: error(f"{where}: {m}")))
    extra = set(entry) - {"pass", "options"}
    if extra or not isinstance(entry.get("pass"), str):
        raise error(f"{where} must look like {{\"pass\": NAME, \"options\": {{...}}}}")
    cls = lookup_pass(entry["pass"])
    if cls is None:
        raise error(f"{where}: unknown pass '{entry['pass']}' (see `hloc passes`)")
    options = entry.get("options", {})
    if not isinstance(options, dict):
        raise error(f"{where}: options must be an object")
    return make_pass(cls, options, lambda m: error(f"{where}: {m}"))
