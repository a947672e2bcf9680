"""Loading the five input forms (detected from content) and saving modules.

Detection, in order:
1. HLO text: the bytes decode as UTF-8, contain no control characters other than whitespace
   (every binary HLO proto has some: tags of fields 2 and 3 are 0x12 and 0x1a), and begin,
   after whitespace and // or /* */ comments, with "HloModule".
2. The protobuf forms. Their wire formats overlap (field 1 is a string in HloModuleProto and
   a message in the wrappers), so each candidate is parsed and must show the structure of a
   module where that form keeps it: at least one computation with an instruction that has an
   opcode and a shape. A wrapper's field 1 never has that structure when read as the wrong
   depth, which makes the forms exclusive:
   - HloModuleProto: the bytes themselves;
   - HloModuleProtoWithConfig: field 1 a module and field 2 a valid config;
   - HloProto: field 1 a module, no config (a message holding only field 1 is reported as
     HloProto: both wrappers read it the same way);
   - HloSnapshot: field 1 an HloProto whose field 1 is a module.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path

from google.protobuf.message import DecodeError, Message

from hloc.errors import InputError, UnsupportedError
from hloc.ir.limits import check_limits
from hloc.ir.literal import Literal
from hloc.ir.module import Module

from ..util.record import dataclass
from .devices_proto import apply_device_assignment
from .gen import hlo_pb2
from .literal_proto import literal_from_proto, literal_to_proto
from .proto_export import module_to_proto
from .proto_import import module_from_proto, program_shape_from_proto
from .shape_proto import MalformedProto, UnsupportedProto

FORMS = ("HloModuleProto", "HloProto", "HloSnapshot", "HloModuleProtoWithConfig", "text")


@dataclass(frozen=True)
class LoadedModel:
    """A loaded MODEL: the module, which form it came in, and a snapshot's inputs/result."""

    module: Module
    form: str
    arguments: tuple[Literal, ...] | None = None
    result: Literal | None = None


# ---- text -------------------------------------------------------------------------------------
_BINARY_CHARS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
_LEADING_JUNK = re.compile(r"(?:\s+|//[^\n]*(?:\n|$)|/\*.*?\*/)*", re.S)


