"""Kafka's command-line conventions for the tools that imitate a joptsimple-based Kafka tool
(``kafka-configs.sh``, ``kafka-acls.sh``, ``kafka-get-offsets.sh``, ``kafka-log-dirs.sh``,
``kafka-delete-records.sh``): declare the options once, as Kafka's ``OptionParser.accepts``
does, and get both the argparse options and the ``--help`` text in joptsimple's layout.

joptsimple's ``BuiltinHelpFormatter(80, 2)`` prints the usage line, a two-column table headed
``Option`` / ``Description`` (the description at column 40), the options sorted by name, each
cell wrapped at 38 characters with its continuation lines indented by two spaces; an option
taking a value shows it as ``<Type: described as>`` (``[...]`` when the value is optional), and a
default is appended to the description as ``(default: value)``. Every Kafka tool has ``--help``
and ``--version`` (``CommandDefaultOptions``), and so has every tool declared here.

A unique prefix of an option is accepted, as joptsimple accepts it (argparse's
``allow_abbrev``). A usage error is one line on stderr (``kcore NAME: message``) and exit
status 2, as :mod:`kcore.commands._common` says.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

COLUMN = 38  # the width of each column
SEPARATOR = 2  # spaces between the columns: the description starts at column 40


@dataclass(frozen=True)
class Option:
    """One option, as Kafka declares it: ``parser.accepts(name, description)``, with
    ``.withRequiredArg().describedAs(arg).ofType(type)`` when ``arg`` is not None (``""``: a
    value with no description), ``.withOptionalArg()`` when ``optional``, ``.defaultsTo``, and
    ``repeat`` for an option that may be given more than once (its values form a list)."""

    name: str
    description: str
    arg: str | None = None
    type: str = "String"
    optional: bool = False
    default: str | None = None
    repeat: bool = False

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    def cell(self) -> str:
        if self.arg is None:
            return f"--{self.name}"
        shown = f"{self.type}: {self.arg}" if self.arg else self.type
        return f"--{self.name} " + (f"[{shown}]" if self.optional else f"<{shown}>")

    def full_description(self) -> str:
        if self.default is None:
            return self.description
        return f"{self.description} (default: {self.default})"


HELP = Option("help", "Print usage information.")
VERSION = Option("version", "Display Kafka version.")


def _wrap(text: str, width: int = COLUMN) -> list[str]:
    """``text`` in lines of at most ``width`` (a longer word stays whole); lines after the
    first are indented by two spaces; a newline in ``text`` starts a new line."""
    lines: list[str] = []
    for paragraph in text.split("\n"):
        line: str | None = None
        for word in paragraph.split():
            if line is None:
                line = ("  " if lines else "") + word
            elif len(line) + 1 + len(word) <= width:
                line += " " + word
            else:
                lines.append(line)
                line = "  " + word
        if line is not None:
            lines.append(line)
    return lines or [""]


def help_text(usage: str, options: Iterable[Option]) -> str:
    """The ``--help`` text of a tool: ``usage`` (Kafka's ``USAGE_TEXT``), then the table."""
    rows = [("Option", "Description"), ("------", "-----------")]
    out = [usage]
    for left, right in rows:
        out.append(f"{left:<{COLUMN + SEPARATOR}}{right}")
    for option in sorted({*options, HELP, VERSION}, key=lambda o: o.name):
        left = _wrap(option.cell())
        right = _wrap(option.full_description()) if option.full_description() else [""]
        for i in range(max(len(left), len(right))):
            cell = left[i] if i < len(left) else ""
            text = right[i] if i < len(right) else ""
            out.append(f"{cell:<{COLUMN + SEPARATOR}}{text}".rstrip())
    return "\n".join(out) + "\n"


def add_options(parser: argparse.ArgumentParser, options: Iterable[Option]) -> None:
    """Register ``options`` (and ``--help``, ``--version``) on an argparse parser made with
    ``add_help=False``; a usage error there prints one line (see :func:`one_line_errors`)."""
    parser.allow_abbrev = True
    for option in (*options, HELP, VERSION):
        flag = f"--{option.name}"
        if option.arg is None:
            parser.add_argument(flag, dest=option.dest, action="store_true")
        elif option.repeat:
            parser.add_argument(flag, dest=option.dest, action="append", default=None)
        elif option.optional:
            parser.add_argument(flag, dest=option.dest, nargs="?", const="", default=None)
        else:
            parser.add_argument(flag, dest=option.dest, default=None)
    one_line_errors(parser)


def one_line_errors(parser: argparse.ArgumentParser) -> None:
    """Make ``parser``'s usage errors one line on stderr and exit status 2 (argparse prints
    its usage line first). ``kcore.cli`` sends unknown options of a subcommand here too."""

    def error(message: str):
        name = " ".join(parser.prog.split()[1:]) or parser.prog  # "kcore features describe"
        print(f"kcore {name}: {message} (see kcore {name} --help)", file=sys.stderr)
        raise SystemExit(2)

    parser.error = error  # type: ignore[method-assign]


def split_list(value: str | None) -> list[str]:
    """A comma-separated option value as its non-empty, stripped entries."""
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def repeated(values: Sequence[str] | None) -> list[str]:
    """The values of a repeatable option, in the order given (none: empty)."""
    return list(values or [])
