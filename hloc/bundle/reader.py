"""Reading bundles: every check runs before any byte of the bundle is used.

`read_bundle(path, expected_target=None) -> Bundle` checks, in this order, and raises
InputError (path = the bundle, one-line message) at the first failure:

 1. the file exists and can be read;
 2. magic: "not an hloc bundle (bad magic)" (an empty or shorter-than-header file says so);
 3. format version: a newer major is refused with the hloc version to upgrade to (taken, best
    effort, from the bundle's own manifest); an older major is refused; any 1.x minor is read;
 4. length against the header ("bundle is corrupted: truncated ...") and the sha256 of the
    whole image ("bundle is corrupted: checksum mismatch");
 5. the zip archive (structure, stored-only, safe unique member names);
 6. manifest.json: valid JSON object, valid manifest (lenient: unknown keys are ignored), its
    format_version equal to the header's, and at the offset the header records;
 7. each member's size and sha256 against the manifest ("member X is corrupted"); members
    missing from the zip or unlisted in the manifest, required members (module.pb);
 8. if expected_target is given, the manifest's target kind.

Member bytes are sliced out of the one in-memory image (members are stored uncompressed), so
reading costs one copy of the file. Nothing is unpickled or evaluated.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from .. import __version__
from ..errors import InputError
from ..util.record import dataclass
from .format import (
    FORMAT_VERSION,
    HEADER_SIZE,
    MAGIC,
    MANIFEST_NAME,
    REQUIRED_MEMBERS,
    Header,
    file_digest,
    member_name_problem,
    sha256_hex,
)
from .manifest import manifest_problem

_LOCAL_MAGIC = b"PK\x03\x04"


class BundleMembers(Mapping[str, bytes]):
    """Read-only name -> bytes view of a bundle's members (manifest.json excluded)."""

    def __init__(self, image: memoryview, spans: dict[str, tuple[int, int]]):
        self._image = image
        self._spans = spans

    def __getitem__(self, name: str) -> bytes:
        start, size = self._spans[name]
        return bytes(self._image[start:start + size])

    def view(self, name: str) -> memoryview:
        """The member's bytes without a copy."""
        start, size = self._spans[name]
        return self._image[start:start + size]

    def size(self, name: str) -> int:
        return self._spans[name][1]

    @property
    def image(self) -> memoryview:
        """The whole checked bundle file (for the signature check, signing.py)."""
        return self._image

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._spans))

    def __len__(self) -> int:
        return len(self._spans)


@dataclass(frozen=True)
class Bundle:
    """A checked bundle: its manifest, members and (major, minor) format version."""

    path: str
    manifest: dict
    members: BundleMembers
    format_version: tuple[int, int]

    @property
    def target_kind(self) -> str:
        return self.manifest["target"]["kind"]

    @property
    def module_proto(self) -> bytes:
        return self.members["module.pb"]


def read_bundle(path: str | os.PathLike, *, expected_target: str | None = None) -> Bundle:
    """Open and check a bundle (see the module docstring for the checks and messages)."""
    name = str(path)
    image = memoryview(_read_file(name))
    header = _check_header(name, image)
    spans = _check_zip(name, image)
    manifest = _check_manifest(name, image, header, spans)
    _check_members(name, image, manifest, spans)
    if expected_target is not None and manifest["target"]["kind"] != expected_target:
        raise InputError(f"bundle was compiled for target {manifest['target']['kind']}, "
                         f"not {expected_target}", path=name)
    spans.pop(MANIFEST_NAME)
    return Bundle(name, manifest, BundleMembers(image, spans), (header.major, header.minor))


def _fail(path: str, message: str) -> InputError:
    return InputError(message, path=path)


