"""`hloc reduce`: delta-debug a module to a small one a script still finds interesting.

The convention is C-Reduce's: `CMD FILE` exiting 0 means FILE is still interesting (still shows
the bug). Every candidate is a module that parses and passes hloc's verifier; it is kept when
it is interesting and strictly smaller: fewer instructions, then fewer array elements over all
instructions' shapes, then shorter text (so the search always ends). The steps (see
reduce_steps.py) run in rounds until a round changes nothing or the budget (tests, seconds) is
spent. After each edit dead code, computations nothing calls and unused entry parameters go.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import field
from functools import partial

from ..errors import HlocError
from ..ir import Module, Opcode
from ..util.log import get_logger
from ..util.record import dataclass
from .reduce_steps import STEPS, Step, dim_sizes, shrink_dim

log = get_logger("hloc.reduce")


@dataclass
class Budget:
    """Stop after `max_tests` script runs or `seconds` of wall time."""

    max_tests: int = 5000
    seconds: float = 600.0
    tests: int = 0
    start: float = field(default_factory=time.monotonic)

    def spent(self) -> bool:
        return self.tests >= self.max_tests or time.monotonic() - self.start > self.seconds


@dataclass
class Reducer:
    """Holds the best module so far (and its text); `interesting(text) -> bool` is the predicate."""

    text: str
    interesting: Callable[[str], bool]
    budget: Budget = field(default_factory=Budget)
    on_improvement: Callable[[str], None] | None = None
    key: tuple = ()
    module: Module | None = None

    def __post_init__(self) -> None:
        self.module = parse_checked(self.text)
        self.key = size_key(self.module, self.text)

    def run(self) -> str:
        """Rounds of every step until nothing changes or the budget is spent; the best text."""
        progress = True
        while progress and not self.budget.spent():
            progress = False
            for step in STEPS:
                progress |= self._run_step(step)
            progress |= self._shrink()
        return self.text

    def _run_step(self, step: Step) -> bool:
        """ddmin-style: chunks of half the targets, then quarters, ... then single targets."""
        targets = step.targets(self.module)
        size = max(1, len(targets) // 2) if step.batch else 1
        changed = False
        while size >= 1 and not self.budget.spent():
            i = 0
            while i < len(targets) and not self.budget.spent():
                if self._try(partial(step.apply, chunk=targets[i:i + size])):
                    changed = True
                    targets = step.targets(self.module)
                else:
                    i += size
            size //= 2
        return changed

    def _shrink(self) -> bool:
        changed = False
        for size in dim_sizes(self.text):
            for new in sorted({1, size // 2}):
                if self.budget.spent():
                    return changed
                try:
                    module = parse_checked(shrink_dim(self.text, size, new))
                except HlocError:
                    continue  # this size also means something else (a slice, a constant)
                if self._offer(module):
                    changed = True
                    break
        return changed

    def _try(self, edit: Callable[[Module], bool]) -> bool:
        """Apply `edit` to a copy of the best module; keep the result if _offer accepts it."""
        from ..ir.verifier import verify

        module = self.module.clone()
        try:
            if not edit(module):
                return False
            cleanup(module)
            verify(module)
        except (HlocError, ValueError, KeyError, IndexError, AssertionError):
            return False  # an edit this module does not allow
        return self._offer(module)

    def _offer(self, module: Module) -> bool:
        """Keep a verified module if it is smaller and interesting."""
        from ..ir.text.printer import print_module

        text = print_module(module)
        key = size_key(module, text)
        if key >= self.key:
            return False
        self.budget.tests += 1
        if not self.interesting(text):
            return False
        self.module, self.text, self.key = module, text, key
        log.info("reduce: %d instructions after %d tests", key[0], self.budget.tests)
        if self.on_improvement is not None:
            self.on_improvement(text)
        return True


def parse_checked(text: str) -> Module:
    """Parse and verify (HlocError when either fails)."""
    from ..ir.text.parser import parse_module
    from ..ir.verifier import verify

    module = parse_module(text, "<candidate>")
    verify(module)
    return module


def size_key(module: Module, text: str) -> tuple[int, int, int]:
    """(instructions, array elements over all instruction shapes, text length)."""
    elements = sum(math.prod(i.shape.dims) for c in module.computations for i in c.instructions
                   if i.shape.is_array)
    return module.instruction_count(), elements, len(text)


def cleanup(module: Module) -> None:
    """Drop dead code, computations nothing calls and unused entry parameters; forget the
    schedule, aliasing and entry layout, which the edits may have made stale."""
    from ..passes.dce import DeadCodeElimination

    module.schedule = None
    module.input_output_alias = ()
    module.buffer_donors = ()
    module.config.entry_layout = None
    DeadCodeElimination().run(module)
    entry = module.entry
    for p in entry.parameters:
        if not p.users and p is not entry.root:
            entry.remove(p)
    for number, p in enumerate(entry.parameters):
        if p.attrs.parameter_number != number:
            p.with_attrs(parameter_number=number)
    if not entry.parameters and entry.root.opcode == Opcode.PARAMETER:
        raise ValueError("the entry would be empty")
