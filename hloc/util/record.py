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
  and only when one of the three is first called: until then the class holds stand-ins that
  compile them and step aside (a command uses a few dozen of the classes). Before that first
  call, `inspect.signature` of the class reads `(*args, **kwargs)`.
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
    methods = _on_first_call(cls, fields, frozen,
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


def _on_first_call(cls: type, fields: tuple[dataclasses.Field, ...], frozen: bool,
                   hash_fields: list[str] | None) -> dict[str, Any]:
    """Stand-ins for what _compiled makes (`__init__`, `__eq__`, `__hash__` when hashed): the
    first call of any compiles the three, puts them on the class where the stand-ins are (not
    over a method the body defines) and runs the one called. A command uses a
    few dozen of hloc's ~200 record classes, so most are never compiled (~0.15 ms each)."""
    compiled: dict[str, Any] = {}
    stand_ins: dict[str, Any] = {}

    def real(name: str) -> Any:
        if not compiled:
            methods = _compiled(cls, fields, frozen, hash_fields)
            for method, fn in methods.items():
                fn.__qualname__ = f"{cls.__qualname__}.{method}"
                if cls.__dict__.get(method) is stand_ins[method]:
                    setattr(cls, method, fn)  # type.__setattr__: instances' rules do not apply
            compiled.update(methods)
        return compiled[name]

    def __init__(self, *args, **kwargs):
        real("__init__")(self, *args, **kwargs)

    def __eq__(self, other):
        return real("__eq__")(self, other)

    stand_ins.update(__init__=__init__, __eq__=__eq__)
    if hash_fields is not None:
        def __hash__(self):
            return real("__hash__")(self)

        stand_ins["__hash__"] = __hash__
    return dict(stand_ins)


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
