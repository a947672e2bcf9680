"""Every way a bundle can be bad gives one InputError line naming the file."""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import zipfile

import pytest

from hloc.bundle import read_bundle, reader, write_bundle, writer
from hloc.errors import InputError

pytestmark = pytest.mark.pure

HEADER = struct.Struct("<8sHHIQQQ32s")  # restated from the format description, independently

MANIFEST = {
    "format_version": "1.0",
    "hloc_version": "9.9.9",
    "target": {"kind": "cpu"},
    "entry": {"name": "main",
              "parameters": [{"name": "x", "index": 0, "dtype": "f32", "shape": [2],
                              "layout": [0]}],
              "results": [{"index": 0, "dtype": "f32", "shape": [2], "layout": [0]}],
              "result_is_tuple": False},
    "compiler": {"version": "9.9.9", "flags": [], "passes": []},
    "input": {"sha256": "ab" * 32, "form": "text"},
}
MEMBERS = {"module.pb": b"\x0a\x03abc" * 20, "module.hlo": b"HloModule m\n"}


def members_section(members: dict[str, bytes]) -> dict:
    return {n: {"sha256": hashlib.sha256(d).hexdigest(), "size": len(d)}
            for n, d in members.items()}


def build_image(manifest: dict | bytes | None, members: list[tuple[str, bytes]], *,
                version=(1, 0), compress_type=zipfile.ZIP_STORED, manifest_offset=None,
                fix_digest=True) -> bytes:
    """A bundle image built by hand (struct + zipfile), for cases the writer refuses to make."""
    buf = io.BytesIO()
    buf.write(bytes(HEADER.size))
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members:
            zf.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data,
                        compress_type=compress_type)
        if manifest is not None:
            data = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
            info = zipfile.ZipInfo("manifest.json", (1980, 1, 1, 0, 0, 0))
            zf.writestr(info, data)
            offset = info.header_offset + 30 + len("manifest.json")
            length = len(data)
        else:
            offset = length = 0
    image = bytearray(buf.getvalue())
    offset = offset if manifest_offset is None else manifest_offset
    HEADER.pack_into(image, 0, b"HLOCBNDL", *version, HEADER.size, offset, length, len(image),
                     bytes(32))
    if fix_digest:
        image[40:72] = hashlib.sha256(bytes(image)).digest()
    return bytes(image)


def refresh_digest(image: bytes) -> bytes:
    out = bytearray(image)
    out[40:72] = bytes(32)
    out[40:72] = hashlib.sha256(bytes(out)).digest()
    return bytes(out)


def good_manifest(members=MEMBERS, **changes) -> dict:
    m = json.loads(json.dumps(MANIFEST))
    m["members"] = members_section(members)
    m.update(changes)
    return m


def expect_error(tmp_path, data: bytes, fragment: str, **kwargs) -> str:
    path = tmp_path / "bad.bundle"
    path.write_bytes(data)
    with pytest.raises(InputError) as info:
        read_bundle(path, **kwargs)
    message = str(info.value)
    assert fragment in message, message
    assert message.startswith(f"{path}: ") and "\n" not in message
    assert info.value.path == str(path)
    return message


@pytest.fixture
def good(tmp_path) -> bytes:
    path = tmp_path / "good.bundle"
    # Written by this hloc (the writer fills in format_version and hloc_version).
    manifest = {k: v for k, v in MANIFEST.items() if k not in ("format_version", "hloc_version")}
    write_bundle(path, manifest=manifest, members=MEMBERS)
    return path.read_bytes()


def test_hand_built_image_is_accepted(tmp_path):
    """The test's own builder makes valid bundles, so the failures below are the edits'."""
    path = tmp_path / "ok.bundle"
    path.write_bytes(build_image(good_manifest(), list(MEMBERS.items())))
    assert dict(read_bundle(path).members) == MEMBERS


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_bundle(tmp_path / "absent.bundle")


def test_directory(tmp_path):
    with pytest.raises(InputError, match="is a directory"):
        read_bundle(tmp_path)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads anything")
def test_unreadable_file(tmp_path, good):
    path = tmp_path / "locked.bundle"
    path.write_bytes(good)
    path.chmod(0)
    with pytest.raises(InputError, match="cannot read bundle"):
        read_bundle(path)


