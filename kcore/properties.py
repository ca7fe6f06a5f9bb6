"""Java's ``.properties`` text format (``server.properties``, ``meta.properties``).

Kafka reads its configuration files with ``java.util.Properties.load``; these functions follow
the same rules so a Kafka operator's files mean the same thing to kcore: ``#`` and ``!``
comments, ``=``, ``:`` or whitespace between key and value, a trailing backslash continuing a
line, and the escapes ``\\t \\n \\r \\f \\uXXXX``. The last occurrence of a key wins.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from kcore.log.config import InvalidConfigError

__all__ = ["MalformedPropertiesError", "load_properties", "parse_override", "parse_properties"]


class MalformedPropertiesError(ValueError):
    """The properties text breaks Java's syntax (a bad ``\\uXXXX`` escape)."""


_PROPS_WS = " \t\f"  # Properties' whitespace: space, tab, form feed (not other Unicode spaces)
_NATURAL_LINES = re.compile(r"\r\n|\r|\n")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    # A natural line ending in an odd number of backslashes continues on the next one, whose
    # leading whitespace is dropped. Blank and comment lines (# or ! first) are skipped, but
    # only where a logical line starts: a continued line starting with # is data, and a comment
    # line never continues.
    pending: str | None = None
    start = 0
    for number, line in enumerate(_NATURAL_LINES.split(text), 1):
        piece = line.lstrip(_PROPS_WS)
        if pending is None:
            if not piece or piece[0] in "#!":
                continue
            start = number
        trailing = len(piece) - len(piece.rstrip("\\"))
        if trailing % 2:
            pending = (pending or "") + piece[:-1]
            continue
        yield start, (pending or "") + piece
        pending = None
    if pending is not None:  # a continuation at end of input: Java drops the backslash
        yield start, pending


def _unescape(text: str, line: int) -> str:
    # Properties.loadConvert: \t \n \r \f, \uXXXX (exactly four hex digits), else \c -> c.
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        i += 1
        if c != "\\" or i == len(text):
            out.append(c)
            continue
        c = text[i]
        i += 1
        if c == "u":
            digits = text[i : i + 4]
            if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise MalformedPropertiesError(f"Malformed \\uxxxx encoding on line {line}")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(c, c))
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    # The key ends at the first unescaped '=', ':' or whitespace; then whitespace, at most one
    # '=' or ':', and whitespace again are skipped. Trailing whitespace stays in the value.
    escaped = False
    end = len(line)
    value_start = len(line)
    has_separator = False
    for i, c in enumerate(line):
        if not escaped and c in "=:":
            end, value_start, has_separator = i, i + 1, True
            break
        if not escaped and c in _PROPS_WS:
            end, value_start = i, i + 1
            break
        escaped = c == "\\" and not escaped
    while value_start < len(line):
        c = line[value_start]
        if c not in _PROPS_WS:
            if has_separator or c not in "=:":
                break
            has_separator = True
        value_start += 1
    return line[:end], line[value_start:]


def parse_properties(text: str) -> dict[str, str]:
    """Parse ``server.properties`` text with ``java.util.Properties.load``'s rules.

    Comments start with ``#`` or ``!``; ``key=value``, ``key:value`` and ``key value`` all work;
    a line ending in an odd number of backslashes continues; escapes ``\\t \\n \\r \\f
    \\uXXXX`` are decoded and any other escaped character stands for itself (``\\=``, ``\\ ``).
    A later duplicate key wins. Raises :class:`MalformedPropertiesError` for a bad ``\\u``.
    """
    props: dict[str, str] = {}
    for line_number, line in _logical_lines(text):
        key, value = _split_key_value(line)
        props[_unescape(key, line_number)] = _unescape(value, line_number)
    return props


def load_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read and parse a properties file. Java reads these as ISO-8859-1; kcore reads UTF-8 and
    falls back to ISO-8859-1 when the bytes are not UTF-8 (ASCII files read the same)."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("iso-8859-1")
    return parse_properties(text)


def parse_override(arg: str) -> tuple[str, str]:
    """One ``--override key=value`` argument as ``(key, value)``. As in Kafka, ``key`` alone
    means an empty value; unlike Kafka, the value may itself contain ``=``."""
    key, _, value = arg.partition("=")
    if not key:
        raise InvalidConfigError(None, f"Invalid command line property {arg!r}: expected key=value")
    return key, value
