"""HLO text parser: XLA/JAX text (as_hlo_text, compile().as_text(), XLA dumps) -> Module.

Accepts names with or without `%`, operands with inline shapes, `/*...*/` and `//` comments,
the FileNames/StackFrames debug sections (skipped), metadata, backend_config and layouts.
Computations may be referenced before they are defined. Every failure is a ParseError whose
`path` is `file:line:col`.

Elided constants: dumps print large constants as `{...}`. They parse to a CONSTANT whose
`attrs.literal` is None; whoever needs the value must raise UnsupportedError("constant %c was
elided ({...}) in the text; use the proto form").
"""

from __future__ import annotations

import gc
import re

from ...errors import ParseError
from ..attrs import NO_ATTRS, Attrs, OpMetadata
from ..computation import Computation
from ..instruction import Instruction
from ..module import Module
from ..opcodes import Opcode as O
from ..shape import Shape
from .lexer import INT, NAME, Cursor, token
from .literal_parse import parse_literal
from .parser_attrs import REQUIRED, InstrRec, finalize, parse_attribute
from .parser_values import MODULE_READERS, cached_shape, parse_shape, skip_value
from .printer_attrs import default_comparison_type

__all__ = ["parse_module"]

_HEAD = token(r"(ROOT(?:[ \t\r\n]+|(?=%)))?%?([A-Za-z_][A-Za-z0-9_.\-]*)[ \t\r\n]*=")
_OPCODE = token(r"([A-Za-z][A-Za-z0-9_\-]*)")
_ARRAY_START = re.compile(r"[a-z][a-z0-9]*\[")
_HLO_MODULE = token(r"HloModule(?![\w.\-])")
_ENTRY = token(r"ENTRY(?![\w.\-])")
_FILE_NAMES = token(r"FileNames(?![\w.\-])")
_SECTION = token(r"(?:FunctionNames|FileLocations|StackFrames)(?![\w.\-])")
_THREAD = token(r",[ \t\r\n]*execution_thread[ \t]*=")
_MODULE_ATTR = token(r"([A-Za-z_][A-Za-z0-9_.\-]*)[ \t]*=")
# Fast path for the usual one-line form `[ROOT ]%n = f32[2]{0} add(%a, %b)`: one regex for the
# head and one for a plain operand list; anything else goes through the general path.
_ID = r"%?[A-Za-z_][A-Za-z0-9_.\-]*"
_FAST_HEAD = token(r"(ROOT[ \t]+)?%?([A-Za-z_][A-Za-z0-9_.\-]*)[ \t]*=[ \t]*"
                   r"([a-z][a-z0-9]*\[[^\]\n]*\](?:\{[^{}\n]*\})?)[ \t]+([a-z][a-z0-9\-]*)\(")
_FAST_OPERANDS = re.compile(rf"[ \t]*((?:{_ID})(?:,[ \t]*(?:/\*index=\d+\*/)?{_ID})*)?[ \t]*\)")
_LISTED_NAME = re.compile(r"(?:/\*index=\d+\*/)?%?([A-Za-z_][A-Za-z0-9_.\-]*)")
_OPCODES = {op.value: op for op in O} | {"optimization-barrier": O.OPT_BARRIER}

# Which attribute names fill an opcode's called-computation list, in XLA's order (while keeps
# its body first although the text prints condition= first).
_SLOTS: dict[O, tuple[str, ...]] = {
    O.WHILE: ("body", "condition"), O.SELECT_AND_SCATTER: ("select", "scatter"),
    O.CONDITIONAL: ("true_computation", "false_computation", "branch_computations"),
    O.CUSTOM_CALL: ("to_apply", "called_computations"), O.FUSION: ("calls",),
    O.ASYNC_START: ("calls",),
    **{op: ("to_apply",) for op in (O.CALL, O.MAP, O.REDUCE_WINDOW, O.REDUCE, O.ALL_REDUCE,
                                     O.ALL_REDUCE_START, O.REDUCE_SCATTER, O.SCATTER, O.SORT)},
}
# Module-header attributes that only steer XLA's SPMD partitioner: read and dropped.
_IGNORED_MODULE_ATTRS = frozenset({
    "alias_passthrough_params", "allow_spmd_sharding_propagation_to_parameters",
    "allow_spmd_sharding_propagation_to_output", "origin_recovery_table",
})


