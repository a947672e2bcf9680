"""`dataclass`: hloc's record classes, as the standard decorator makes them, defined faster.

Python 3.11's `dataclasses` writes each class's `__init__`, `__repr__`, `__eq__`, `__hash__`
and (frozen) `__setattr__`/`__delattr__` as source text and compiles each with `exec` when the
class is defined: about 1.2 ms for a frozen class, whatever its size. hloc defines ~200 record
classes, so that was ~70-100 ms of every command's start.

This decorator lets `dataclasses` do the bookkeeping (fields, defaults, `__match_args__`,
`__dataclass_fields__`, so `fields`, `replace` and `asdict` work as usual) with none of its
methods, then gives the class:
- `__init__`, `__eq__` and, for a frozen class, `__hash__`: compiled from one text this module
  writes from the fields, the same code this Python's dataclasses writes (frozen classes assign
  through `object.__setattr__`; equality between instances of the same class only, else
  NotImplemented; the hash is that of the field tuple). One compilation per class instead of six,
  and only for a class that is used: its first COMPILE_AFTER calls go to generic stand-ins that
  do the same over the field list, then the compiled methods replace them. A compile uses 77
  of hloc's ~120 classes loaded, 44 of them 8 times or fewer. Until the methods are compiled,
  `inspect.signature` of the class reads `(*args, **kwargs)`.
- `__repr__`, `__setattr__`, `__delattr__`: closures over the field names, nothing compiled,
  the same repr text and the same FrozenInstanceError for a frozen instance's fields.
- `__hash__ = None` for a mutable class, as dataclasses sets it.

A method the class body defines itself is kept, as dataclasses keeps it. Options other than
`frozen` are refused, and so are keyword-only fields and `InitVar`s: hloc uses none, and a
record class that needed them would fail at import, not later. About 0.05 ms a class defined,
0.15 ms more for one that is used.
"""

from __future__ import annotations

import dataclasses
import reprlib
import sys
import threading
from dataclasses import MISSING, FrozenInstanceError
from typing import TYPE_CHECKING, Any

_lock = threading.Lock()  # around _bookkeeping's change of the bases' parameters
_FACTORY = object()  # an __init__ parameter's default meaning "call the field's default_factory"


def _record(cls=None, /, *, frozen: bool = False):
    def wrap(cls):
        return _define(cls, frozen)

    return wrap if cls is None else wrap(cls)


def _define(cls: type, frozen: bool) -> type:
    body = dict(cls.__dict__)  # what the class itself defines, before dataclasses adds to it
    _check_bases(cls, frozen)
    if frozen and ("__setattr__" in body or "__delattr__" in body):
        raise TypeError(f"{cls.__name__}: a frozen record cannot define __setattr__ or __delattr__")
    undocumented = not body.get("__doc__")
    if undocumented:  # dataclasses would make one with inspect.signature: ~0.2 ms a class
        cls.__doc__ = "(record)"
    cls = _bookkeeping(cls)
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    params.init = params.repr = params.eq = True  # what the class has, once we are done:
    params.frozen = frozen  # a standard dataclass deriving from it sees a frozen base
    cls.__record__ = True  # type: ignore[attr-defined]
    fields = dataclasses.fields(cls)
    _check_fields(cls, fields)
    qualname = cls.__qualname__

    def put(name: str, fn: Any) -> None:
        if name not in body:
            fn.__qualname__ = f"{qualname}.{name}"
            setattr(cls, name, fn)

    if undocumented:
        cls.__doc__ = _signature_text(cls.__name__, fields)
    explicit_hash = "__hash__" in body and not (body["__hash__"] is None and "__eq__" in body)
    hashed = [f.name for f in fields if (f.compare if f.hash is None else f.hash)]
    methods = _stand_ins(cls, fields, frozen,
                         hash_fields=hashed if frozen and not explicit_hash else None)
    hash_fn = methods.pop("__hash__", None)  # None for a mutable class, as dataclasses has it
    for name, fn in methods.items():
        put(name, fn)
    put("__repr__", _repr([f.name for f in fields if f.repr]))
    if not explicit_hash:  # set even over the `__hash__ = None` of a body defining __eq__
        if hash_fn is not None:
            hash_fn.__qualname__ = f"{qualname}.__hash__"
        cls.__hash__ = hash_fn  # type: ignore[method-assign]
    if frozen:
        names = frozenset(f.name for f in fields)
        put("__setattr__", _frozen_setattr(cls, names))
        put("__delattr__", _frozen_delattr(cls, names))
    return cls


def _signature_text(name: str, fields: tuple[dataclasses.Field, ...]) -> str:
    """`Name(a: int, b: int = 0, c: list = <factory>)`: the doc dataclasses gives a class
    without one (from its __init__'s signature), without quoting string annotations."""
    params = []
    for f in fields:
        if not f.init:
            continue
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", repr(f.type))
        default = ("" if f.default is MISSING and f.default_factory is MISSING
                   else " = <factory>" if f.default is MISSING else f" = {f.default!r}")
        params.append(f"{f.name}: {kind}{default}")
    return f"{name}({', '.join(params)})"


