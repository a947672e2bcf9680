"""hloc.util.records: the standard dataclass, with its generated methods' code cached on disk."""

from __future__ import annotations

import dataclasses
import marshal
import os
import subprocess
import sys

import pytest

from hloc.util import records

pytestmark = pytest.mark.pure


@pytest.fixture
def cache_file(tmp_path, monkeypatch):
    """A private cache file, read afresh: the process's own cache and pending entries are
    set aside for the test."""
    path = tmp_path / "pycache" / "dataclass-methods.test.marshal"
    monkeypatch.setattr(records, "cache_path", lambda: str(path))
    monkeypatch.setattr(records, "_cache", None)
    monkeypatch.setattr(records, "_new", {})
    monkeypatch.setattr(records, "_used", set())
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    return path


def define(name: str = "Point"):
    @records.dataclass(frozen=True)
    class Point:
        x: int
        y: int = 0
        tags: tuple[str, ...] = dataclasses.field(default=(), repr=False)

    @records.dataclass
    class Box:
        items: list[int] = dataclasses.field(default_factory=list)

    Point.__qualname__ = name
    return Point, Box


def check_behaves_as_the_standard_dataclass(Point, Box):
    p = Point(1, 2, ("a",))
    assert dataclasses.is_dataclass(p)
    assert [f.name for f in dataclasses.fields(Point)] == ["x", "y", "tags"]
    assert p == Point(1, 2, ("a",)) and p != Point(1, 3) and hash(p) == hash(Point(1, 2, ("a",)))
    assert repr(p).endswith("Point(x=1, y=2)")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 5  # type: ignore[misc]
    assert dataclasses.replace(p, y=7) == Point(1, 7, ("a",))
    assert dataclasses.asdict(p) == {"x": 1, "y": 2, "tags": ("a",)}
    b, c = Box(), Box()
    b.items.append(1)
    assert c.items == [] and Box([1]) == b and Box.__hash__ is None
    with pytest.raises(TypeError):
        Point()  # type: ignore[call-arg]


def test_classes_are_standard_dataclasses_with_and_without_the_cache(cache_file):
    check_behaves_as_the_standard_dataclass(*define())
    assert records._new and not cache_file.exists()
    records.flush()
    assert cache_file.exists() and not records._new
    records._cache = None  # another process: reads the file
    check_behaves_as_the_standard_dataclass(*define())
    assert not records._new  # every method text was found compiled
    assert "exec" not in vars(dataclasses)  # the hook is only in place while a class is made


def test_flush_merges_with_what_other_processes_wrote(cache_file):
    define()
    records.flush()
    mine = len(marshal.loads(cache_file.read_bytes())[1])
    records._cache = {}
    records._new = {"def other(): pass": marshal.dumps(compile("def other(): pass", "<string>", "exec"))}
    records.flush()
    theirs = marshal.loads(cache_file.read_bytes())[1]
    assert len(theirs) == mine + 1 and "def other(): pass" in theirs


@pytest.mark.parametrize("content", [b"", b"garbage", marshal.dumps({"x": 1}),
                                     marshal.dumps((b"\0\0\0\0", {})),
                                     marshal.dumps((records.MAGIC_NUMBER, {"def f(): pass": 3}))])
def test_a_bad_cache_file_is_ignored_and_replaced(cache_file, content):
    cache_file.parent.mkdir()
    cache_file.write_bytes(content)
    check_behaves_as_the_standard_dataclass(*define())
    records.flush()
    magic, entries = marshal.loads(cache_file.read_bytes())
    assert magic == records.MAGIC_NUMBER and entries
    assert all(isinstance(marshal.loads(v), type(define.__code__)) for v in entries.values())


def test_a_corrupt_entry_is_compiled_again(cache_file):
    define()
    records.flush()
    magic, entries = marshal.loads(cache_file.read_bytes())
    cache_file.write_bytes(marshal.dumps((magic, {k: b"junk" for k in entries})))
    records._cache = None
    check_behaves_as_the_standard_dataclass(*define())
    assert set(records._new) == set(entries)


def test_nothing_written_without_bytecode_or_where_it_cannot_be(cache_file, monkeypatch):
    define()
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    records.flush()
    assert not cache_file.exists()
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    cache_file.parent.mkdir()
    cache_file.parent.chmod(0o500)
    try:
        if os.access(cache_file.parent, os.W_OK):
            pytest.skip("root writes anywhere")
        records.flush()  # no error, no file
        assert not cache_file.exists() and os.listdir(cache_file.parent) == []
    finally:
        cache_file.parent.chmod(0o700)


def test_a_second_process_compiles_no_dataclass_method(tmp_path):
    """Each `hloc` process after the first finds every method of the compiler's classes
    compiled (the real cache file, beside hloc's bytecode)."""
    code = ("import hloc.compiler, hloc.plan, hloc.bundle.assemble, hloc.codegen.cpu.compile; "
            "from hloc.util import records; print(len(records._new), len(records._used))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if not os.access(os.path.dirname(records.cache_path()), os.W_OK):
        pytest.skip("hloc's __pycache__ is not writable here")
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, check=True).stdout.split() for _ in range(2)]
    new, used = map(int, runs[1])
    assert new == 0 and used > 300
