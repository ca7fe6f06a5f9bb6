"""``--help`` text laid out as Kafka's tools print theirs (joptsimple's ``BuiltinHelpFormatter``).

Kafka's tools describe their options to joptsimple and print ``parser.printHelpOn``: a table of
two columns, the options sorted by name, each as wide as its widest cell but at most
``(80 - 2) / 2 = 39`` characters, two spaces apart::

    Option                                   Description
    ------                                   -----------
    --files <String: file1, file2, ...>      REQUIRED: The comma separated list of
                                               data and index log files to be dumped.

A cell wraps at word boundaries (after spaces, and after a hyphen inside a word, as Java's
line ``BreakIterator`` allows); continuation lines are indented by two spaces. An option with
an argument shows ``<Type: description>`` (``[Type]`` when the argument is optional) and a
default as `` (default: X)`` at the end of its description. Trailing spaces are not printed.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import NamedTuple

from kcore import __version__

__all__ = ["HelpOption", "help_or_version", "joptsimple_help"]

_WIDTH = 80
_SEPARATOR = 2
_INDENT = 2
# A break opportunity after whitespace, or after a hyphen between word characters.
_PIECES = re.compile(r"\S*?(?:\s+|(?<=\w)-(?=[A-Za-z])|$)")


class HelpOption(NamedTuple):
    """One option: ``name`` without dashes, ``argument`` as shown (``"<String: size>"``,
    ``"[String]"`` or ``""``), ``description``, and ``default`` (shown when not None)."""

    name: str
    argument: str
    description: str
    default: str | None = None


def _words(text: str) -> list[str]:
    return [w for w in _PIECES.findall(text) if w]


def _wrap(text: str, width: int) -> list[str]:
    pieces: list[str] = []
    current = ""
    for word in _words(text.strip()):
        if current and len(current) + len(word) > width:
            pieces.append(current.rstrip())
            current = " " * _INDENT + word
        else:
            current += word
    if current:
        pieces.append(current.rstrip())
    return pieces


def joptsimple_help(message: str, options: Sequence[HelpOption]) -> str:
    """The whole ``--help`` text: ``message`` (Kafka prints the tool's purpose first), then the
    option table."""
    rows = [("Option", "Description"), ("------", "-----------")]
    for o in sorted(options, key=lambda o: o.name):
        left = f"--{o.name}" + (f" {o.argument}" if o.argument else "")
        right = o.description + (f" (default: {o.default})" if o.default is not None else "")
        rows.append((left, right))
    half = (_WIDTH - _SEPARATOR) // 2
    left_width = min(half, max(len(left) for left, _ in rows))
    right_width = min(half, max(len(right) for _, right in rows))
    lines = [message]
    for left, right in rows:
        lefts, rights = _wrap(left, left_width), _wrap(right, right_width)
        for i in range(max(len(lefts), len(rights))):
            cell = lefts[i] if i < len(lefts) else ""
            text = rights[i] if i < len(rights) else ""
            lines.append((cell.ljust(left_width + _SEPARATOR) + text).rstrip())
    return "\n".join(lines) + "\n"


def help_or_version(args, help_text: str) -> int | None:
    """Kafka's ``--help`` (``help_text`` on stdout) and ``--version`` (kcore's version) of a
    tool that declares both: exit status 0 when one was asked for, else None."""
    if args.help:
        sys.stdout.write(help_text)
        return 0
    if args.version:
        print(__version__)
        return 0
    return None