def _bookkeeping(cls: type) -> type:
    """dataclasses' work without its methods. It would refuse a non-frozen call for a class
    with a frozen base, so frozen record bases read as mutable for as long as it runs."""
    records = [vars(base) for base in cls.__mro__[1:] if vars(base).get("__record__")]
    frozen_bases = [own["__dataclass_params__"] for own in records
                    if own["__dataclass_params__"].frozen]
    with _lock:
        for params in frozen_bases:
            params.frozen = False
        try:
            return dataclasses.dataclass(cls, init=False, repr=False, eq=False)
        finally:
            for params in frozen_bases:
                params.frozen = True


def _check_bases(cls: type, frozen: bool) -> None:
    for base in cls.__mro__[1:]:
        if "__dataclass_fields__" not in base.__dict__:
            continue
        base_frozen = base.__dataclass_params__.frozen  # type: ignore[attr-defined]
        if base_frozen and not base.__dict__.get("__record__"):
            raise TypeError(f"{cls.__name__}: a record cannot derive from a frozen standard "
                            f"dataclass ({base.__name__}); make that one a record too")
        if base_frozen != frozen:
            which = "frozen" if frozen else "non-frozen"
            raise TypeError(f"{cls.__name__}: cannot inherit a {which} record from "
                            f"{'a frozen' if base_frozen else 'a non-frozen'} one ({base.__name__})")


def _check_fields(cls: type, fields: tuple[dataclasses.Field, ...]) -> None:
    pseudo = [f for f in cls.__dataclass_fields__.values() if f not in fields]  # type: ignore[attr-defined]
    for f in pseudo:
        if "InitVar" in str(f.type):
            raise TypeError(f"{cls.__name__}.{f.name}: a record cannot have InitVar fields")
    for f in fields:
        if f.kw_only is True:
            raise TypeError(f"{cls.__name__}.{f.name}: a record cannot have keyword-only fields")
        if f.name == "self" or f.name.startswith("__record_"):
            raise TypeError(f"{cls.__name__}.{f.name}: a record field cannot have that name")


# Calls (of a class's __init__, __eq__ and __hash__ together) answered by the generic stand-ins
# before the class's own methods are compiled. Most record classes are used a few times by a
# command, and compiling their methods (~0.25 ms a class) would cost more than it saves.
COMPILE_AFTER = 16


def _stand_ins(cls: type, fields: tuple[dataclasses.Field, ...], frozen: bool,
               hash_fields: list[str] | None) -> dict[str, Any]:
    """`__init__`, `__eq__` and (when given the fields to hash) `__hash__` for `cls`: generic
    ones, written over the fields, for the class's first COMPILE_AFTER calls; then what
    _compiled makes, put on the class where the stand-ins are (not over a method the body
    defines). The generic ones do what the compiled ones do; a call they do not handle as
    simply (an argument missing, extra or given twice) compiles the methods at once and goes to
    them, so its error is the standard one."""
    lazy = _Lazy(cls, fields, frozen, hash_fields)
    assign = object.__setattr__ if frozen else setattr
    compared = tuple(f.name for f in fields if f.compare)
    post_init = hasattr(cls, "__post_init__")

    def __init__(self, *args, **kwargs):
        values = _init_values(fields, args, kwargs) if lazy.generic() else None
        if values is None:
            return lazy.real("__init__")(self, *args, **kwargs)
        for name, value in values:
            assign(self, name, value)
        if post_init:
            self.__post_init__()

    def __eq__(self, other):
        return _fields_eq(compared, self, other) if lazy.generic() else lazy.real("__eq__")(self, other)

    lazy.stand_ins.update(__init__=__init__, __eq__=__eq__)
    if hash_fields is not None:
        hashed = tuple(hash_fields)

        def __hash__(self):
            if not lazy.generic():
                return lazy.real("__hash__")(self)
            return hash(tuple(getattr(self, name) for name in hashed))

        lazy.stand_ins["__hash__"] = __hash__
    return dict(lazy.stand_ins)


class _Lazy:
    """A record class's compiled methods, made when its stand-ins have been called enough."""

    def __init__(self, cls: type, fields: tuple[dataclasses.Field, ...], frozen: bool,
                 hash_fields: list[str] | None) -> None:
        self.cls, self.fields, self.frozen, self.hash_fields = cls, fields, frozen, hash_fields
        self.stand_ins: dict[str, Any] = {}
        self.compiled: dict[str, Any] = {}
        self.calls = 0

    def generic(self) -> bool:
        """Whether this call goes to the generic stand-in (counted)."""
        self.calls += 1
        return not self.compiled and self.calls <= COMPILE_AFTER

    def real(self, name: str) -> Any:
        """The compiled method `name`, compiling the class's methods first if need be."""
        if not self.compiled:
            cls = self.cls
            methods = _compiled(cls, self.fields, self.frozen, self.hash_fields)
            for method, fn in methods.items():
                fn.__qualname__ = f"{cls.__qualname__}.{method}"
                if cls.__dict__.get(method) is self.stand_ins[method]:
                    setattr(cls, method, fn)  # type.__setattr__: instances' rules do not apply
            self.compiled.update(methods)
        return self.compiled[name]


