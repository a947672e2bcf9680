"""Running a list of passes: fixpoint groups, verification, timing and dumps."""

from __future__ import annotations

import time
from dataclasses import field

from ..dump import DumpManager
from ..errors import HlocError
from ..ir import Module
from ..util.log import get_logger
from ..util.record import dataclass
from .base import Pass
from .spec import Fixpoint, PassItem

log = get_logger("hloc.passes")


def schedule_still_valid(module: Module) -> bool:
    """Whether module.schedule lists each scheduled computation's instructions once, in order."""
    by_name = {c.name: c for c in module.computations}
    for comp_name, names in module.schedule.items():
        comp = by_name.get(comp_name)
        if comp is None or len(names) != len(comp.instructions):
            return False
        position = {n: i for i, n in enumerate(names)}
        for instr in comp.instructions:
            here = position.get(instr.name)
            if here is None:
                return False
            for dep in instr.operands + instr.control_predecessors:
                if position.get(dep.name, here) >= here:
                    return False
    return True


@dataclass
class PassTiming:
    name: str
    seconds: float = 0.0
    runs: int = 0
    changes: int = 0


@dataclass
class PassRunner:
    """Runs pass items in order over a module.

    verify: run the verifier after every pass (tests and --debug) and name the pass that broke it.
    disabled: pass names to skip wherever they appear (--disable-pass).
    """

    items: list[PassItem]
    verify: bool = False
    disabled: frozenset[str] = frozenset()
    dump: DumpManager | None = None
    timings: dict[str, PassTiming] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)

    def run(self, module: Module) -> bool:
        return self._run_items(self.items, module)

    def _run_items(self, items, module: Module) -> bool:
        changed = False
        for item in items:
            if isinstance(item, Fixpoint):
                changed |= self._run_fixpoint(item, module)
            else:
                changed |= self._run_pass(item, module)
        return changed

    def _run_fixpoint(self, group: Fixpoint, module: Module) -> bool:
        changed = False
        for _ in range(group.max_iterations):
            if not self._run_items(group.passes, module):
                break
            changed = True
        return changed

    def _run_pass(self, p: Pass, module: Module) -> bool:
        if p.name in self.disabled:
            return False
        start = time.perf_counter()
        changed = bool(p.run(module))
        seconds = time.perf_counter() - start
        timing = self.timings.setdefault(p.name, PassTiming(p.name))
        timing.seconds += seconds
        timing.runs += 1
        timing.changes += int(changed)
        self.ran.append(p.spec())
        if changed and module.schedule is not None and not schedule_still_valid(module):
            # Passes that don't maintain an input schedule (XLA's optimized modules carry one)
            # leave it stale; drop it and let the schedule stage compute a fresh one.
            log.debug("pass %s invalidated the module schedule; dropping it", p.name)
            module.schedule = None
        log.debug("pass %s: changed=%s in %.3f ms", p.name, changed, seconds * 1e3)
        if self.verify and changed:
            self._verify_after(p, module)
        if self.dump is not None and self.dump.wants_pass(p.name):
            self.dump.module(f"after_{p.name.replace('-', '_')}", module, pass_name=p.name,
                             changed=changed, seconds=seconds)
        return changed

    def _verify_after(self, p: Pass, module: Module) -> None:
        from ..ir.verifier import verify

        try:
            verify(module)
        except HlocError as e:
            raise type(e)(f"after pass '{p.name}': {e.message}", e.path) from None

    def timing_table(self) -> str:
        """The --time-passes table, slowest first."""
        total = sum(t.seconds for t in self.timings.values()) or 1e-12
        rows = sorted(self.timings.values(), key=lambda t: -t.seconds)
        lines = [f"{'pass':<32} {'runs':>5} {'changed':>7} {'ms':>10} {'%':>6}"]
        for t in rows:
            lines.append(f"{t.name:<32} {t.runs:>5} {t.changes:>7} {t.seconds * 1e3:>10.2f} "
                         f"{100 * t.seconds / total:>6.1f}")
        lines.append(f"{'total':<32} {'':>5} {'':>7} {total * 1e3:>10.2f} {100.0:>6.1f}")
        return "\n".join(lines)
