"""A pipeline flattened into the pass applications it makes, with the module after each one.

`hloc bisect` searches over prefixes of this flat list. A fixpoint group contributes one entry
per pass per iteration it actually ran (the list a compile's `--time-passes` would count), so
prefix k is exactly the module the compile had after its k-th pass application; because passes
are deterministic, replaying the first k applications as a plain spec string
(`Trace.prefix_spec(k)`) reproduces it without the fixpoint.
"""

from __future__ import annotations

from dataclasses import field

from ..errors import HlocError
from ..ir import Module
from ..passes.base import Pass
from ..passes.pipeline import PassRunner
from ..passes.spec import Fixpoint
from ..util.record import dataclass


@dataclass(frozen=True)
class Application:
    """One pass application: its position, the pass as a spec, and where it sat in the pipeline."""

    index: int  # 0-based position in the flat list
    spec: str
    changed: bool
    group: str | None = None  # e.g. "fixpoint 2, iteration 3"

    def label(self) -> str:
        where = f" ({self.group})" if self.group else ""
        return f"#{self.index} {self.spec}{where}"


@dataclass
class Trace:
    """The flat applications and the module after each (`states[k]`: after k applications).

    If a pass raised, `error` holds its message and the failing application is the last one in
    `applications` without a state of its own (`len(states) == len(applications)`).
    """

    applications: list[Application] = field(default_factory=list)
    states: list[Module] = field(default_factory=list)
    error: str | None = None

    @property
    def length(self) -> int:
        """The number of prefixes past the empty one (the index of the last state to test)."""
        return len(self.applications)

    def prefix_spec(self, k: int) -> str:
        """A spec string replaying the first k applications."""
        return ",".join(a.spec for a in self.applications[:k])

    def prefix_names(self, k: int) -> set[str]:
        return {a.spec.split("{", 1)[0] for a in self.applications[:k]}


@dataclass
class RecordingRunner(PassRunner):
    """A PassRunner that clones the module after every pass application (and verifies it)."""

    trace: Trace = field(default_factory=Trace)
    _groups: list[str] = field(default_factory=list)
    _fixpoints: int = 0

    def _run_fixpoint(self, group: Fixpoint, module: Module) -> bool:
        # Re-implemented (same loop as PassRunner's) to label each application's iteration.
        self._fixpoints += 1
        number, changed = self._fixpoints, False
        for iteration in range(1, group.max_iterations + 1):
            self._groups.append(f"fixpoint {number}, iteration {iteration}")
            try:
                again = self._run_items(group.passes, module)
            finally:
                self._groups.pop()
            if not again:
                break
            changed = True
        return changed

    def _run_pass(self, p: Pass, module: Module) -> bool:
        if p.name in self.disabled:
            return False
        group = "; ".join(self._groups) or None
        index = len(self.trace.applications)
        try:
            changed = super()._run_pass(p, module)
        except HlocError as e:
            self._failed(Application(index, p.spec(), True, group), str(e))
            raise
        except Exception as e:  # noqa: BLE001 - a crashing pass is what bisect looks for
            self._failed(Application(index, p.spec(), True, group), f"{type(e).__name__}: {e}")
            raise
        self.trace.applications.append(Application(index, p.spec(), changed, group))
        self.trace.states.append(module.clone() if changed else self.trace.states[-1])
        return changed

    def _failed(self, app: Application, message: str) -> None:
        self.trace.applications.append(app)
        self.trace.error = f"pass {app.label()} failed: {message}"


def record(module: Module, items, disabled: frozenset[str] = frozenset()) -> Trace:
    """Run `items` on a clone of `module`, recording every application. Never raises for a
    failing pass: the trace ends at it and says why."""
    work = module.clone()
    runner = RecordingRunner(list(items), verify=True, disabled=disabled)
    runner.trace.states.append(module.clone())
    try:
        runner.run(work)
    except Exception:  # noqa: BLE001 - recorded in trace.error by _run_pass
        if runner.trace.error is None:
            raise
    return runner.trace
