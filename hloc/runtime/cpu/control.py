"""Control flow on the host: while, conditional and sequential thunks.

The loop predicate and branch index are read straight from their arena bytes; copy insertion
put the loop state in the same slices for init, body result and result, so a while thunk
copies nothing between iterations.
"""

from __future__ import annotations

from ...thunks.base import ThunkKind
from .program import LoadContext, Runner, Step, builds


@builds(ThunkKind.WHILE)
def build_while(ctx: LoadContext, thunk) -> Step:
    predicate = ctx.memory.cell(thunk.predicate)

    def bind(runners: list[Runner]) -> Runner:
        condition, body = runners

        def run() -> None:
            while True:
                condition()
                if not predicate.a[0]:
                    return
                body()
        return run

    children = (ctx.sequence(thunk.condition), ctx.sequence(thunk.body))
    return Step(thunk.name, "while", thunk.name, children=children, bind=bind)


@builds(ThunkKind.CONDITIONAL)
def build_conditional(ctx: LoadContext, thunk) -> Step:
    instr = ctx.instruction(thunk.name)
    selector = ctx.memory.cell(thunk.selector, instr.operands[0].shape)
    branch = thunk.branch

    def bind(runners: list[Runner]) -> Runner:
        def run() -> None:
            runners[branch(selector.a[()])]()
        return run

    children = tuple(ctx.sequence(b) for b in thunk.branches)
    return Step(thunk.name, "conditional", thunk.name, children=children, bind=bind)


@builds(ThunkKind.SEQUENTIAL)
def build_sequential(ctx: LoadContext, thunk) -> Step:
    return Step(thunk.name, "sequential", thunk.name, children=(ctx.sequence(thunk.thunks),),
                bind=lambda runners: runners[0])
