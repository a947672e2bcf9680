"""The frontend: the five MODEL forms <-> hloc.ir.Module (the only user of the protobuf classes)."""

from .literal_proto import (
    literal_from_bytes,
    literal_from_proto,
    literal_to_bytes,
    literal_to_proto,
)
from .load import (
    FORMS,
    LoadedModel,
    load,
    load_bytes,
    make_hlo_proto,
    make_snapshot,
    save,
    to_hlo_proto_bytes,
    write_atomically,
)
from .proto_export import module_to_proto
from .proto_import import module_from_proto

__all__ = [
    "FORMS",
    "LoadedModel",
    "literal_from_bytes",
    "literal_from_proto",
    "literal_to_bytes",
    "literal_to_proto",
    "load",
    "load_bytes",
    "make_hlo_proto",
    "make_snapshot",
    "module_from_proto",
    "module_to_proto",
    "save",
    "to_hlo_proto_bytes",
    "write_atomically",
]
