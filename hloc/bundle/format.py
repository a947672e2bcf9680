"""The byte layout of an hloc bundle (format 1.x) and the helpers both writer and reader use.

A bundle is one file::

    offset  size  field (all integers little-endian)
    0       8     magic b"HLOCBNDL"
    8       2     format major (u16)
    10      2     format minor (u16)
    12      4     header length in bytes (u32; 72 in 1.0, later minors may grow it)
    16      8     offset of manifest.json's bytes in the file (u64)
    24      8     length of manifest.json (u64)
    32      8     total file length (u64), so truncation is named as such
    40      32    sha256 digest (see below)
    72      ...   a zip archive

The digest is the sha256 of the whole file with the 32 digest bytes replaced by zeros, so a
flipped byte anywhere (header fields included) is caught. The zip's offsets are absolute file
offsets (it was written after the header), which makes the file a zip with a prefix, like a
self-extracting archive: `unzip -l`, `zipinfo` and Python's `zipfile` read it as is.

Zip conventions (so the same inputs give a byte-identical file): every member is stored
uncompressed (no zlib version differences; members can be sliced out without copying), dated
1980-01-01 00:00:00, mode 0644, unix "made by"; members appear sorted by name with
`manifest.json` last (it records every other member's sha256 and size, so it is written once
they are known). Member names are relative POSIX paths of `[A-Za-z0-9_][A-Za-z0-9._+-]*`
components, so `hloc inspect --extract` can never write outside its directory.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct

from ..util.record import dataclass

MAGIC = b"HLOCBNDL"
FORMAT_VERSION: tuple[int, int] = (1, 1)  # 1.1: manifest compiler.cache_key
SIGNED_FORMAT_VERSION: tuple[int, int] = (1, 2)  # 1.2: 1.1 + a signature block in the header
MANIFEST_NAME = "manifest.json"
MODULE_NAME = "module.pb"
REQUIRED_MEMBERS = (MANIFEST_NAME, MODULE_NAME)

_HEADER = struct.Struct("<8sHHIQQQ32s")
HEADER_SIZE = _HEADER.size  # 72
DIGEST_OFFSET = 40
DIGEST_SIZE = 32
_ZERO_DIGEST = bytes(DIGEST_SIZE)

# Fixed zip metadata: the DOS epoch, -rw-r--r--, "made by" unix.
ZIP_DATE_TIME = (1980, 1, 1, 0, 0, 0)
ZIP_EXTERNAL_ATTR = 0o100644 << 16
ZIP_CREATE_SYSTEM = 3

_MEMBER_COMPONENT = r"[A-Za-z0-9_][A-Za-z0-9._+-]*"
MEMBER_NAME_RE = re.compile(rf"^{_MEMBER_COMPONENT}(/{_MEMBER_COMPONENT})*$")
MAX_MEMBER_NAME = 255


@dataclass(frozen=True)
class Header:
    """The fixed header at the start of every bundle."""

    major: int
    minor: int
    header_length: int
    manifest_offset: int
    manifest_length: int
    file_length: int
    digest: bytes = _ZERO_DIGEST

    def pack(self) -> bytes:
        return _HEADER.pack(MAGIC, self.major, self.minor, self.header_length,
                            self.manifest_offset, self.manifest_length, self.file_length,
                            self.digest)

    @staticmethod
    def unpack(data: bytes | memoryview) -> Header:
        """Decode the first HEADER_SIZE bytes (the caller has checked length and magic)."""
        fields = _HEADER.unpack_from(data, 0)
        return Header(*fields[1:])

    @property
    def version_text(self) -> str:
        return f"{self.major}.{self.minor}"


def file_digest(data: bytes | memoryview) -> bytes:
    """sha256 of a whole bundle image with its digest field read as zeros."""
    view = memoryview(data)
    h = hashlib.sha256()
    h.update(view[:DIGEST_OFFSET])
    h.update(_ZERO_DIGEST)
    h.update(view[DIGEST_OFFSET + DIGEST_SIZE:])
    return h.digest()


def member_name_problem(name: object) -> str | None:
    """Why `name` cannot be a bundle member name, or None if it can."""
    if not isinstance(name, str):
        return f"member name {name!r} is not a string"
    if len(name) > MAX_MEMBER_NAME:
        return f"member name {name[:40]!r}... is longer than {MAX_MEMBER_NAME} characters"
    if not MEMBER_NAME_RE.match(name):
        return (f"member name {name!r} is not a relative path of "
                "[A-Za-z0-9_][A-Za-z0-9._+-]* components")
    return None


def canonical_json(obj: object) -> bytes:
    """The one byte encoding of a JSON value: sorted keys, no spaces, ASCII, final newline."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)
    return (text + "\n").encode("ascii")


def sha256_hex(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def version_text(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"