def parse_module(text: str, path: str = "<text>") -> Module:
    """Parse HLO text into a Module (ids assigned fresh, in text order)."""
    collecting = gc.isenabled()
    gc.disable()  # parsing allocates many linked objects; cyclic GC passes only slow it down
    try:
        return _Parser(text, path).module()
    except ParseError:
        raise
    except RecursionError:
        raise ParseError("the text nests too deeply to parse", path=path) from None
    except Exception as e:  # noqa: BLE001 - the contract is: bad text only ever gives ParseError
        raise ParseError(f"internal error while parsing: {type(e).__name__}: {e}", path=path) from e
    finally:
        if collecting:
            gc.enable()


class _CompRec:
    __slots__ = ("name", "pos", "entry_pos", "result", "result_pos", "instrs", "thread")

    def __init__(self, name: str, pos: int, entry_pos: int | None):
        self.name, self.pos, self.entry_pos = name, pos, entry_pos
        self.result: Shape | None = None
        self.result_pos = pos
        self.instrs: list[InstrRec] = []
        self.thread = ""


class _Parser:
    def __init__(self, text: str, path: str):
        if "\0" in text:
            raise Cursor(text, path).error("NUL character in HLO text", text.index("\0"))
        self.cur = Cursor(text, path)
        self.header: dict = {}

    # ---- top level ------------------------------------------------------------------------
    def module(self) -> Module:
        cur = self.cur
        name = None
        if cur.match(_HLO_MODULE):
            name = cur.expect_name("a module name")
            while cur.eat(","):
                self._module_attribute()
        self._skip_stack_frames()
        comps = []
        while not cur.at_end():
            comps.append(self._computation())
        if not comps:
            raise cur.error("expected a computation")
        return _Builder(cur, self.header).build(name, comps)

    def _module_attribute(self) -> None:
        cur = self.cur
        m = cur.expect(_MODULE_ATTR, "a module attribute (name=value)")
        key, pos = m.group(1), m.start(1)
        if key in self.header:
            raise cur.error(f"module attribute '{key}' appears twice", pos)
        reader = MODULE_READERS.get(key)
        if reader is not None:
            self.header[key] = (reader(cur), pos)
        elif key in _IGNORED_MODULE_ATTRS:
            skip_value(cur)
        else:
            raise cur.error(f"unknown module attribute '{key}'", pos)

    def _skip_stack_frames(self) -> None:
        """Skip the FileNames/FunctionNames/FileLocations/StackFrames debug tables."""
        cur = self.cur
        if not cur.match(_FILE_NAMES):
            return
        while True:
            if cur.match(INT):
                if cur.peek() == "{":
                    cur.raw_braced()
                else:
                    cur.expect_string("a quoted name or {...} entry")
            elif not cur.match(_SECTION):
                return

    # ---- computations ---------------------------------------------------------------------
    def _computation(self) -> _CompRec:
        cur = self.cur
        entry = cur.match(_ENTRY)
        pos = cur.skip_ws()
        rec = _CompRec(cur.expect_name("a computation name (or ENTRY)"), pos,
                       entry.end() - 5 if entry else None)
        if cur.peek() == "(":
            self._param_list()
            cur.expect_char("->", "'->' after the parameter list")
            rec.result_pos = cur.skip_ws()
            rec.result = parse_shape(cur)
        cur.expect_char("{", "'{' to start the computation body")
        while True:
            c = cur.peek()
            if c == "}":
                cur.pos += 1
                break
            if not c:
                raise cur.error(f"computation '{rec.name}' is missing its closing '}}'")
            rec.instrs.append(self._fast_instruction() or self._instruction())
        if not rec.instrs:
            raise cur.error(f"computation '{rec.name}' has no instructions", pos)
        if cur.match(_THREAD):
            rec.thread = cur.expect_string()
        return rec

    def _param_list(self) -> None:
        cur = self.cur
        cur.expect_char("(")
        if cur.eat(")"):
            return
        while True:
            cur.expect_name("a parameter name")
            cur.expect_char(":", "':' after the parameter name")
            parse_shape(cur)
            if cur.eat(")"):
                return
            cur.expect_char(",", "',' or ')' in the parameter list")

    # ---- instructions ---------------------------------------------------------------------
    def _fast_instruction(self) -> InstrRec | None:
        cur = self.cur
        m = _FAST_HEAD.match(cur.text, cur.pos)
        if m is None:
            return None
        opcode = _OPCODES.get(m.group(4))
        shape = cached_shape(m.group(3))
        if opcode is None or shape is None or opcode in _OPERAND_FORMS:
            return None
        ops = _FAST_OPERANDS.match(cur.text, m.end())
        if ops is None:
            return None
        rec = InstrRec(m.group(2), m.start(2), m.group(1) is not None)
        rec.shape, rec.opcode = shape, opcode
        listed = ops.group(1)
        if listed:
            # Positions point at the list; errors search the exact name from there.
            base = ops.start(1)
            if "/*" in listed:
                names = [n.group(1) for n in _LISTED_NAME.finditer(listed)]
            else:
                names = [n.strip().lstrip("%") for n in listed.split(",")]
            rec.operands = [(n, base, None) for n in names]
        cur.pos = ops.end()
        while cur.eat(","):
            parse_attribute(cur, rec)
        return rec

    def _instruction(self) -> InstrRec:
        cur = self.cur
        m = cur.expect(_HEAD, "an instruction ('name = shape opcode(...)') or '}'")
        rec = InstrRec(m.group(2), m.start(2), m.group(1) is not None)
        rec.shape = parse_shape(cur)
        om = cur.expect(_OPCODE, "an opcode")
        try:
            rec.opcode = O.parse(om.group(1))
        except ValueError:
            raise cur.error(f"unknown opcode '{om.group(1)}'", om.start(1)) from None
        cur.expect_char("(", f"'(' after {om.group(1)}")
        _OPERAND_FORMS.get(rec.opcode, _operands)(cur, rec)
        cur.expect_char(")", "')' to end the operand list")
        while cur.eat(","):
            parse_attribute(cur, rec)
        return rec


