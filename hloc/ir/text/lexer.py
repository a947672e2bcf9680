"""Scanning HLO text: a cursor over the source that matches XLA's lexical rules in context.

XLA's lexer is context sensitive (`3x3`, `1_1x0_0`, `b01f_01io->b01f`, `{1,0}` after a shape
versus `{` opening a computation), so instead of a separate token stream the parser asks the
cursor to match a specific token class at the current position. Whitespace, `/* ... */` and
`// ...` comments are skipped before every match.
"""

from __future__ import annotations

import bisect
import re

from ...errors import ParseError

_WS_TEXT = r"(?:[ \t\r\n]+|/\*(?:[^*]|\*(?!/))*\*/|//[^\n]*)*"
_WS = re.compile(_WS_TEXT)
_IDENT_CHARS = r"[A-Za-z0-9_.\-]"


def token(pattern: str, flags: int = 0) -> re.Pattern:
    """A pattern that first skips whitespace and comments (match group numbering unchanged)."""
    return re.compile(_WS_TEXT + "(?:" + pattern + ")", flags)


NAME = token(r"%?([A-Za-z_]" + _IDENT_CHARS + r"*)")
ATTR_NAME = token(r"([A-Za-z_]" + _IDENT_CHARS + r"*)[ \t]*=")
INT = token(r"(-?\d+)(?![\w.])")
WORD = token(r"([A-Za-z_][A-Za-z0-9_]*)")
STRING = token(r'"((?:[^"\\]|\\.)*)"|\'((?:[^\'\\]|\\.)*)\'', re.S)


class Cursor:
    """A position in HLO source text; every failed expectation raises ParseError with line:col."""

    __slots__ = ("text", "pos", "path", "_line_starts")

    def __init__(self, text: str, path: str = "<text>", pos: int = 0):
        self.text = text
        self.pos = pos
        self.path = path
        self._line_starts: list[int] | None = None

    # ---- matching ----------------------------------------------------------------------
    def match(self, pattern: re.Pattern) -> re.Match | None:
        """Match `pattern` (built with token()) here; advance past it on success."""
        m = pattern.match(self.text, self.pos)
        if m is not None:
            self.pos = m.end()
        return m

    def expect(self, pattern: re.Pattern, what: str) -> re.Match:
        m = pattern.match(self.text, self.pos)
        if m is None:
            raise self.error(f"expected {what}")
        self.pos = m.end()
        return m

    def skip_ws(self) -> int:
        self.pos = _WS.match(self.text, self.pos).end()
        return self.pos

    def peek(self, n: int = 1) -> str:
        """The next n characters after whitespace/comments ('' at the end)."""
        self.skip_ws()
        return self.text[self.pos:self.pos + n]

    def eat(self, literal: str) -> bool:
        """Consume `literal` if it comes next."""
        self.skip_ws()
        if self.text.startswith(literal, self.pos):
            self.pos += len(literal)
            return True
        return False

    def expect_char(self, literal: str, what: str | None = None) -> None:
        if not self.eat(literal):
            raise self.error(f"expected {what or repr(literal)}")

    def at_end(self) -> bool:
        return self.skip_ws() >= len(self.text)

    def expect_name(self, what: str = "a name") -> str:
        return self.expect(NAME, what).group(1)

    def expect_int(self, what: str = "an integer") -> int:
        return int(self.expect(INT, what).group(1))

    def expect_string(self, what: str = "a quoted string") -> str:
        m = self.expect(STRING, what)
        raw = m.group(1) if m.group(1) is not None else m.group(2)
        try:
            return c_unescape(raw)
        except ValueError as e:
            raise self.error(f"bad escape in string: {e}", m.end() - len(raw) - 1) from None

    def expect_bool(self) -> bool:
        m = self.expect(WORD, "true or false")
        if m.group(1) not in ("true", "false"):
            raise self.error("expected true or false", m.start(1))
        return m.group(1) == "true"

    def raw_braced(self) -> str:
        """The raw text of a balanced `{...}` starting here (double-quoted strings respected)."""
        start = self.skip_ws()
        end = braced_end(self.text, start)
        if end < 0:
            raise self.error("unbalanced '{' (no matching '}')", start)
        self.pos = end
        return self.text[start:end]

    # ---- errors ------------------------------------------------------------------------
    def line_col(self, pos: int) -> tuple[int, int]:
        if self._line_starts is None:
            self._line_starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        line = bisect.bisect_right(self._line_starts, pos)
        return line, pos - self._line_starts[line - 1] + 1

    def error(self, message: str, pos: int | None = None) -> ParseError:
        """A ParseError located at pos (default: the next token)."""
        if pos is None:
            pos = self.skip_ws()
        pos = min(max(pos, 0), len(self.text))
        if self.text.startswith("/*", pos) and self.text.find("*/", pos + 2) < 0:
            message = "unterminated /* comment"
        line, col = self.line_col(pos)
        got = self.text[pos:pos + 20].split("\n", 1)[0]
        detail = f" (found '{got}')" if got else " (found end of text)"
        err = ParseError(message + detail, path=f"{self.path}:{line}:{col}")
        err.file, err.line, err.column = self.path, line, col
        return err