def _init_values(fields: tuple[dataclasses.Field, ...], args: tuple, kwargs: dict
                 ) -> list[tuple[str, Any]] | None:
    """(field, value) in the order the compiled __init__ assigns them (factories called in
    that order), or None for a call it leaves to the compiled one."""
    names = [f.name for f in fields if f.init]
    if len(args) > len(names) or not kwargs.keys() <= set(names):
        return None
    given = dict(zip(names, args, strict=False))
    if not given.keys().isdisjoint(kwargs):
        return None
    given.update(kwargs)
    values = []
    for f in fields:
        if f.name in given and f.init:
            values.append((f.name, given[f.name]))
        elif f.default_factory is not MISSING:
            values.append((f.name, f.default_factory()))
        elif not f.init:
            continue  # no argument, no factory: the class attribute is read instead
        elif f.default is not MISSING:
            values.append((f.name, f.default))
        else:
            return None
    return values


def _fields_eq(compared: tuple[str, ...], self: Any, other: Any) -> Any:
    """The compiled __eq__'s answer (see _eq_text), computed over the field names."""
    if sys.version_info >= (3, 13):
        if self is other:
            return True
        if other.__class__ is not self.__class__:
            return NotImplemented
        result: Any = True
        for name in compared:  # `a == b and c == d`: the first false term, else the last
            result = getattr(self, name) == getattr(other, name)
            if not result:
                return result
        return result
    if other.__class__ is not self.__class__:
        return NotImplemented
    return (tuple(getattr(self, name) for name in compared)
            == tuple(getattr(other, name) for name in compared))


def _compiled(cls: type, fields: tuple[dataclasses.Field, ...], frozen: bool,
              hash_fields: list[str] | None) -> dict[str, Any]:
    """`__init__`, `__eq__` and (when given the fields to hash) `__hash__`, compiled from one
    text written from the fields, as dataclasses writes them (one compilation, not three: the
    cost is mostly per text)."""
    params, init = [], []
    scope: dict[str, Any] = {"__record_setattr": object.__setattr__, "__record_factory": _FACTORY}
    for f in fields:
        default = f"__record_default_{f.name}"
        if f.default_factory is not MISSING:
            scope[default] = f.default_factory
            if f.init:
                params.append(f"{f.name}=__record_factory")
                value = f"{default}() if {f.name} is __record_factory else {f.name}"
            else:
                value = f"{default}()"
        elif f.init:
            if f.default is not MISSING:
                scope[default] = f.default
                params.append(f"{f.name}={default}")
            else:
                params.append(f.name)
            value = f.name
        else:  # not an argument, no factory: the class attribute (the default) is read instead
            continue
        init.append(f"__record_setattr(self, {f.name!r}, {value})" if frozen
                    else f"self.{f.name} = {value}")
    if hasattr(cls, "__post_init__"):
        init.append("self.__post_init__()")
    compared = [f.name for f in fields if f.compare]
    text = (f"def __init__(self{''.join(', ' + p for p in params)}):\n"
            + "".join(f"    {line}\n" for line in init or ["pass"])
            + _eq_text(compared))
    if hash_fields is not None:
        text += f"def __hash__(self):\n    return hash({_tuple('self', hash_fields)})\n"
    namespace: dict[str, Any] = {}
    exec(compile(text, f"<record {cls.__qualname__}>", "exec"), scope, namespace)
    return namespace


def _eq_text(names: list[str]) -> str:
    """`__eq__` as this Python's dataclasses writes it: up to 3.12 the field tuples compared
    (so a field holding the same NaN object is equal), from 3.13 field by field after an
    identity test."""
    if sys.version_info >= (3, 13):
        terms = " and ".join(f"self.{name} == other.{name}" for name in names) or "True"
        return ("def __eq__(self, other):\n    if self is other:\n        return True\n"
                f"    if other.__class__ is self.__class__:\n        return {terms}\n"
                "    return NotImplemented\n")
    return ("def __eq__(self, other):\n    if other.__class__ is self.__class__:\n"
            f"        return {_tuple('self', names)} == {_tuple('other', names)}\n"
            "    return NotImplemented\n")


def _tuple(instance: str, names: list[str]) -> str:
    return "(" + "".join(f"{instance}.{name}," for name in names) + ")"


def _repr(names: list[str]):
    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        items = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{self.__class__.__qualname__}({items})"

    return __repr__


def _frozen_setattr(cls: type, names: frozenset[str]):
    def __setattr__(self, name, value):
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    return __setattr__


def _frozen_delattr(cls: type, names: frozenset[str]):
    def __delattr__(self, name):
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __delattr__


if TYPE_CHECKING:  # the type checker sees the standard decorator, which this one behaves as
    from dataclasses import dataclass as dataclass
else:
    dataclass = _record