def _read_file(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise _fail(path, "no such file") from None
    except IsADirectoryError:
        raise _fail(path, "is a directory, not a bundle") from None
    except OSError as e:
        raise _fail(path, f"cannot read bundle: {e.strerror or e}") from None


def _check_header(path: str, image: memoryview) -> Header:
    n = min(len(image), len(MAGIC))
    if image[:n] != MAGIC[:n]:
        raise _fail(path, "not an hloc bundle (bad magic)")
    if len(image) < HEADER_SIZE:
        what = "empty file" if not image else f"{len(image)} bytes"
        raise _fail(path, f"not an hloc bundle or truncated ({what}; the header is "
                          f"{HEADER_SIZE} bytes)")
    header = Header.unpack(image)
    _check_version(path, image, header)
    if len(image) < header.file_length:
        raise _fail(path, f"bundle is corrupted: truncated ({len(image)} of "
                          f"{header.file_length} bytes)")
    if len(image) > header.file_length:
        raise _fail(path, f"bundle is corrupted: {len(image) - header.file_length} bytes of "
                          "trailing data")
    if file_digest(image) != header.digest:
        raise _fail(path, "bundle is corrupted: checksum mismatch")
    if header.header_length < HEADER_SIZE or header.header_length > len(image):
        raise _fail(path, f"bundle is corrupted: bad header length {header.header_length}")
    return header


def _check_version(path: str, image: memoryview, header: Header) -> None:
    major, minor = FORMAT_VERSION
    if header.major > major:
        writer = _writer_version(image, header)
        if writer and _version_key(writer) <= _version_key(__version__):
            # An hloc no newer than this one cannot have written a newer format.
            raise _fail(path, f"bundle is corrupted: header claims format "
                              f"{header.version_text} but hloc {writer} wrote it")
        advice = f"upgrade hloc to >= {writer}" if writer else "upgrade hloc"
        raise _fail(path, f"bundle format {header.version_text} is newer than this hloc "
                          f"(reads {major}.x); {advice}")
    if header.major < major:
        raise _fail(path, f"bundle format {header.version_text} is older than this hloc "
                          f"supports (reads {major}.x); recompile the model")


def _version_key(version: str) -> tuple[int, ...]:
    """(0, 1, 0) for "0.1.0"; pre-release suffixes are ignored ("0.2.0rc1" -> (0, 2, 0))."""
    return tuple(int(re.match(r"\d*", part).group() or 0) for part in version.split("."))


def _writer_version(image: memoryview, header: Header) -> str | None:
    """Best effort: the hloc_version in a newer bundle's manifest (its layout is unknown)."""
    start, size = header.manifest_offset, header.manifest_length
    if size > 1 << 24 or start + size > len(image):
        return None
    try:
        version = json.loads(bytes(image[start:start + size])).get("hloc_version")
    except (ValueError, AttributeError):
        return None
    if isinstance(version, str) and version.replace(".", "").isalnum() and len(version) < 40:
        return version
    return None


def _check_zip(path: str, image: memoryview) -> dict[str, tuple[int, int]]:
    """name -> (data offset, size) for every member, after checking the archive."""
    try:
        with zipfile.ZipFile(_BytesReader(image)) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as e:
        raise _fail(path, f"bundle is corrupted: bad zip archive ({e})") from None
    spans: dict[str, tuple[int, int]] = {}
    for info in infos:
        if problem := _zip_member_problem(info, spans):
            raise _fail(path, f"bundle is corrupted: {problem}")
        start = _data_start(image, info)
        if start is None or start + info.file_size > len(image):
            raise _fail(path, f"bundle is corrupted: bad zip entry for {info.filename}")
        spans[info.filename] = (start, info.file_size)
    return spans


def _zip_member_problem(info: zipfile.ZipInfo, seen: Mapping[str, object]) -> str | None:
    if problem := member_name_problem(info.filename):
        return problem
    if info.filename in seen:
        return f"member {info.filename} appears twice"
    if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
        return f"member {info.filename} is compressed or encrypted (bundles store members)"
    if info.compress_size != info.file_size:
        return f"member {info.filename} has inconsistent sizes"
    return None


def _data_start(image: memoryview, info: zipfile.ZipInfo) -> int | None:
    at = info.header_offset
    local = image[at:at + 30]
    if len(local) < 30 or local[:4] != _LOCAL_MAGIC:
        return None
    name_length = int.from_bytes(local[26:28], "little")
    extra_length = int.from_bytes(local[28:30], "little")
    if bytes(image[at + 30:at + 30 + name_length]) != info.filename.encode():
        return None
    return at + 30 + name_length + extra_length


def _check_manifest(path: str, image: memoryview, header: Header,
                    spans: dict[str, tuple[int, int]]) -> dict:
    if MANIFEST_NAME not in spans:
        raise _fail(path, "bundle is corrupted: required member manifest.json is missing")
    start, size = spans[MANIFEST_NAME]
    if (start, size) != (header.manifest_offset, header.manifest_length):
        raise _fail(path, "bundle is corrupted: manifest.json is not where the header says")
    try:
        manifest = json.loads(bytes(image[start:start + size]), parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise _fail(path, f"manifest.json is not valid JSON ({e})") from None
    if problem := manifest_problem(manifest):
        raise _fail(path, f"manifest.json is invalid: {problem}")
    if manifest["format_version"] != header.version_text:
        raise _fail(path, f"bundle is corrupted: manifest format_version "
                          f"{manifest['format_version']} but header {header.version_text}")
    return manifest


def _no_constant(name: str):
    raise ValueError(f"{name} is not allowed")


def _check_members(path: str, image: memoryview, manifest: dict,
                   spans: dict[str, tuple[int, int]]) -> None:
    listed = manifest["members"]
    for name in sorted(listed):
        if name not in spans:
            raise _fail(path, f"bundle is corrupted: member {name} is missing")
        start, size = spans[name]
        entry = listed[name]
        if size != entry["size"] or sha256_hex(image[start:start + size]) != entry["sha256"]:
            raise _fail(path, f"member {name} is corrupted")
    for name in sorted(spans):
        if name != MANIFEST_NAME and name not in listed:
            raise _fail(path, f"bundle is corrupted: member {name} is not in the manifest")
    for name in REQUIRED_MEMBERS:
        if name not in spans:
            raise _fail(path, f"required member {name} is missing")


class _BytesReader:
    """A minimal seekable reader over a memoryview (io.BytesIO would copy the image)."""

    def __init__(self, data: memoryview):
        self._data = data
        self._pos = 0

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self._pos, len(self._data))[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        end = len(self._data) if n is None or n < 0 else min(len(self._data), self._pos + n)
        chunk = bytes(self._data[self._pos:end])
        self._pos = max(self._pos, end)
        return chunk