def _operands(cur: Cursor, rec: InstrRec) -> None:
    if cur.peek() == ")":
        return
    while True:
        pos = cur.skip_ws()
        shape = None
        if cur.text.startswith("(", pos) or _ARRAY_START.match(cur.text, pos):
            shape = parse_shape(cur)
        m = cur.expect(NAME, "an operand name")
        rec.operands.append((m.group(1), m.start(1), shape))
        if cur.peek() == "(":
            raise cur.error("nested instructions (an opcode as an operand) are not supported")
        if not cur.eat(","):
            return


def _parameter(cur: Cursor, rec: InstrRec) -> None:
    pos = cur.skip_ws()
    number = cur.expect_int("a parameter number")
    if number < 0:
        raise cur.error("parameter number must be >= 0", pos)
    rec.fields["parameter_number"] = number


def _constant(cur: Cursor, rec: InstrRec) -> None:
    rec.fields["literal"] = parse_literal(cur, rec.shape)


_OPERAND_FORMS = {O.PARAMETER: _parameter, O.CONSTANT: _constant}
_NO_METADATA = OpMetadata()  # immutable, so one instance serves every instruction without any


# ---- building the module ------------------------------------------------------------------
class _Builder:
    """Turns parsed records into a Module: resolves names, orders computations callees first."""

    def __init__(self, cur: Cursor, header: dict):
        self.cur = cur
        self.header = header
        self.comps: dict[str, Computation] = {}
        self.pending: list[tuple[Instruction, InstrRec]] = []

    def build(self, name: str | None, recs: list[_CompRec]) -> Module:
        cur = self.cur
        for rec in recs:
            if rec.name in self.comps:
                raise cur.error(f"computation '{rec.name}' is defined twice", rec.pos)
            self.comps[rec.name] = self._computation(rec)
        for instr, instr_rec in self.pending:
            instr.called = self._called(instr, instr_rec)
        entry = self._entry(recs)
        module = Module(name or f"module_{entry.name}")
        for comp in self._callees_first(recs):
            module.add_computation(comp, entry=comp is entry)
        self._apply_header(module)
        return module

    def _entry(self, recs: list[_CompRec]) -> Computation:
        marked = [r for r in recs if r.entry_pos is not None]
        if len(marked) > 1:
            raise self.cur.error("more than one ENTRY computation", marked[1].entry_pos)
        return self.comps[(marked[0] if marked else recs[-1]).name]

    def _computation(self, crec: _CompRec) -> Computation:
        cur = self.cur
        comp = Computation(crec.name, execution_thread=crec.thread)
        by_name: dict[str, Instruction] = {}
        made: list[tuple[Instruction, InstrRec]] = []
        for rec in crec.instrs:
            if rec.name in by_name:
                raise cur.error(f"instruction '{rec.name}' is defined twice in '{crec.name}'", rec.pos)
            _check_required(cur, rec)
            fields = finalize(cur, rec)
            instr = Instruction(rec.opcode, rec.shape, name=rec.name,
                                attrs=Attrs(**fields) if fields else NO_ATTRS,
                                metadata=rec.metadata or _NO_METADATA)
            by_name[rec.name] = instr
            made.append((instr, rec))
        for instr, rec in made:
            instr.operands = [self._operand(by_name, crec, n, pos, s) for n, pos, s in rec.operands]
            comp.add(instr)
            if rec.comps:
                self.pending.append((instr, rec))
        for instr, rec in made:
            for n, pos in rec.preds:
                self._operand(by_name, crec, n, pos, None).add_control_dependency(instr)
            _normalize(cur, instr, rec)
        comp.root = self._root(crec, made)
        _check_parameters(cur, crec, made)
        _check_acyclic(cur, crec, made)
        return comp

    def _operand(self, by_name, crec: _CompRec, name: str, pos: int, shape) -> Instruction:
        instr = by_name.get(name)
        if instr is None:
            found = self.cur.text.find(name, pos)
            pos = found if found >= 0 else pos
            raise self.cur.error(f"instruction '{name}' is not defined in computation '{crec.name}'", pos)
        if shape is not None and not shape.compatible(instr.shape):  # (inline shapes: exact pos)
            raise self.cur.error(f"operand '{name}' is declared as {shape} but is {instr.shape}", pos)
        return instr

    def _root(self, crec: _CompRec, made) -> Instruction:
        roots = [(i, r) for i, r in made if r.root]
        if len(roots) > 1:
            raise self.cur.error(f"computation '{crec.name}' has more than one ROOT", roots[1][1].pos)
        root = roots[0][0] if roots else made[-1][0]
        if crec.result is not None and not crec.result.compatible(root.shape):
            raise self.cur.error(f"computation '{crec.name}' returns {crec.result} but its root "
                                 f"'{root.name}' is {root.shape}", crec.result_pos)
        return root

    def _called(self, instr: Instruction, rec: InstrRec) -> list[Computation]:
        cur = self.cur
        slots = _SLOTS.get(instr.opcode, ())
        for key, refs in rec.comps.items():
            if key not in slots:
                raise cur.error(f"attribute '{key}' does not apply to {instr.opcode.value}", refs[0][1] if refs else rec.pos)
        if "branch_computations" in rec.comps and "true_computation" in rec.comps:
            raise cur.error("conditional has both branch_computations and true_computation", rec.pos)
        out = []
        for key in slots:
            for name, pos in rec.comps.get(key, ()):
                comp = self.comps.get(name)
                if comp is None:
                    raise cur.error(f"computation '{name}' is not defined", pos)
                out.append(comp)
                if instr.opcode == O.FUSION:
                    comp.is_fusion = True
        return out

    def _callees_first(self, recs: list[_CompRec]) -> list[Computation]:
        order: list[Computation] = []
        state: dict[int, int] = {}  # 1 = in progress, 2 = done
        pos = {id(self.comps[r.name]): r.pos for r in recs}
        for rec in recs:
            stack = [(self.comps[rec.name], False)]
            while stack:
                comp, done = stack.pop()
                if done:
                    state[id(comp)] = 2
                    order.append(comp)
                    continue
                if state.get(id(comp)) == 2:
                    continue
                if state.get(id(comp)) == 1:
                    raise self.cur.error(f"computation '{comp.name}' calls itself", pos[id(comp)])
                state[id(comp)] = 1
                stack.append((comp, True))
                for callee in reversed(comp.called_computations()):
                    if state.get(id(callee)) != 2:
                        stack.append((callee, False))
        return order

    def _apply_header(self, module: Module) -> None:
        h = {k: v for k, (v, _) in self.header.items()}
        if "entry_computation_layout" in h:
            self._check_layout(module, *self.header["entry_computation_layout"])
            module.config.entry_layout = h["entry_computation_layout"]
        if h.get("is_scheduled"):
            module.schedule = {c.name: [i.name for i in c.instructions]
                               for c in module.computations if not c.is_fusion}
        module.input_output_alias = tuple(h.get("input_output_alias", ()))
        module.buffer_donors = tuple(h.get("buffer_donor", ()))
        module.config.replica_count = h.get("replica_count", 1)
        module.config.num_partitions = h.get("num_partitions", 1)
        module.frontend_attributes = h.get("frontend_attributes", ())

    def _check_layout(self, module: Module, layout, pos: int) -> None:
        params, result = layout
        entry = module.entry
        shapes = [p.shape for p in entry.parameters]
        same = len(params) == len(shapes) and all(
            a.compatible(b) for a, b in zip(params, shapes, strict=True))
        if not same or not result.compatible(entry.root.shape):
            raise self.cur.error("entry_computation_layout does not match the entry computation's "
                                 "parameters and result", pos)


