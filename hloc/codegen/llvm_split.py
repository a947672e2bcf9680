"""Compiling one LLVM module on several cores: split its IR text into partitions, each
optimized and emitted to an object of its own.

LLVM's optimizer and code generator run on one thread, and on modules made of many small
kernels they are most of a compile. Kernels do not depend on each other, so the module's text
is cut into a fixed number of partitions, each optimized and emitted in its own LLVM context
on its own thread (hloc.codegen.llvm.compile_in_context runs outside llvmlite's lock). The
partitions' objects are not linked: the CPU bundle carries one object per partition and the
loader resolves the symbols one object calls and another defines (a driver calling kernels;
codegen/cpu/compile.py, runtime JitLibrary). Linking the optimized partitions back into one
module cost a print, a parse and a link each, and left code generation serial: on 2 cores
that was the largest single cost of compiling attention_grad.

- Every externally visible function (a kernel, a driver) is a *root*; roots are dealt to
  the partitions largest first, each to the smallest partition so far.
- Internal functions and internal globals go with every root that references them
  (duplicates are internal: each object keeps its own local copy, or inlines it).
- A partition declares the external functions it calls but does not define (drivers call
  kernels). Declarations (of functions, and of globals defined outside the module: the
  runtime's stop flag that loops poll), attribute groups and metadata are copied into every
  partition.
- Roots come in two tiers: kernels the emitter marked `optsize` (too little work for vector
  code to pay: codegen/cpu/compile.py) and the rest. Each tier has partitions of its own, and
  a partition of small kernels is optimized *scalar* (the same -O level without the loop and
  SLP vectorizers): on modules of many small kernels the vectorizers and the instcombine work
  on their vector code were over half of LLVM's time, for kernels of a few microseconds.
  Small kernels the caller names `light` (plain maps over their outputs, with no loop of their
  own) form a third tier, optimized with a few passes in place of the -O pipeline
  (hloc.codegen.llvm.SMALL_KERNEL_PASSES).
- The partition count is fixed, not the number of cores, so the objects are the same on
  every machine and for any thread count. A module the splitter does not understand (a
  global it defines and exports) or one too small to gain is compiled whole (scalar only if all
  its roots are small).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from ..util.record import dataclass

T = TypeVar("T")

PARTITIONS = 4  # per tier: the small kernels' tier gets half as many (it is cheaper)
# Below this much IR text, the split, the extra parses and objects cost more than they save.
MIN_SPLIT_BYTES = 20_000

_NAME = re.compile(r'@"((?:[^"\\]|\\.)*)"|@([-\w.$]+)')
_HEADER = ("; ModuleID", "target ", "source_filename")


@dataclass(frozen=True)
class _Item:
    kind: str  # "define", "declare", "global" or "other" (metadata, attribute groups)
    name: str | None
    text: str
    internal: bool = False
    refs: frozenset[str] = frozenset()

    @property
    def small(self) -> bool:
        """A function the emitter marked `optsize` (attributes follow the parameter list)."""
        head = self.text.split("\n", 1)[0]
        return "optsize" in head[head.rfind(")"):].split()


@dataclass(frozen=True)
class Partition:
    """Part of a module's IR text; `scalar`: only small kernels, no vectorizers needed;
    `light`: only small loop-free kernels (split_module's `light`), no -O pipeline needed."""

    text: str
    scalar: bool = False
    light: bool = False


def _first_name(line: str) -> str | None:
    m = _NAME.search(line)
    return None if m is None else (m.group(1) if m.group(1) is not None else m.group(2))


def _refs(text: str, own: str | None) -> frozenset[str]:
    names = {quoted or plain for quoted, plain in _NAME.findall(text)}
    names.discard(own)
    return frozenset(names)


def _is_internal(prefix: str) -> bool:
    words = prefix.split()
    return "internal" in words or "private" in words


def parse_items(text: str) -> tuple[list[str], list[_Item]]:
    """(header lines, module items in text order)."""
    lines = text.splitlines()
    header: list[str] = []
    items: list[_Item] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("define"):
            j = i
            while lines[j] != "}":
                j += 1
            block = "\n".join(lines[i:j + 1])
            name = _first_name(line)
            items.append(_Item("define", name, block, _is_internal(line.split("@", 1)[0]),
                               _refs(block, name)))
            i = j + 1
            continue
        if line.startswith("declare"):
            items.append(_Item("declare", _first_name(line), line))
        elif line.startswith("@") and line.split("=", 1)[1].split()[:1] == ["external"]:
            # A global defined elsewhere (the runtime's stop flag): declared in every partition.
            items.append(_Item("declare", _first_name(line), line))
        elif line.startswith("@"):
            name = _first_name(line)
            items.append(_Item("global", name, line, _is_internal(line.split("=", 1)[1]),
                               _refs(line, name)))
        elif line.startswith(_HEADER):
            header.append(line)
        elif line.strip():
            items.append(_Item("other", None, line))
        i += 1
    return header, items


def _declaration(define: _Item) -> str:
    line = define.text.split("\n", 1)[0].rstrip()
    line = line[:-1].rstrip() if line.endswith("{") else line
    return "declare" + line[len("define"):]


def split_module(text: str, parts: int = PARTITIONS,
                 light: frozenset[str] = frozenset()) -> list[Partition]:
    """The IR text as partitions: up to `parts` of the big roots, `parts // 2` of the small
    ones and `parts // 2` of the small ones named in `light` ([whole text] when splitting is
    not worth it)."""
    header, items = parse_items(text)
    roots = [it for it in items if it.kind == "define" and not it.internal]
    small = [r for r in roots if r.small and r.name not in light]
    lights = [r for r in roots if r.small and r.name in light]
    whole = [Partition(text, bool(roots) and all(r.small for r in roots),
                       bool(roots) and len(lights) == len(roots))]
    if len(text) < MIN_SPLIT_BYTES or parts < 2 or len(roots) < 2:
        return whole
    if any(it.kind == "global" and not it.internal for it in items):
        return [Partition(text)]
    by_name = {it.name: it for it in items if it.kind in ("define", "global")}
    big = [r for r in roots if not r.small]
    tier = max(1, parts // 2)
    return ([Partition(_partition_text(header, items, m)) for m in _bins(big, by_name, parts)]
            + [Partition(_partition_text(header, items, m), scalar=True)
               for m in _bins(small, by_name, tier)]
            + [Partition(_partition_text(header, items, m), scalar=True, light=True)
               for m in _bins(lights, by_name, tier)])


def _bins(roots: list[_Item], by_name: dict[str, _Item], parts: int) -> list[set[str]]:
    """Roots (with what they need) dealt to `parts` bins, largest first, each to the smallest
    bin so far; empty bins dropped."""
    closures = {r.name: _closure(r, by_name) for r in roots}
    cost = {r.name: sum(len(by_name[n].text) for n in closures[r.name]) for r in roots}
    bins: list[set[str]] = [set() for _ in range(parts)]
    sizes = [0] * parts
    for root in sorted(roots, key=lambda r: (-cost[r.name], r.name)):
        k = min(range(parts), key=lambda b: (sizes[b], b))
        bins[k] |= closures[root.name]
        sizes[k] += cost[root.name]
    return [b for b in bins if b]


def _closure(root: _Item, by_name: dict[str, _Item]) -> set[str]:
    """The root and every internal function/global it reaches."""
    members, stack = {root.name}, [root]
    while stack:
        for ref in stack.pop().refs:
            item = by_name.get(ref)
            if item is not None and item.internal and ref not in members:
                members.add(ref)
                stack.append(item)
    return members


def _partition_text(header: list[str], items: list[_Item], members: set[str]) -> str:
    out = list(header)
    for it in items:
        if it.kind in ("define", "global"):
            if it.name in members:
                out.append(it.text)
            elif it.kind == "define" and not it.internal:
                out.append(_declaration(it))
        else:
            out.append(it.text)
    return "\n".join(out) + "\n"


def map_partitions(text: str, fn: Callable[[Partition], T], threads: int,
                   light: frozenset[str] = frozenset()) -> list[T]:
    """`fn(partition)` for every partition of `text` (split_module, `light` as there), in
    partition order, on up to `threads` threads, this one included (fn must release the GIL
    for the long work to overlap). Partitions are taken in order; after one fails no other is
    started, and the error of the first (in partition order) that failed is raised. (Plain
    threads: concurrent.futures, with the logging it imports, cost a compile ~4 ms.)"""
    parts = split_module(text, light=light)
    if len(parts) == 1 or threads <= 1:
        return [fn(part) for part in parts]
    import threading

    results: list = [None] * len(parts)
    failed: list[tuple[int, BaseException]] = []
    order = iter(range(len(parts)))
    lock = threading.Lock()

    def work() -> None:
        while not failed:
            with lock:
                k = next(order, None)
            if k is None:
                return
            try:
                results[k] = fn(parts[k])
            except BaseException as e:  # noqa: BLE001 - raised again by the calling thread
                failed.append((k, e))

    helpers = [threading.Thread(target=work, name=f"hloc-llvm-{n}")
               for n in range(min(threads, len(parts)) - 1)]
    for helper in helpers:
        helper.start()
    try:
        work()
    finally:
        for helper in helpers:
            helper.join()
    if failed:
        raise min(failed, key=lambda f: f[0])[1]
    return results
