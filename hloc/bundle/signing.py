"""Signed bundles: `hloc compile --sign-key FILE`, `hlo-run --trusted-key FILE`.

A bundle's sha256 digests are unkeyed: anyone who can write the file can recompute them. A
signature makes a bundle's origin checkable. A signed bundle is format 1.2: its header grows
by one signature block (readers of 1.0 skip to `header length`, so they still read it):

    offset  size  field
    72      4     b"SIG1"
    76      2     algorithm (u16): 1 = HMAC-SHA256, 2 = Ed25519
    78      2     reserved (0)
    80      32    key id: sha256 of the HMAC key (domain-separated) or of the raw Ed25519 public key
    112     64    tag: HMAC-SHA256 (32 bytes, zero padded) or the Ed25519 signature

The tag covers the *signing digest*: the header digest computed with both the digest field
and the tag zeroed, so it covers every byte of the bundle except itself. The header digest is
then computed as for any bundle, over the tag too. Both algorithms are deterministic: the same
key and input give the same bytes.

Keys: an HMAC key is any file of at least 16 bytes, used as is; an Ed25519 key is a PEM
private key (signing) or PEM public key (trusting), needing the optional `cryptography`
package. `HLOC_TRUSTED_KEYS` is a ':'-separated list of key files, added to --trusted-key.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from typing import Protocol, cast

from ..errors import InputError
from ..util.record import dataclass
from .format import DIGEST_OFFSET, DIGEST_SIZE, HEADER_SIZE

SIG_MAGIC = b"SIG1"
_BLOCK = struct.Struct("<4sHH32s64s")
SIG_BLOCK_SIZE = _BLOCK.size  # 104
SIGNED_HEADER_SIZE = HEADER_SIZE + SIG_BLOCK_SIZE
_TAG_OFFSET = HEADER_SIZE + 40
HMAC_SHA256, ED25519 = 1, 2
ALGORITHM_NAMES = {HMAC_SHA256: "hmac-sha256", ED25519: "ed25519"}
MIN_HMAC_KEY = 16


class SigningKey(Protocol):
    """What signing needs of a private key (cryptography's Ed25519PrivateKey)."""

    def sign(self, data: bytes) -> bytes: ...


class VerifyingKey(Protocol):
    """What verifying needs of a public key (cryptography's Ed25519PublicKey)."""

    def verify(self, signature: bytes, data: bytes) -> None: ...


@dataclass(frozen=True)
class Key:
    """A signing or trusted key: its algorithm, id, and the secret or public key object."""

    algorithm: int
    key_id: bytes
    secret: bytes | None = None  # HMAC key
    private: SigningKey | None = None  # Ed25519PrivateKey
    public: VerifyingKey | None = None  # Ed25519PublicKey

    @property
    def label(self) -> str:
        return f"{ALGORITHM_NAMES[self.algorithm]} key {self.key_id.hex()[:16]}"


@dataclass(frozen=True)
class Signature:
    """A bundle's signature block."""

    algorithm: int
    key_id: bytes
    tag: bytes

    @property
    def signer(self) -> str:
        return f"{ALGORITHM_NAMES.get(self.algorithm, '?')} key {self.key_id.hex()[:16]}"


def _hmac_key_id(secret: bytes) -> bytes:
    return hashlib.sha256(b"hloc-hmac-key-id\0" + secret).digest()


def load_key(path: str, *, signing: bool) -> Key:
    """The key in file `path` (PEM Ed25519, else raw HMAC bytes); InputError naming it."""
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 16)
    except OSError as e:
        raise InputError(f"cannot read key: {e.strerror or e}", path=path) from None
    if data.lstrip().startswith(b"-----BEGIN"):
        return _pem_key(path, data, signing)
    if len(data) < MIN_HMAC_KEY:
        raise InputError(f"HMAC key is {len(data)} bytes; use at least {MIN_HMAC_KEY} "
                         "random bytes", path=path)
    return Key(HMAC_SHA256, _hmac_key_id(data), secret=data)


