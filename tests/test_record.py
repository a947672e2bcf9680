"""hloc.util.record.dataclass against the standard decorator: each class body here is made
into a record class both ways, and the two must behave the same (construction, defaults and
factories, __post_init__, repr, equality, hashing, frozenness, inheritance, replace, fields);
and every record class hloc defines must be one of ours."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from dataclasses import FrozenInstanceError, field
from typing import ClassVar

import pytest

import hloc
from hloc.util import record


def both(make_body, frozen=False):
    """The class `make_body()` returns, decorated by the standard decorator and by ours."""
    std = dataclasses.dataclass(frozen=frozen)(make_body())
    ours = record.dataclass(frozen=frozen)(make_body())
    return std, ours


def point():
    class Point:
        """A doc."""
        x: int
        y: int = 2
        tags: list = field(default_factory=list)
        note: str = field(default="n", compare=False, repr=False)
        kind: ClassVar[str] = "point"
    return Point


def derived():
    class Derived:
        a: int
        b: tuple = ()
        c: list = field(default_factory=lambda: [1], init=False)
        d: int = field(default=5, init=False)

        def __post_init__(self):
            object.__setattr__(self, "a", self.a * 10)
    return Derived


def custom():
    class Custom:
        a: int

        def __eq__(self, other):
            return isinstance(other, Custom) and self.a % 3 == other.a % 3

        def __repr__(self):
            return "custom"
    return Custom


def hashed():
    class Hashed:
        a: int
        b: int = field(default=0, hash=False)

        def __hash__(self):
            return 7
    return Hashed


def empty():
    class Empty:
        pass
    return Empty


def one():
    class One:
        a: float
    return One


BODIES = [point, derived, custom, hashed, empty, one]
ARGS = {point: [(1,), (1, 3), (1, 3, [4]), (1, 3, [4], "m")], derived: [(1,), (2, (1,))],
        custom: [(1,), (4,)], hashed: [(1,), (1, 2)], empty: [()],
        one: [(1.0,), (float("nan"),)]}


def observe(cls, args):
    """Everything a user can see of instances made from `args`."""
    a, b, c = cls(*args), cls(*args), cls(*args[:1])
    seen = {
        "repr": repr(a), "eq": a == b, "ne": a != b, "eq_other": a == c, "eq_foreign": a == 1,
        "vars": vars(a), "fields": [f.name for f in dataclasses.fields(cls)],
        "match_args": cls.__match_args__, "hashable": cls.__hash__ is not None,
        "asdict": dataclasses.asdict(c),
    }
    if cls.__hash__ is not None:
        try:
            seen["hash"] = (hash(a), hash(a) == hash(b))
        except TypeError as e:  # a list field
            seen["hash"] = str(e)
    if dataclasses.fields(cls):
        name = dataclasses.fields(cls)[0].name
        for what, change in (("set", lambda: setattr(a, name, getattr(a, name))),
                             ("del", lambda: delattr(b, name))):
            try:
                change()
                seen[what] = "ok"
            except FrozenInstanceError as e:
                seen[what] = str(e)
        init = {f.name: getattr(c, f.name) for f in dataclasses.fields(cls) if f.init}
        seen["replace"] = repr(dataclasses.replace(c, **init))
    return seen


@pytest.fixture(params=["generic", "compiled"])
def phase(request, monkeypatch):
    """Record methods as a class's first calls get them (the generic stand-ins) or compiled."""
    monkeypatch.setattr(record, "COMPILE_AFTER", 10**9 if request.param == "generic" else 0)
    return request.param


@pytest.mark.parametrize("frozen", [False, True])
@pytest.mark.parametrize("make_body", BODIES, ids=lambda f: f.__name__)
def test_a_record_class_behaves_as_the_standard_dataclass(make_body, frozen, phase):
    std, ours = both(make_body, frozen)
    for args in ARGS[make_body]:
        assert observe(ours, args) == observe(std, args), args
    with pytest.raises(TypeError) as s:
        std(*range(9))
    with pytest.raises(TypeError) as o:
        ours(*range(9))
    assert "positional argument" in str(s.value) and "positional argument" in str(o.value)


@pytest.mark.parametrize("frozen", [False, True])
def test_a_record_class_compiles_its_methods_after_its_first_calls(frozen, monkeypatch):
    """The generic stand-ins answer the first COMPILE_AFTER calls, then the compiled methods
    take their place on the class and give the same answers; a call the stand-ins leave to the
    compiled __init__ (an argument missing) compiles them at once."""
    monkeypatch.setattr(record, "COMPILE_AFTER", 20)
    std, ours = both(point, frozen)
    stand_in = vars(ours)["__init__"]
    for _ in range(20):
        ours(1)
    assert vars(ours)["__init__"] is stand_in
    seen = [observe(ours, args) for args in ARGS[point]]  # crosses the 20 calls
    compiled = vars(ours)["__init__"]
    assert compiled is not stand_in and compiled.__code__.co_filename.startswith("<record")
    assert vars(ours)["__eq__"].__code__.co_filename.startswith("<record")
    assert [observe(ours, args) for args in ARGS[point]] == seen
    assert seen == [observe(std, args) for args in ARGS[point]]
    _, fresh = both(point, frozen)
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'x'"):
        fresh()
    assert vars(fresh)["__init__"].__code__.co_filename.startswith("<record")