@pytest.mark.parametrize("data,fragment", [
    (b"", "empty file"),
    (b"HLOC", "truncated (4 bytes"),
    (b"PK\x03\x04 a zip, not a bundle", "not an hloc bundle (bad magic)"),
    (b"HloModule m\nENTRY main {}", "not an hloc bundle (bad magic)"),
    (b"hlocbndl" + bytes(100), "not an hloc bundle (bad magic)"),
])
def test_not_a_bundle(tmp_path, data, fragment):
    expect_error(tmp_path, data, fragment)


def test_truncated_at_several_points(tmp_path, good):
    for cut in (8, 40, 71):
        expect_error(tmp_path, good[:cut], "not an hloc bundle or truncated")
    for cut in (72, 100, len(good) // 2, len(good) - 22, len(good) - 1):
        expect_error(tmp_path, good[:cut], f"bundle is corrupted: truncated ({cut} of")


def test_trailing_data(tmp_path, good):
    expect_error(tmp_path, good + b"\0", "1 bytes of trailing data")


def _region(offset: int) -> str:
    if offset < 8:
        return "not an hloc bundle (bad magic)"
    if offset < 10:  # a major the writer (this hloc) cannot have written
        return "bundle is corrupted: header claims format"
    if 32 <= offset < 40:
        return "bundle is corrupted: "
    return "bundle is corrupted: checksum mismatch"


def test_flipped_byte_anywhere_is_caught(tmp_path, good):
    """Every byte: magic, version, header fields, digest, zip headers, members, manifest."""
    path = tmp_path / "flipped.bundle"
    wrong = []
    for offset in range(len(good)):
        data = bytearray(good)
        data[offset] ^= 0xFF
        path.write_bytes(data)
        try:
            read_bundle(path)
            wrong.append((offset, "accepted"))
        except InputError as e:
            if _region(offset) not in str(e):
                wrong.append((offset, str(e)))
    assert not wrong, wrong[:5]


def test_newer_major_names_the_hloc_to_upgrade_to(tmp_path):
    data = build_image(good_manifest(format_version="1.0", hloc_version="3.1.0"),
                       list(MEMBERS.items()), version=(2, 0))
    message = expect_error(tmp_path, data, "bundle format 2.0 is newer than this hloc")
    assert message.endswith("(reads 1.x); upgrade hloc to >= 3.1.0")


def test_newer_major_from_an_older_hloc_is_corruption(tmp_path):
    data = build_image(good_manifest(hloc_version="0.0.1"), list(MEMBERS.items()),
                       version=(2, 0))
    expect_error(tmp_path, data, "bundle is corrupted: header claims format 2.0 but hloc "
                                 "0.0.1 wrote it")


def test_newer_major_with_unreadable_manifest(tmp_path):
    data = build_image(b"\x00binary manifest of the future", list(MEMBERS.items()),
                       version=(7, 2))
    message = expect_error(tmp_path, data, "bundle format 7.2 is newer")
    assert message.endswith("upgrade hloc")


def test_older_major_is_refused(tmp_path):
    data = build_image(good_manifest(), list(MEMBERS.items()), version=(0, 9))
    expect_error(tmp_path, data, "bundle format 0.9 is older than this hloc supports")


def test_older_minor_is_read(tmp_path, good, monkeypatch):
    monkeypatch.setattr(reader, "FORMAT_VERSION", (1, 3))  # a future reader of 1.3
    path = tmp_path / "old.bundle"
    path.write_bytes(good)
    bundle = read_bundle(path)
    assert bundle.format_version == writer.FORMAT_VERSION < (1, 3)
    assert dict(bundle.members) == MEMBERS


def test_newer_minor_is_read_ignoring_new_keys(tmp_path, monkeypatch):
    manifest = good_manifest(format_version="1.4")
    manifest["added_in_1_4"] = {"whatever": [1, 2]}
    path = tmp_path / "new.bundle"
    path.write_bytes(build_image(manifest, list(MEMBERS.items()), version=(1, 4)))
    bundle = read_bundle(path)
    assert bundle.format_version == (1, 4)
    assert bundle.manifest["added_in_1_4"] == {"whatever": [1, 2]}


def test_writer_of_a_newer_minor(tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "FORMAT_VERSION", (1, 2))
    path = tmp_path / "m.bundle"
    stored = write_bundle(path, manifest={k: v for k, v in MANIFEST.items()
                                          if k != "format_version"}, members=MEMBERS)
    assert stored["format_version"] == "1.2"
    assert read_bundle(path).format_version == (1, 2)


def test_tampered_member_with_fixed_header_hash(tmp_path, good):
    at = good.index(MEMBERS["module.pb"])
    data = bytearray(good)
    data[at + 5] ^= 0x01
    expect_error(tmp_path, refresh_digest(bytes(data)), "member module.pb is corrupted")


def test_tampered_manifest_with_fixed_header_hash(tmp_path, good):
    # Same length, different content: the manifest's recorded member size no longer fits.
    old = f'"size":{len(MEMBERS["module.hlo"])}'.encode()
    new = f'"size":{len(MEMBERS["module.hlo"]) + 1}'.encode()
    assert good.count(old) == 1 and len(old) == len(new)
    expect_error(tmp_path, refresh_digest(good.replace(old, new)), "member module.hlo is corrupted")


def _drop_hlo(c):
    c["members"] = [("module.pb", MEMBERS["module.pb"])]


def _only_hlo(c):
    c["members"] = [("module.hlo", MEMBERS["module.hlo"])]
    c["manifest"] = good_manifest(dict(c["members"]))


def _nan_manifest(c):
    text = json.dumps(c["manifest"]).replace('"hloc_version": "9.9.9"', '"hloc_version": NaN')
    c["manifest"] = text.encode()


# case -> (edit of the build_image arguments, expected message fragment)
BAD_CONTENTS = {
    "listed member missing": (_drop_hlo, "bundle is corrupted: member module.hlo is missing"),
    "unlisted member": (lambda c: c["members"].append(("extra.bin", b"x")),
                        "member extra.bin is not in the manifest"),
    "no module.pb": (_only_hlo, "required member module.pb is missing"),
    "no manifest": (lambda c: c.update(manifest=None), "required member manifest.json is missing"),
    "invalid json": (lambda c: c.update(manifest=b'{"format_version": "1.0",'),
                     "manifest.json is not valid JSON"),
    "nan in json": (_nan_manifest, "manifest.json is not valid JSON"),
    "json not an object": (lambda c: c.update(manifest=b"[1, 2]"),
                           "manifest.json is invalid: manifest: expected an object"),
    "schema invalid": (lambda c: c["manifest"]["target"].update(kind="tpu"),
                       "manifest.json is invalid: manifest.target.kind: 'tpu' is not one of"),
    "missing section": (lambda c: c["manifest"].pop("entry"),
                        "manifest.json is invalid: manifest: missing key 'entry'"),
    "version disagrees": (lambda c: c["manifest"].update(format_version="1.1"),
                          "manifest format_version 1.1 but header 1.0"),
    "compressed member": (lambda c: c.update(compress_type=zipfile.ZIP_DEFLATED),
                          "module.pb is compressed or encrypted"),
    "unsafe name": (lambda c: c["members"].append(("../evil", b"x")),
                    "'../evil' is not a relative path"),
    "duplicate member": (lambda c: c["members"].append(("module.pb", MEMBERS["module.pb"])),
                         "member module.pb appears twice"),
    "manifest offset": (lambda c: c.update(manifest_offset=80),
                        "manifest.json is not where the header says"),
}


@pytest.mark.filterwarnings("ignore:Duplicate name")
@pytest.mark.parametrize("case", list(BAD_CONTENTS))
def test_bad_contents(tmp_path, case):
    edit, fragment = BAD_CONTENTS[case]
    args = {"manifest": good_manifest(), "members": list(MEMBERS.items())}
    edit(args)
    expect_error(tmp_path, build_image(**args), fragment)


def test_not_a_zip_after_the_header(tmp_path):
    image = bytearray(HEADER.size) + b"no zip here at all" * 4
    HEADER.pack_into(image, 0, b"HLOCBNDL", 1, 0, HEADER.size, 0, 0, len(image), bytes(32))
    expect_error(tmp_path, refresh_digest(bytes(image)), "bundle is corrupted: bad zip archive")


def test_wrong_target(tmp_path, good):
    expect_error(tmp_path, good, "bundle was compiled for target cpu, not cuda",
                 expected_target="cuda")