def _check_required(cur: Cursor, rec: InstrRec) -> None:
    for key in REQUIRED.get(rec.opcode, ()):
        if key not in rec.seen:
            raise cur.error(f"{rec.opcode.value} '{rec.name}' needs the attribute {key}=", rec.pos)
    if rec.opcode == O.CONDITIONAL and not rec.comps:
        raise cur.error(f"conditional '{rec.name}' needs branch_computations= or "
                        "true_computation=/false_computation=", rec.pos)


def _normalize(cur: Cursor, instr: Instruction, rec: InstrRec) -> None:
    """Fill in what XLA's parser implies when the text leaves it out."""
    if instr.opcode == O.COMPARE and instr.attrs.comparison_type is None and instr.operands:
        instr.with_attrs(comparison_type=default_comparison_type(instr.operands[0].shape.element_type))
    if instr.opcode == O.BROADCAST and instr.attrs.dimensions is None:
        if instr.operands and instr.operands[0].shape.rank != 0:
            raise cur.error(f"broadcast '{rec.name}' of a non-scalar needs dimensions=", rec.pos)
        instr.with_attrs(dimensions=())


def _check_acyclic(cur: Cursor, crec: _CompRec, made) -> None:
    """Operands may be named before their definition, so a cycle is possible: reject it."""
    pending = {id(i): len(i.operands) + len(i.control_predecessors) for i, _ in made}
    ready = [i for i, _ in made if pending[id(i)] == 0]
    done = 0
    while ready:
        instr = ready.pop()
        done += 1
        for user, uses in [(u, u.operands.count(instr)) for u in instr.users] + \
                [(s, 1) for s in instr.control_successors]:
            pending[id(user)] -= uses
            if pending[id(user)] == 0:
                ready.append(user)
    if done == len(made):
        return
    # Walk back through unfinished operands until an instruction repeats: it is on the cycle.
    instr, seen = next(i for i, _ in made if pending[id(i)] > 0), set()
    while id(instr) not in seen:
        seen.add(id(instr))
        instr = next(d for d in instr.operands + instr.control_predecessors if pending[id(d)] > 0)
    rec = next(r for i, r in made if i is instr)
    raise cur.error(f"instruction '{rec.name}' depends on itself (a cycle) in '{crec.name}'", rec.pos)


def _check_parameters(cur: Cursor, crec: _CompRec, made) -> None:
    numbers: dict[int, InstrRec] = {}
    for instr, rec in made:
        if instr.opcode != O.PARAMETER:
            continue
        n = instr.attrs.parameter_number
        if n in numbers:
            raise cur.error(f"parameter number {n} is used twice in '{crec.name}'", rec.pos)
        numbers[n] = rec
    if numbers and sorted(numbers) != list(range(len(numbers))):
        missing = min(set(range(len(numbers))) - set(numbers))
        raise cur.error(f"computation '{crec.name}' has no parameter({missing})", crec.pos)
