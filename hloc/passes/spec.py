"""Pass spec strings: `inline,simplify,dce,fixpoint(simplify,dce){max-iterations=8},fusion{max-ops=32}`.

Grammar:
    spec    := item (',' item)*
    item    := NAME options? | 'fixpoint' '(' spec ')' options?
    options := '{' NAME '=' VALUE (',' NAME '=' VALUE)* '}'
Option names use dashes for the dataclass field's underscores; values are converted to the
field's type (int, float, bool, str) and checked at parse time: integers between 0 and
MAX_INT_OPTION (a field may narrow that with `metadata={"min": ..., "max": ...}`), floats
finite, then by the pass's `validate` (a value below an option's minimum is an error, never
silently clamped). Fixpoints nest at most MAX_NESTING deep, so a hostile spec is refused,
not a RecursionError.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

from ..errors import InputError
from ..util.record import dataclass
from .base import Pass, lookup_pass


@dataclass(frozen=True)
class Fixpoint:
    """A group of passes repeated until none changes the module (or max_iterations)."""

    passes: tuple[PassItem, ...]
    max_iterations: int = 16

    name = "fixpoint"

    def spec(self) -> str:
        inner = ",".join(p.spec() for p in self.passes)
        opts = "" if self.max_iterations == 16 else f"{{max-iterations={self.max_iterations}}}"
        return f"fixpoint({inner}){opts}"


PassItem = Pass | Fixpoint

MAX_NESTING = 16
MAX_INT_OPTION = 2**31 - 1
MAX_ITERATIONS = 1 << 16

_TOKEN = re.compile(r"\s*([A-Za-z_][\w\-.]*|[{}(),=]|[^\s{}(),=]+)")


class _Parser:
    def __init__(self, text: str, source: str):
        self.text = text
        self.source = source
        self.tokens = [m.group(1) for m in _TOKEN.finditer(text) if m.group(1).strip()]
        self.pos = 0
        self.depth = 0

    def error(self, msg: str) -> InputError:
        text = self.text if len(self.text) <= 80 else self.text[:60] + "..."
        return InputError(f"bad pass spec '{text}': {msg}", self.source)

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            want = f"'{expected}'" if expected else "more input"
            raise self.error(f"expected {want}, found {tok!r}" if tok else f"expected {want} at the end")
        self.pos += 1
        return tok

    def parse_list(self, closing: str | None) -> list[PassItem]:
        items = [self.parse_item()]
        while self.peek() == ",":
            self.take(",")
            items.append(self.parse_item())
        if self.peek() != closing:
            if self.peek() is None:
                raise self.error(f"expected '{closing}' at the end")
            raise self.error(f"unexpected {self.peek()!r}")
        return items

    def parse_options(self) -> dict[str, str]:
        opts: dict[str, str] = {}
        if self.peek() != "{":
            return opts
        self.take("{")
        while True:
            key = self.take()
            self.take("=")
            opts[key] = self.take()
            if self.peek() != ",":
                break
            self.take(",")
        self.take("}")
        return opts

    def parse_item(self) -> PassItem:
        name = self.take()
        if name == "fixpoint":
            return self.parse_fixpoint()
        cls = lookup_pass(name)
        if cls is None:
            raise self.error(f"unknown pass '{name}' (see `hloc passes`)")
        return make_pass(cls, self.parse_options(), self.error)


    def parse_fixpoint(self) -> Fixpoint:
        """`fixpoint(spec){max-iterations=N}`, nested at most MAX_NESTING deep."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.error(f"fixpoints nest more than {MAX_NESTING} deep")
        self.take("(")
        inner = self.parse_list(")")
        self.take(")")
        self.depth -= 1
        opts = self.parse_options()
        extra = set(opts) - {"max-iterations"}
        if extra:
            raise self.error(f"fixpoint has no option '{sorted(extra)[0]}'")
        return Fixpoint(tuple(inner), check_iterations(opts.get("max-iterations", 16), self.error))


def check_iterations(value: object, error) -> int:
    """A fixpoint's max-iterations: an integer from 1 to MAX_ITERATIONS."""
    n = value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d{1,20}", value.strip()):
        n = int(value)
    if n is None or not 1 <= n <= MAX_ITERATIONS:
        raise error(f"max-iterations must be a positive integer up to {MAX_ITERATIONS}, got {value!r}")
    return n


def make_pass(cls: type[Pass], raw: Mapping[str, Any], error) -> Pass:
    """Instantiate a pass from option strings (or JSON values), converting to the field types."""
    fields = {f.name.replace("_", "-"): f for f in cls.options()}
    kwargs = {}
    for key, value in raw.items():
        f = fields.get(key) or fields.get(key.replace("_", "-"))
        if f is None:
            known = ", ".join(sorted(fields)) or "none"
            raise error(f"pass '{cls.name}' has no option '{key}' (options: {known})")
        kwargs[f.name] = check_bounds(cls.name, key, convert_option(cls.name, key, value, f, error),
                                      f, error)
    instance = cls(**kwargs)
    try:
        instance.validate()
    except ValueError as e:
        raise error(str(e)) from None
    return instance


def check_bounds(pass_name: str, key: str, value: object, f: dataclasses.Field, error):
    """Refuse absurd option values: integers outside [min, max] (default 0 to MAX_INT_OPTION)
    and floats that are not finite."""
    if isinstance(value, float) and not math.isfinite(value):
        raise error(f"option '{key}' of pass '{pass_name}' must be finite, got {value}")
    if isinstance(value, int) and not isinstance(value, bool):
        lo = f.metadata.get("minimum", f.metadata.get("min", 0))  # passes.base.option(minimum=)
        hi = f.metadata.get("max", MAX_INT_OPTION)
        if not lo <= value <= hi:
            raise error(f"option '{key}' of pass '{pass_name}' must be from {lo} to {hi}, got {value}")
    return value


def convert_option(pass_name: str, key: str, value: Any, f: dataclasses.Field, error) -> Any:
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    try:
        if kind == "bool":
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "1", "yes"):
                return True
            if str(value).lower() in ("false", "0", "no"):
                return False
            raise ValueError
        if kind == "int":
            if isinstance(value, bool):
                raise ValueError
            return int(value)
        if kind == "float":
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        article = "an" if kind[:1] in "aeiou" else "a"
        raise error(f"option '{key}' of pass '{pass_name}' wants {article} {kind}, got {value!r}") from None


def parse_spec(text: str, source: str = "--passes") -> list[PassItem]:
    """Parse a spec string into pass instances; InputError naming the problem."""
    if not text.strip():
        return []
    parser = _Parser(text, source)
    items = parser.parse_list(None)
    return items


def spec_string(items) -> str:
    return ",".join(item.spec() for item in items)
