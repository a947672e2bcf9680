"""Writing bundles: deterministic bytes, atomic replacement of the target file.

`write_bundle(path, manifest=..., members=...)`:

- `manifest` is the manifest without `members` (the writer computes each member's sha256 and
  size) and optionally without `format_version` / `hloc_version` (filled with this format
  version and this hloc's version). It must otherwise be valid (strict check: unknown keys are
  an error), else ValueError -- a bug in the caller, not bad user input.
- `members` maps member name -> bytes-like, or an iterable of bytes-like chunks (streamed, so
  large artifacts need not be joined in memory). `module.pb` is required.
- The file is written to a temporary file in the target's directory, fsynced, and moved over
  the target with os.replace. On any error the temporary file is removed and the target is
  left as it was; the error propagates (an OSError from the file system becomes InputError
  naming the path, e.g. a missing output directory).

Returns the manifest exactly as stored in the bundle.
"""

from __future__ import annotations

import copy
import hashlib
import os
import struct
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import BinaryIO

from .. import __version__
from ..util.safe_write import forget_temp
from .format import (
    DIGEST_OFFSET,
    DIGEST_SIZE,
    FORMAT_VERSION,
    HEADER_SIZE,
    MANIFEST_NAME,
    REQUIRED_MEMBERS,
    SIGNED_FORMAT_VERSION,
    ZIP_CREATE_SYSTEM,
    ZIP_DATE_TIME,
    ZIP_EXTERNAL_ATTR,
    Header,
    canonical_json,
    member_name_problem,
    version_text,
)
from .manifest import manifest_problem

_LOCAL_HEADER_SIZE = 30  # fixed part of a zip local file header

MemberData = bytes | bytearray | memoryview | Iterable[bytes]


def write_bundle(path: str | os.PathLike, *, manifest: dict,
                 members: Mapping[str, MemberData], sign_key=None) -> dict:
    """Write a bundle atomically; returns the stored manifest (see the module docstring).
    `sign_key` (a signing.Key) makes it a signed format 1.1 bundle (see signing.py)."""
    _check_member_names(members)
    target = Path(path)
    tmp_path, fd = _open_temp(target)
    try:
        with os.fdopen(fd, "w+b") as f:
            stored = _write_image(f, manifest, members, sign_key)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_path, target)
    except BaseException:
        forget_temp(str(tmp_path), remove=True)
        raise
    forget_temp(str(tmp_path), remove=False)
    _fsync_dir(target.parent)
    return stored


def _check_member_names(members: Mapping[str, MemberData]) -> None:
    for name in members:
        if problem := member_name_problem(name):
            raise ValueError(problem)
        if name == MANIFEST_NAME:
            raise ValueError("manifest.json is written by write_bundle; pass manifest=")
    missing = [n for n in REQUIRED_MEMBERS if n != MANIFEST_NAME and n not in members]
    if missing:
        raise ValueError(f"a bundle needs member(s) {', '.join(missing)}")


def _open_temp(target: Path) -> tuple[Path, int]:
    """Create a fresh temporary file next to the target (mode 0666 minus the umask):
    exclusive, never through a symlink, removed on SIGTERM (util/safe_write.py)."""
    from ..util.safe_write import check_output_path, open_exclusive_temp

    check_output_path(str(target))
    tmp, fd = open_exclusive_temp(str(target), "cannot write bundle")
    return Path(tmp), fd


