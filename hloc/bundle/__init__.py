"""hloc bundles: one versioned, integrity-checked file holding a compiled module.

API::

    from hloc.bundle import write_bundle, read_bundle, entry_section, FORMAT_VERSION

    write_bundle("m.bundle", manifest={...}, members={"module.pb": pb, "module.hlo": text})
    b = read_bundle("m.bundle", expected_target="cpu")   # raises InputError on any problem
    b.manifest["entry"]["parameters"], b.members["module.pb"], b.format_version

Layout (details in `format.py`): 8-byte magic `HLOCBNDL`, a fixed little-endian header
(format version, header length, manifest offset/length, file length, sha256 of the image),
then a plain zip archive with absolute offsets, so `unzip -l m.bundle` lists the members:
`manifest.json` (canonical JSON, schema in `schemas/bundle-manifest.schema.json`),
`module.pb` (the optimized HloModuleProto), and optional artifacts such as `module.hlo`,
`buffer_assignment.pb`, `thunks.json`, `code/cpu.o`, `kernels.ptx`, `kernels.sm_90.cubin`.

Determinism: no timestamps, no absolute paths, fixed zip metadata, sorted members and
canonical JSON, so the same manifest and members always give the same bytes.

Version policy (FORMAT_VERSION = (major, minor)):

- The minor version grows for backward-compatible additions: new optional manifest keys, new
  optional members, a longer header (readers skip to `header length`). A reader accepts every
  minor of its major, older or newer, and ignores what it does not know.
- The major version grows for anything an older reader would misread (a changed header,
  digest, container or required-member meaning). Readers refuse other majors with one line:
  a newer major names the hloc version that wrote the bundle ("upgrade hloc to >= X"), an
  older major asks for a recompile.
- Every format change updates `FORMAT_VERSION`, the schema (both copies) and the golden
  digest in tests/test_bundle_format.py, which pins the exact bytes of a reference bundle.
"""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports
from .format import FORMAT_VERSION, MAGIC, MANIFEST_NAME, MODULE_NAME
from .manifest import INPUT_FORMS, TARGET_KINDS, entry_section, manifest_problem, schema_path

if TYPE_CHECKING:
    from .reader import Bundle, BundleMembers, read_bundle
    from .writer import write_bundle

# The reader and the writer are imported on first use (PEP 562): a compile only writes, a run
# only reads, and each costs the other a few ms at start.
_LAZY = {"Bundle": "reader", "BundleMembers": "reader", "read_bundle": "reader",
         "write_bundle": "writer"}


__getattr__ = lazy_exports(__name__, _LAZY, globals())


__all__ = [
    "FORMAT_VERSION",
    "INPUT_FORMS",
    "MAGIC",
    "MANIFEST_NAME",
    "MODULE_NAME",
    "TARGET_KINDS",
    "Bundle",
    "BundleMembers",
    "entry_section",
    "manifest_problem",
    "read_bundle",
    "schema_path",
    "write_bundle",
]