def braced_end(text: str, start: int) -> int:
    """Index just past the '}' matching text[start] == '{', or -1 (strings are skipped whole)."""
    depth = 0
    i = start
    while True:
        m = _BRACE_OR_QUOTE.search(text, i)
        if m is None:
            return -1
        j = m.start()
        if m.group() == '"':
            s = _DQ_STRING.match(text, j)
            if s is None:
                return -1
            i = s.end()
            continue
        depth += 1 if m.group() == "{" else -1
        if depth == 0:
            return j + 1
        i = j + 1


_BRACE_OR_QUOTE = re.compile(r'[{}"]')
_DQ_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)


def lexes_as_json_dict(text: str) -> bool:
    """Whether XLA prints this attribute value bare (`{...}`) instead of as a quoted string."""
    return text.startswith("{") and braced_end(text, 0) == len(text)


# ---- C-style escapes (absl::CEscape / CUnescape semantics on UTF-8 bytes) ----------------
_ESCAPE = {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", ord('"'): '\\"',
           ord("'"): "\\'", ord("\\"): "\\\\"}
_SIMPLE_UNESCAPE = {"n": 10, "r": 13, "t": 9, '"': 34, "'": 39, "\\": 92, "?": 63, "a": 7,
                    "b": 8, "f": 12, "v": 11}


def c_escape(text: str) -> str:
    """Escape like absl::CEscape: quotes, backslash, control and non-ASCII bytes (octal)."""
    if text.isascii() and text.isprintable() and not any(c in text for c in "\"'\\"):
        return text
    out = []
    for b in text.encode("utf-8", "surrogateescape"):
        esc = _ESCAPE.get(b)
        if esc is not None:
            out.append(esc)
        elif b < 0x20 or b >= 0x7F:
            out.append(f"\\{b:03o}")
        else:
            out.append(chr(b))
    return "".join(out)


def c_unescape(raw: str) -> str:
    """Undo C escapes (\\n, \\", octal, \\xHH, \\uXXXX); ValueError on a malformed escape."""
    if "\\" not in raw:
        return raw
    out = bytearray()
    data = raw.encode("utf-8", "surrogateescape")
    i, n = 0, len(data)
    while i < n:
        b = data[i]
        if b != 0x5C:
            out.append(b)
            i += 1
            continue
        i = _unescape_one(data, i + 1, out)
    return out.decode("utf-8", "surrogateescape")


def _unescape_one(data: bytes, i: int, out: bytearray) -> int:
    if i >= len(data):
        raise ValueError("string ends with a backslash")
    c = chr(data[i])
    if c in _SIMPLE_UNESCAPE:
        out.append(_SIMPLE_UNESCAPE[c])
        return i + 1
    if c in "01234567":
        j = i
        while j < len(data) and j < i + 3 and chr(data[j]) in "01234567":
            j += 1
        value = int(data[i:j], 8)
        if value > 0xFF:
            raise ValueError(f"octal escape \\{data[i:j].decode()} out of range")
        out.append(value)
        return j
    digits = {"x": 0, "u": 4, "U": 8}.get(c)
    if digits is None:
        raise ValueError(f"unknown escape \\{c}")
    j = i + 1
    limit = len(data) if digits == 0 else i + 1 + digits
    while j < min(limit, len(data)) and chr(data[j]) in "0123456789abcdefABCDEF":
        j += 1
    if j == i + 1 or (digits and j - i - 1 != digits):
        raise ValueError(f"malformed \\{c} escape")
    value = int(data[i + 1:j], 16)
    if c == "x":
        if value > 0xFF:
            raise ValueError("\\x escape out of range")
        out.append(value)
    else:
        if value > 0x10FFFF or 0xD800 <= value <= 0xDFFF:
            raise ValueError(f"\\{c} escape out of range")
        out.extend(chr(value).encode("utf-8"))
    return j

