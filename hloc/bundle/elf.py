"""A bounds-checked reader for the symbol tables of ELF64 little-endian relocatable objects.

`cpu.o` comes from a bundle, which may have been written by anyone: every offset, size and
count read from it is checked against the file before it is used, so random bytes, a
truncated object or a lying header give `ElfError` (a ValueError with one line), never
`struct.error`, IndexError or a crash inside LLVM.
"""

from __future__ import annotations

import struct

from ..util.record import dataclass

_ELF_MAGIC = b"\x7fELF"
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_SHT_SYMTAB = 2
_SHT_STRTAB = 3
_ET_REL = 1
_ET_EXEC = 2
_STB_GLOBAL, _STB_WEAK = 1, 2
_MAX_SECTIONS = 1 << 16
_MAX_SYMBOLS = 1 << 20  # far above any object hloc writes; bounds the work a lie can cause
_MAX_NAME = 4096


class ElfError(ValueError):
    """The bytes are not an ELF64 object this reader accepts (one line: why)."""


@dataclass(frozen=True)
class ElfSymbols:
    """The global symbols an object defines and the ones it imports (undefined)."""

    defined: frozenset[str]
    undefined: frozenset[str]


def _unpack(fmt: struct.Struct, data: bytes, offset: int, what: str) -> tuple:
    if offset < 0 or offset + fmt.size > len(data):
        raise ElfError(f"{what} at offset {offset} lies outside the {len(data)}-byte file")
    return fmt.unpack_from(data, offset)


def _sections(data: bytes, types: tuple[int, ...] = (_ET_REL,)) -> list[tuple]:
    if len(data) < _EHDR.size or data[:4] != _ELF_MAGIC:
        raise ElfError("not an ELF object (bad magic)")
    if data[4] != 2 or data[5] != 1:
        raise ElfError("not a 64-bit little-endian ELF object")
    fields = _unpack(_EHDR, data, 0, "ELF header")
    e_type, shoff, shentsize, shnum = fields[1], fields[6], fields[11], fields[12]
    if e_type not in types:
        raise ElfError(f"ELF type {e_type} is not a {'relocatable object' if types == (_ET_REL,) else 'loadable image'}")
    if shentsize != _SHDR.size or not 0 < shnum <= _MAX_SECTIONS:
        raise ElfError(f"bad section header table ({shnum} entries of {shentsize} bytes)")
    if shoff + shnum * shentsize > len(data):
        raise ElfError("section header table lies outside the file")
    return [_unpack(_SHDR, data, shoff + i * shentsize, "section header") for i in range(shnum)]


def _string(data: bytes, table: tuple, index: int) -> str:
    start, size = table[4], table[5]
    if index >= size or start + size > len(data):
        raise ElfError(f"symbol name offset {index} lies outside its string table")
    end = data.find(b"\0", start + index, min(start + size, start + index + _MAX_NAME))
    if end < 0:
        raise ElfError("unterminated or overlong symbol name")
    try:
        return data[start + index:end].decode("ascii")
    except UnicodeDecodeError:
        raise ElfError("symbol name is not ASCII") from None


def read_symbols(data: bytes, *, executable: bool = False) -> ElfSymbols:
    """Global/weak symbols defined and undefined in the object's SHT_SYMTAB sections.
    executable=True accepts linked images (ET_EXEC, e.g. a cubin) instead of objects."""
    data = bytes(data)
    sections = _sections(data, (_ET_EXEC,) if executable else (_ET_REL,))
    defined: set[str] = set()
    undefined: set[str] = set()
    for header in sections:
        if header[1] != _SHT_SYMTAB:
            continue
        offset, size, link, entsize = header[4], header[5], header[6], header[9]
        if entsize != _SYM.size or size % entsize or offset + size > len(data):
            raise ElfError("bad symbol table bounds")
        if size // entsize > _MAX_SYMBOLS or link >= len(sections):
            raise ElfError("bad symbol table (too many symbols or bad string table link)")
        strtab = sections[link]
        if strtab[1] != _SHT_STRTAB:
            raise ElfError("symbol table links to a section that is not a string table")
        for k in range(size // entsize):
            st_name, st_info, _other, st_shndx, _value, _size = _unpack(
                _SYM, data, offset + k * entsize, "symbol")
            if not st_name or (st_info >> 4) not in (_STB_GLOBAL, _STB_WEAK):
                continue
            name = _string(data, strtab, st_name)
            (undefined if st_shndx == 0 else defined).add(name)
    return ElfSymbols(frozenset(defined), frozenset(undefined))