def _write_image(f: BinaryIO, manifest: dict, members: Mapping[str, MemberData],
                 sign_key=None) -> dict:
    """Header placeholder, zip (members sorted, manifest last), then the real header."""
    # Signed bundles are 1.1 (a longer header holds the signature); unsigned ones stay 1.0,
    # byte for byte as before.
    version, header_size = FORMAT_VERSION, HEADER_SIZE
    if sign_key is not None:
        from .signing import SIGNED_HEADER_SIZE  # only here: a compile rarely signs

        version, header_size = SIGNED_FORMAT_VERSION, SIGNED_HEADER_SIZE
    f.write(bytes(header_size))
    listing: dict[str, dict] = {}
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name in sorted(members):
            listing[name] = _write_member(zf, name, members[name])
        stored = _final_manifest(manifest, listing, version)
        manifest_bytes = canonical_json(stored)
        manifest_info = _zip_info(MANIFEST_NAME)
        zf.writestr(manifest_info, manifest_bytes)
    file_length = f.tell()
    manifest_offset = _data_offset(f, manifest_info.header_offset)
    header = Header(*version, header_size, manifest_offset, len(manifest_bytes), file_length)
    f.seek(0)
    f.write(header.pack())
    if sign_key is not None:
        _sign(f, sign_key, file_length)
    digest = _digest_of_file(f, file_length)
    f.seek(0)
    f.write(Header(*version, header_size, manifest_offset, len(manifest_bytes),
                   file_length, digest).pack())
    return stored


def _sign(f: BinaryIO, key, length: int) -> None:
    """Write the signature block: first with a zero tag (the signing digest covers the block's
    algorithm and key id), then with the tag over that digest."""
    from .signing import sign_block, unsigned_block

    f.seek(HEADER_SIZE)
    f.write(unsigned_block(key))
    block = sign_block(key, _digest_of_file(f, length))
    f.seek(HEADER_SIZE)
    f.write(block)


def _zip_info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=ZIP_DATE_TIME)
    info.compress_type = zipfile.ZIP_STORED
    info.external_attr = ZIP_EXTERNAL_ATTR
    info.create_system = ZIP_CREATE_SYSTEM
    return info


def _write_member(zf: zipfile.ZipFile, name: str, data: MemberData) -> dict:
    """Stream one member into the zip, hashing as it goes."""
    h = hashlib.sha256()
    size = 0
    info = _zip_info(name)
    if isinstance(data, bytes | bytearray | memoryview):
        chunks: Iterable = (data,)
        info.file_size = len(data)  # lets zipfile pick zip64 for members over 2 GiB
    else:
        chunks = data  # streamed members are limited to 2 GiB (zipfile's rule without zip64)
    with zf.open(info, "w") as out:
        for chunk in chunks:
            if not isinstance(chunk, bytes | bytearray | memoryview):
                raise TypeError(f"member {name}: chunks must be bytes, got {type(chunk).__name__}")
            h.update(chunk)
            out.write(chunk)
            size += len(chunk)
    return {"sha256": h.hexdigest(), "size": size}


def _final_manifest(manifest: dict, listing: dict[str, dict],
                    version: tuple[int, int] = FORMAT_VERSION) -> dict:
    stored = copy.deepcopy(manifest)
    stored["format_version"] = version_text(version)
    stored.setdefault("hloc_version", __version__)
    stored["members"] = listing
    if problem := manifest_problem(stored, strict=True):
        raise ValueError(f"invalid bundle manifest: {problem}")
    return stored


def _data_offset(f: BinaryIO, header_offset: int) -> int:
    """Where a member's bytes start: after its local header, name and extra field."""
    f.seek(header_offset)
    local = f.read(_LOCAL_HEADER_SIZE)
    name_length, extra_length = struct.unpack_from("<HH", local, 26)
    return header_offset + _LOCAL_HEADER_SIZE + name_length + extra_length


def _digest_of_file(f: BinaryIO, length: int) -> bytes:
    """file_digest of the image in f, read in chunks (bundles may be large)."""
    f.seek(0)
    h = hashlib.sha256()
    h.update(f.read(DIGEST_OFFSET))
    h.update(bytes(DIGEST_SIZE))
    f.seek(DIGEST_OFFSET + DIGEST_SIZE)
    while chunk := f.read(1 << 20):
        h.update(chunk)
    return h.digest()


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable; some file systems refuse directory fsync, which is harmless."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