def _pem_key(path: str, data: bytes, signing: bool) -> Key:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise InputError("an Ed25519 (PEM) key needs the 'cryptography' package; "
                         "install it or use an HMAC key file", path=path) from None
    try:
        if b"PRIVATE KEY" in data:
            private = serialization.load_pem_private_key(data, password=None)
            public = private.public_key()
        elif signing:
            raise ValueError("a public key cannot sign")
        else:
            private, public = None, serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as e:
        raise InputError(f"not a usable PEM key ({e})", path=path) from None
    if not isinstance(public, ed25519.Ed25519PublicKey):
        raise InputError("PEM keys must be Ed25519", path=path)
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    # The private key's type is whatever PEM held (optional `cryptography`, any algorithm);
    # that it is Ed25519 follows from its public half, checked above.
    return Key(ED25519, hashlib.sha256(raw).digest(), private=cast(SigningKey, private),
               public=public)


def signing_digest(image: bytes | memoryview) -> bytes:
    """sha256 of a signed image with its digest field and tag zeroed."""
    view = memoryview(image)
    h = hashlib.sha256()
    h.update(view[:DIGEST_OFFSET])
    h.update(bytes(DIGEST_SIZE))
    h.update(view[DIGEST_OFFSET + DIGEST_SIZE:_TAG_OFFSET])
    h.update(bytes(64))
    h.update(view[_TAG_OFFSET + 64:])
    return h.digest()


def unsigned_block(key: Key) -> bytes:
    """The signature block with a zero tag, as the signing digest sees it."""
    return _BLOCK.pack(SIG_MAGIC, key.algorithm, 0, key.key_id, bytes(64))


def sign_block(key: Key, digest: bytes) -> bytes:
    """The signature block for a bundle whose signing digest is `digest`."""
    if key.algorithm == HMAC_SHA256:
        tag = hmac.new(key.secret, digest, hashlib.sha256).digest()
    else:
        tag = key.private.sign(digest)
    return _BLOCK.pack(SIG_MAGIC, key.algorithm, 0, key.key_id, tag.ljust(64, b"\0"))


def read_signature(image: bytes | memoryview, header_length: int) -> Signature | None:
    """The signature block of a checked bundle image, or None if it has none."""
    if header_length < SIGNED_HEADER_SIZE:
        return None
    magic, algorithm, _reserved, key_id, tag = _BLOCK.unpack_from(image, HEADER_SIZE)
    if magic != SIG_MAGIC:
        return None
    return Signature(algorithm, key_id, tag)


def _verifies(key: Key, signature: Signature, digest: bytes) -> bool:
    if key.algorithm == HMAC_SHA256:
        expected = hmac.new(key.secret, digest, hashlib.sha256).digest().ljust(64, b"\0")
        return hmac.compare_digest(expected, signature.tag)
    from cryptography.exceptions import InvalidSignature

    try:
        key.public.verify(signature.tag, digest)
    except InvalidSignature:
        return False
    return True


def trusted_key_files(options: tuple[str, ...] | list[str]) -> list[str]:
    """--trusted-key files followed by those of HLOC_TRUSTED_KEYS."""
    env = os.environ.get("HLOC_TRUSTED_KEYS", "")
    return list(options) + [p for p in env.split(os.pathsep) if p.strip()]


def verify_bundle(bundle, key_files: list[str]) -> Signature:
    """Refuse (InputError, exit 2) a bundle not signed by one of the trusted keys."""
    keys = [load_key(p, signing=False) for p in key_files]
    image = bundle.members.image
    header_length = int.from_bytes(image[12:16], "little")
    signature = read_signature(image, header_length)
    if signature is None:
        raise InputError("bundle is not signed, and --trusted-key / HLOC_TRUSTED_KEYS "
                         "require a signature", path=bundle.path)
    matching = [k for k in keys if k.algorithm == signature.algorithm
                and hmac.compare_digest(k.key_id, signature.key_id)]
    if not matching:
        raise InputError(f"bundle is signed by {signature.signer}, which is not a trusted "
                         "key", path=bundle.path)
    if not _verifies(matching[0], signature, signing_digest(image)):
        raise InputError(f"bundle signature by {signature.signer} does not verify "
                         "(the bundle was changed after signing)", path=bundle.path)
    return signature


def bundle_signature(bundle) -> Signature | None:
    """The bundle's signature block (unverified), for `hloc inspect`."""
    image = bundle.members.image
    return read_signature(image, int.from_bytes(image[12:16], "little"))
