"""Device-resident parameters: weights that stay on the GPU between runs.

A serving process uploads its weights once and then sends only the activations. A loaded
CUDA executable (`--device cuda` or `cuda-emulated`) does the same for the parameters marked
resident (`exe.set_resident(numbers)`, `hlo-run --resident SPEC`). The rule is explicit, not
guessed from the data:

- a resident parameter is uploaded on the first run after `set_resident`, and again only
  when a run receives a different array object for it than the one last uploaded
  (identity, `is`: the executable keeps a reference to that array, so its id cannot be
  reused by another array);
- an array changed in place is not noticed (comparing contents would cost as much as the
  upload it tries to save, and a hash could miss a change): call `exe.update(number, array)`,
  which uploads it at once and binds it;
- a parameter whose device buffer the program may write (input_output_alias: donated to an
  output) cannot stay resident; `set_resident` leaves it out and returns the parameters that
  are resident.

Non-resident parameters are uploaded on every run, as before.
"""

from __future__ import annotations

import re

from ...errors import InputError

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_ALL_BUT = re.compile(r"^all-but-last:(\d+)$")


def parse_spec(spec: str, count: int) -> frozenset[int]:
    """Parameter numbers named by SPEC for a module of `count` parameters.

    SPEC is `all`, `none`, `all-but-last:N`, or a comma-separated list of numbers and inclusive
    ranges (`0-160`, `0,3,5`, `0-3,7`). InputError naming the problem otherwise."""
    text = spec.strip().lower()
    if text == "all":
        return frozenset(range(count))
    if text in ("none", ""):
        return frozenset()
    if m := _ALL_BUT.match(text):
        keep = int(m.group(1))
        if keep > count:
            raise InputError(f"--resident {spec}: the module has only {count} parameter(s)")
        return frozenset(range(count - keep))
    numbers: set[int] = set()
    for part in text.split(","):
        m = _RANGE.match(part.strip())
        if not m:
            raise InputError(f"--resident {spec!r}: expected all, all-but-last:N or numbers "
                             "and ranges such as 0-160,165")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        if last < first:
            raise InputError(f"--resident {spec}: range {part.strip()} runs backwards")
        if last >= count:
            raise InputError(f"--resident {spec}: parameter {last} does not exist (the module "
                             f"has {count}: 0-{count - 1})" if count else
                             f"--resident {spec}: the module has no parameters")
        numbers.update(range(first, last + 1))
    return frozenset(numbers)


def eligible_parameters(program) -> frozenset[int]:
    """Parameters whose every uploaded leaf sits in a read-only parameter allocation (the
    buffer assignment never lets the program write one unless it is donated to an output)."""
    allocations = {a.index: a for a in program.allocations}
    ok: dict[int, bool] = {}
    for u in program.host_to_device:
        if u.constant:
            continue
        a = allocations.get(u.slice.allocation)
        fits = a is not None and a.kind == "parameter" and not a.aliased_with_output
        ok[u.number] = ok.get(u.number, True) and fits
    return frozenset(n for n, fits in ok.items() if fits)


class Residency:
    """Which parameters stay on the device, and the array each was last uploaded from."""

    def __init__(self, program, count: int):
        self.count = count
        self.eligible = eligible_parameters(program)
        self.resident: frozenset[int] = frozenset()
        self.bound: dict[int, object] = {}

    def set(self, numbers) -> frozenset[int]:
        """Mark `numbers` resident (the ineligible ones are left out); forgets every binding,
        so the next run uploads them."""
        numbers = frozenset(int(n) for n in numbers)
        bad = sorted(n for n in numbers if not 0 <= n < self.count)
        if bad:
            raise InputError(f"resident parameter {bad[0]} does not exist (the module has "
                             f"{self.count})")
        self.resident = numbers & self.eligible
        self.bound = {}
        return self.resident

    def needs_upload(self, number: int, value) -> bool:
        """Whether parameter `number` must be uploaded for a run that passes `value`."""
        return (number not in self.resident or number not in self.bound
                or self.bound[number] is not value)

    def bind(self, args) -> None:
        """Record the arrays a run uploaded (or found on the device) for resident params."""
        for n in self.resident:
            self.bound[n] = args[n]