def _as_hlo_text(data: bytes) -> str | None:
    """The text if `data` is HLO text, else None."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if _BINARY_CHARS.search(text):
        return None
    start = _LEADING_JUNK.match(text).end()
    return text if text.startswith("HloModule", start) else None


def _looks_like_text(data: bytes) -> bool:
    try:
        return not _BINARY_CHARS.search(data.decode("utf-8"))
    except UnicodeDecodeError:
        return False


# ---- protobuf forms -----------------------------------------------------------------------------
def _parse(cls, data: bytes):
    """Parse or None; protobuf raises DecodeError (and, for deep nesting, other errors)."""
    pb = cls()
    try:
        pb.ParseFromString(data)
    except (DecodeError, RecursionError, ValueError, RuntimeError):
        return None
    return pb


def _has_module_structure(pb: hlo_pb2.HloModuleProto) -> bool:
    return any(i.opcode and i.HasField("shape") for c in pb.computations for i in c.instructions)


def _detect_proto(data: bytes) -> tuple[str, Message] | None:
    """(form, parsed message) per the rules in the module docstring, or None."""
    module = _parse(hlo_pb2.HloModuleProto, data)
    if module is not None and _has_module_structure(module):
        return "HloModuleProto", module
    with_config = _parse(hlo_pb2.HloModuleProtoWithConfig, data)
    if with_config is not None and _has_module_structure(with_config.hlo_module):
        if with_config.HasField("config"):
            return "HloModuleProtoWithConfig", with_config
        hlo_proto = _parse(hlo_pb2.HloProto, data)
        if hlo_proto is not None:
            return "HloProto", hlo_proto
    snapshot = _parse(hlo_pb2.HloSnapshot, data)
    if snapshot is not None and _has_module_structure(snapshot.hlo.hlo_module):
        return "HloSnapshot", snapshot
    return None


def _why_not(data: bytes) -> str:
    if _looks_like_text(data):
        return "text that does not begin with 'HloModule'"
    if _parse(hlo_pb2.HloModuleProto, data) is None:
        return "not a valid protobuf message (random or truncated bytes?)"
    return "a protobuf message without HLO computations"


def _from_module_proto(pb, path) -> LoadedModel:
    return LoadedModel(module_from_proto(pb, path), "HloModuleProto")


def _from_hlo_proto(pb, path) -> LoadedModel:
    return LoadedModel(module_from_proto(pb.hlo_module, path), "HloProto")


def _from_with_config(pb, path) -> LoadedModel:
    module = module_from_proto(pb.hlo_module, path)
    _apply_config(pb.config, module, path)
    return LoadedModel(module, "HloModuleProtoWithConfig")


def _from_snapshot(pb, path) -> LoadedModel:
    module = module_from_proto(pb.hlo.hlo_module, path)
    try:
        arguments = tuple(literal_from_proto(a) for a in pb.arguments)
        result = literal_from_proto(pb.result) if pb.HasField("result") else None
    except MalformedProto as e:
        raise InputError(f"snapshot literal: {e}", path) from None
    except UnsupportedProto as e:
        raise UnsupportedError(f"snapshot literal: {e}", path) from None
    return LoadedModel(module, "HloSnapshot", arguments, result)


_BUILDERS = {
    "HloModuleProto": _from_module_proto,
    "HloProto": _from_hlo_proto,
    "HloModuleProtoWithConfig": _from_with_config,
    "HloSnapshot": _from_snapshot,
}


def _apply_config(config: hlo_pb2.HloModuleConfigProto, module: Module, path) -> None:
    """The HloModuleConfigProto fields hloc uses; 0 means unset in proto3."""
    module.config.replica_count = config.replica_count or module.config.replica_count
    module.config.num_partitions = config.num_partitions or module.config.num_partitions
    if config.HasField("static_device_assignment"):
        try:
            apply_device_assignment(config.static_device_assignment, module)
        except MalformedProto as e:
            raise InputError(f"config static_device_assignment: {e}", path) from None
    module.config.seed = config.seed
    module.config.launch_id = config.launch_id
    if config.HasField("entry_computation_layout"):
        try:
            module.config.entry_layout = program_shape_from_proto(config.entry_computation_layout)
        except MalformedProto as e:
            raise InputError(f"config entry_computation_layout: {e}", path) from None
        except UnsupportedProto as e:
            raise UnsupportedError(f"config entry_computation_layout: {e}", path) from None


def load_bytes(data: bytes, path: str | None = None) -> LoadedModel:
    """Load a MODEL from its bytes; InputError naming `path` if it is not a valid HLO module."""
    data = bytes(data)
    if not data:
        raise InputError("not an HLO module: the file is empty", path)
    text = _as_hlo_text(data)
    if text is not None:
        from hloc.ir.text.parser import parse_module  # the text parser is heavy; load it on demand

        model = LoadedModel(parse_module(text, path=path), "text")
    else:
        found = _detect_proto(data)
        if found is None:
            raise InputError(f"not an HLO module: {_why_not(data)}", path)
        form, message = found
        model = _BUILDERS[form](message, path)
    check_limits(model.module, path)
    return model


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError("no such file", path) from None
    except IsADirectoryError:
        raise InputError("is a directory, not an HLO module", path) from None
    except PermissionError:
        raise InputError("permission denied", path) from None
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", path) from None


def load(path: str | os.PathLike) -> LoadedModel:
    """Load a MODEL file in any of the five forms (see the module docstring)."""
    path = os.fspath(path)
    return load_bytes(_read(path), path)


# ---- writing ----------------------------------------------------------------------------------
def _serialize(message: Message) -> bytes:
    return message.SerializeToString(deterministic=True)


def to_hlo_proto_bytes(module: Module) -> bytes:
    """The module as serialized HloModuleProto bytes (deterministic)."""
    return _serialize(module_to_proto(module))


def make_hlo_proto(module: Module) -> bytes:
    """The module wrapped in an HloProto (what --xla_dump_hlo_as_proto writes), serialized."""
    pb = hlo_pb2.HloProto()
    pb.hlo_module.CopyFrom(module_to_proto(module))
    return _serialize(pb)


def make_snapshot(module: Module, args, result: Literal | None = None, platform: str = "") -> bytes:
    """A serialized HloSnapshot holding the module, its argument literals and its result."""
    pb = hlo_pb2.HloSnapshot(execution_platform=platform)
    pb.hlo.hlo_module.CopyFrom(module_to_proto(module))
    for arg in args:
        literal_to_proto(arg, pb.arguments.add())
    if result is not None:
        literal_to_proto(result, pb.result)
    return _serialize(pb)


def _module_text(module: Module) -> bytes:
    from hloc.ir.text.printer import print_module  # only needed when writing text

    return print_module(module).encode("utf-8")


_WRITERS = {"pb": to_hlo_proto_bytes, "hlo": _module_text}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomically(path: str | os.PathLike, data: bytes) -> None:
    """Write via a temporary file in the same directory + os.replace: no half-written files."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror or e}", path) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual permissions
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise InputError(f"cannot write: {e.strerror or e}", path) from None


def save(module: Module, path: str | os.PathLike, fmt: str = "pb") -> None:
    """Write a module as "pb" (HloModuleProto bytes) or "hlo" (HLO text), atomically."""
    writer = _WRITERS.get(fmt)
    if writer is None:
        raise InputError(f"unknown output format '{fmt}' (expected pb or hlo)", os.fspath(path))
    write_atomically(path, writer(module))