def test_generic_and_compiled_equality_agree_on_values_without_a_plain_truth():
    """`==` over fields holding arrays: the field tuples compared (up to Python 3.12) or the
    fields one by one (3.13), the same way in both phases."""
    import numpy as np

    results = []
    for after in (10**9, 0):
        record.COMPILE_AFTER, saved = after, record.COMPILE_AFTER
        try:
            cls = record.dataclass(one())
            a, b = cls(np.arange(3)), cls(np.arange(3))
            try:
                results.append(("value", a == b))
            except ValueError as e:
                results.append(("error", str(e)))
        finally:
            record.COMPILE_AFTER = saved
    assert results[0] == results[1]


@pytest.mark.parametrize("make_body", BODIES, ids=lambda f: f.__name__)
def test_a_record_class_has_the_doc_a_dataclass_has(make_body):
    std, ours = both(make_body)
    assert ours.__doc__ == std.__doc__.replace("'", "")


def test_a_frozen_record_subclass_may_add_attributes_only_as_the_standard_one_does():
    std, ours = both(point, frozen=True)
    for base in (std, ours):
        plain = type("Plain", (base,), {})  # not a dataclass itself
        p = plain(1)
        p.extra = 5  # not a field, and not the record's own class: allowed
        assert p.extra == 5
        with pytest.raises(FrozenInstanceError):
            p.x = 3


def test_record_inheritance_adds_fields_after_the_base_ones():
    base = record.dataclass(frozen=True)(point())

    class Sub(base):
        z: int = 9

    sub = record.dataclass(frozen=True)(Sub)
    s = sub(1, 2, [], "q", 4)
    assert [f.name for f in dataclasses.fields(sub)] == ["x", "y", "tags", "note", "z"]
    assert repr(s) == "test_record_inheritance_adds_fields_after_the_base_ones.<locals>.Sub(" \
        "x=1, y=2, tags=[], z=4)"
    assert s != base(1, 2, [], "q")  # another class: not equal, as dataclasses has it


def test_standard_dataclasses_may_derive_from_records_as_from_dataclasses():
    for frozen in (False, True):
        std, ours = both(point, frozen)
        for base in (std, ours):
            params = base.__dataclass_params__
            assert (params.init, params.repr, params.eq, params.frozen) == (True, True, True,
                                                                            frozen)
        derived = [dataclasses.dataclass(frozen=frozen)(
            type("Sub", (base,), {"__annotations__": {"z": "int"}, "z": 0})) for base in (std, ours)]
        assert [observe(cls, (1, 2)) for cls in derived][0] == observe(derived[1], (1, 2))
        with pytest.raises(TypeError, match="cannot inherit"):  # as from any dataclass
            dataclasses.dataclass(frozen=not frozen)(type("Bad", (ours,), {}))
    with pytest.raises(TypeError, match="frozen standard dataclass"):
        record.dataclass(frozen=True)(type("R", (both(one, True)[0],), {}))


def test_frozen_and_mutable_records_do_not_mix():
    base = record.dataclass(frozen=True)(one())
    with pytest.raises(TypeError, match="non-frozen record from a frozen one"):
        record.dataclass(type("Mutable", (base,), {"__annotations__": {"b": "int"}}))
    with pytest.raises(TypeError, match="frozen record from a non-frozen one"):
        record.dataclass(frozen=True)(
            type("Frozen", (record.dataclass(one()),), {"__annotations__": {"b": "int"}}))


def test_what_a_record_does_not_support_is_refused_when_the_class_is_defined():
    with pytest.raises(TypeError, match="keyword-only"):
        record.dataclass(type("K", (), {"__annotations__": {"a": "int"},
                                        "a": field(kw_only=True)}))
    with pytest.raises(TypeError, match="InitVar"):
        record.dataclass(type("I", (), {"__annotations__": {"a": "dataclasses.InitVar[int]"}}))
    with pytest.raises(TypeError, match="cannot define __setattr__"):
        record.dataclass(frozen=True)(type("S", (), {"__setattr__": lambda s, n, v: None}))
    with pytest.raises(TypeError):
        record.dataclass(eq=False)  # no other option is taken


def test_a_recursive_record_repr_stops_as_the_standard_one_does():
    reprs = []
    for cls in both(one):
        h = cls([])
        h.a.append(h)
        reprs.append(repr(h))
    assert reprs[0] == reprs[1] == "one.<locals>.One(a=[...])"


def _hloc_modules():
    for info in pkgutil.walk_packages(hloc.__path__, "hloc."):
        if ".gen." in info.name or info.name.endswith((".__main__", ".gen")):
            continue
        yield info.name


def test_every_record_class_in_hloc_is_made_by_hloc_util_record():
    """A class hloc defines with the standard decorator would cost its start ~1 ms again."""
    standard = []
    for name in _hloc_modules():
        try:
            module = importlib.import_module(name)
        except ImportError:  # an optional extra's module (cuda, mpi) where it is missing
            continue
        for value in vars(module).values():
            if (isinstance(value, type) and value.__module__ == name
                    and "__dataclass_fields__" in value.__dict__
                    and "__record__" not in value.__dict__):
                standard.append(f"{name}.{value.__qualname__}")
    assert standard == []
