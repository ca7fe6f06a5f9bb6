"""Kafka's command-line conventions for the tools that imitate a joptsimple-based Kafka tool
(``kafka-configs.sh``, ``kafka-acls.sh``, ``kafka-get-offsets.sh``, ``kafka-log-dirs.sh``,
``kafka-delete-records.sh``, ``kafka-dump-log.sh``, and the proposal's
``kafka-cluster-mirrors.sh``): declare the options once, as Kafka's ``OptionParser.accepts``
does, and get both the argparse options and the ``--help`` text in joptsimple's layout.

The layout is what joptsimple 5.0.4 (Kafka's) ``BuiltinHelpFormatter(80, 2)`` prints after
Kafka's one-line purpose (``CommandLineUtils.printUsageAndExit``); checked byte for byte
against the Java library:

* Two columns headed ``Option`` / ``Description`` and underlined with dashes; the options
  sorted by name, each ``--name`` followed by `` <Type: described as>`` for a required value,
  `` [Type: described as]`` for an optional one (``<Type>`` with no description); a default
  is appended to the description as ``(default: value)``.
* Each cell is wrapped at the width of its column, which is that of its widest cell but at
  most ``(80 - 2) / 2 = 39`` for the options and ``80 - option width - 2`` for the
  descriptions; continuation lines are indented by two spaces; a newline in a description
  starts a new line. A word longer than the column stays whole (and one that starts a cell
  leaves that cell's first line empty).
* Words end where Java's ``BreakIterator.getLineInstance()`` allows a break — not only at
  spaces: after a run of hyphens (``--``, ``Comma-``), after ``.``, ``,``, ``:``, ``;``,
  ``!``, ``?``, ``%`` and closing brackets or quotes, and before an opening bracket that
  follows a word (``k=[v]`` breaks before ``[``); a number (``1.5``, ``-3``) stays whole.
* The widths are then measured again on the wrapped lines, and every line is padded to them:
  the option column (``Option`` included) to the widest wrapped option line, so the
  description usually starts at column 41 (1-based), not 42; and the description to the
  widest wrapped description line — every line of Kafka's help ends in spaces.

The one parameter is ``pad``: the proposal's ``kafka-cluster-mirrors.sh --help`` (spec §11.2,
the contract for that tool) is joptsimple's layout with the trailing spaces removed, so
cluster-mirrors asks for ``pad=False``; the Kafka tools print them, as Kafka does.

Every Kafka tool has ``--help`` and ``--version`` (``CommandDefaultOptions``), and so has
every tool declared here (:func:`help_or_version`). A unique prefix of an option is accepted,
as joptsimple accepts it (argparse's ``allow_abbrev``). A usage error is one line on stderr
(``kcore NAME: message``) and exit status 2, as :mod:`kcore.commands._common` says.
"""

from __future__ import annotations

import argparse
import re
import sys
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kcore import __version__

WIDTH = 80  # BuiltinHelpFormatter's overall width
SEPARATOR = 2  # spaces between the columns
INDENT = 2  # the indent of a cell's continuation lines
_INTEGER_TYPES = ("Integer", "Long")  # ofType(Integer.class): argparse converts with int


@dataclass(frozen=True)
class Option:
    """One option, as Kafka declares it: ``parser.accepts(name, description)``, with
    ``.withRequiredArg().describedAs(arg).ofType(type)`` when ``arg`` is not None (``""``: a
    value with no description), ``.withOptionalArg()`` when ``optional`` (the value given
    without one is ``default``, as joptsimple's ``valueOf`` answers), ``.defaultsTo`` (shown;
    argparse's value stays None when the option is absent, for the tool to tell "not given"),
    and ``repeat`` for an option that may be given more than once (its values form a list).
    An ``Integer`` or ``Long`` value is parsed as an int."""

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
        return _java_trim(f"{self.description} (default: {self.default})")


HELP = Option("help", "Print usage information.")
VERSION = Option("version", "Display Kafka version.")


# -- Java's line BreakIterator ------------------------------------------------------------------
# The JDK's rules (sun.text.resources.BreakIteratorRules, "LineBreakRules") over classes of
# characters, one letter per class; a segment is the longest match of _LINE_RULE. A character
# in two of the rules' sets has a letter of its own: "(" is pre-word and hack1, "$" pre-word
# and hack3, "'" pre-word and hack3, '"' pre-word and post-word, ")" post-word and hack2, "."
# and "," post-word and mid-num, a digit a word character and a digit. Checked against Java 17
# on 60,000 random strings of ASCII punctuation, letters and digits: a handful still differ
# (runs like "$--,12", where the JDK's compiled table departs from its rules); combining marks
# and non-breaking spaces inside words are not modelled. Help texts are plain prose.
_CLASS_OF = {
    "\x03": "b", "\t": "b", "\n": "b", "\f": "b", "\u2028": "b", "\u2029": "b",
    "\r": "r",
    "\u00a0": "g", "\u0f0c": "g", "\u2007": "g", "\u2011": "g", "\u202f": "g", "\ufeff": "g",
    "\u00ad": "d",
    "(": "o", "$": "D", ")": "c", ".": "m", ",": "m", "'": "A", '"': "Q",
    "!": "q", "%": "q", ":": "q", ";": "q", "?": "q", "\u00a2": "q", "\u00b0": "q",
}  # fmt: skip
_CLASS_OF_CATEGORY = {
    "Zs": "s", "Cc": "s", "Pd": "d", "Sc": "p", "Ps": "p", "Pi": "p", "Pe": "q", "Pf": "q",
    "Nd": "n", "No": "n", "Mn": "e", "Me": "e",
}  # fmt: skip
_PRE, _POST, _CHAR, _HACK3 = "[poDQA]", "[qcmQ]", "[xn]", "[DA]"
_NUMBER = r"[poDQAd]*n+(?:mn+)*"
_WORD = rf"{_PRE}*(?:{_CHAR}*|{_NUMBER})(?:d+|{_POST}*)"
# The JDK's table also keeps post-word characters after a first word of "$" or "'" and dashes
# ("'--;" is one segment, "x'--;" two): the second alternative.
_FIRST = rf"(?:{_WORD}|{_PRE}*{_HACK3}dd+{_POST}*)"
_LINE_RULE = re.compile(rf"{_FIRST}(?:(?:s*g+s?|{_HACK3}){_WORD})*s*e*(?:oc{_POST}*)?e*r?b?")
_TAIL = re.compile(r"s*[eocqmQrb]*")


def _class(ch: str) -> str:
    if ch in _CLASS_OF:
        return _CLASS_OF[ch]
    if ch.isascii() and (ch.isalpha() or ch in "#&*+/<=>@\\^_`|~"):
        return "x"
    return _CLASS_OF_CATEGORY.get(unicodedata.category(ch), "x")


def line_words(line: str) -> list[str]:
    """``line`` cut where Java's line ``BreakIterator`` allows a break (each piece keeps the
    spaces after it): ``"a b--c d.e"`` is ``["a ", "b--", "c ", "d.", "e"]``."""
    classes = "".join(_class(ch) for ch in line)
    words: list[str] = []
    start = 0
    while start < len(line):
        # A segment never runs past its first run of spaces that no glue follows, plus what
        # may trail a word: bound the candidates, then take the longest that is a segment.
        limit = start
        while limit < len(line) and (classes[limit] not in "sb" or _glued(classes, limit)):
            limit += 1
        limit = _TAIL.match(classes, limit).end()
        end = next(
            (e for e in range(limit, start, -1) if _LINE_RULE.fullmatch(classes, start, e)),
            start + 1,
        )
        words.append(line[start:end])
        start = end
    return words


def _glued(classes: str, i: int) -> bool:
    """Whether the run of spaces at ``i`` is inside a word joined by a non-breaking space."""
    j = i
    while j < len(classes) and classes[j] == "s":
        j += 1
    return (j < len(classes) and classes[j] == "g") or (
        i > 0 and classes[i - 1] == "g" and j == i + 1
    )


# -- joptsimple's Columns and Rows --------------------------------------------------------------
def _java_trim(text: str) -> str:
    """Java's ``String.trim``: without the characters up to U+0020 at either end."""
    return text.strip("".join(map(chr, range(33))))


def _pieces(raw: str, width: int) -> list[str]:
    """A cell's lines in a column ``width`` wide (joptsimple's ``Columns.piecesOf``)."""
    pieces: list[str] = []
    lines = _java_trim(raw).split("\n")
    while lines and not lines[-1]:  # Java's split drops trailing empty strings
        lines.pop()
    for line in lines:
        piece = ""
        for word in line_words(line):
            if len(piece) + len(word) > width:
                pieces.append(piece.rstrip())
                piece = " " * INDENT + word
            else:
                piece += word
        if piece:
            pieces.append(piece)
    return pieces


def _widths(rows: Sequence[tuple[str, str]]) -> tuple[int, int]:
    left = min((WIDTH - SEPARATOR) // 2, max(len(o) for o, _ in rows))
    return left, min(WIDTH - left - SEPARATOR, max(len(d) for _, d in rows))


def help_table(rows: Sequence[tuple[str, str]], *, pad: bool = True) -> str:
    """``rows`` (option cell, description) laid out as joptsimple's ``Rows``: wrapped at the
    widths of the given cells, then padded to the widths of the wrapped lines (``pad``)."""
    left, right = _widths(rows)
    fitted: list[tuple[str, str]] = []
    for option, description in rows:
        options, descriptions = _pieces(option, left), _pieces(description, right)
        for i in range(max(len(options), len(descriptions))):
            fitted.append(
                (
                    options[i] if i < len(options) else "",
                    descriptions[i] if i < len(descriptions) else "",
                )
            )
    left, right = _widths(fitted)
    lines = (o.ljust(left) + " " * SEPARATOR + d.ljust(right) for o, d in fitted)
    return "".join((line if pad else line.rstrip()) + "\n" for line in lines)


def help_text(usage: str, options: Iterable[Option], *, pad: bool = True) -> str:
    """The ``--help`` text of a tool: ``usage`` (Kafka's purpose of the tool) on a line, then
    the table of ``options`` with ``--help`` and ``--version``. ``pad=False`` drops the
    trailing spaces (the proposal's cluster-mirrors text)."""
    rows = [("Option", "Description"), ("------", "-----------")]
    for option in sorted({o.name: o for o in (*options, HELP, VERSION)}.values(), key=_name):
        rows.append((option.cell(), option.full_description()))
    return f"{usage}\n" + help_table(rows, pad=pad)


def _name(option: Option) -> str:
    return option.name


def help_or_version(args: argparse.Namespace, help_text: str) -> int | None:
    """Kafka's ``--help`` (``help_text`` on stdout) and ``--version`` (kcore's version) of a
    tool declared here: exit status 0 when one was asked for, else None."""
    if getattr(args, "help", False):
        sys.stdout.write(help_text)
        return 0
    if getattr(args, "version", False):
        print(__version__)
        return 0
    return None


def missing_required(args: argparse.Namespace, *names: str) -> str | None:
    """Kafka's ``CommandLineUtils.checkRequiredArgs``: the usage error for the first option of
    ``names`` not given (or given empty), as ``Missing required argument "[name]"``."""
    for name in names:
        if not getattr(args, name.replace("-", "_")):
            return f'Missing required argument "[{name}]"'
    return None


def add_options(parser: argparse.ArgumentParser, options: Iterable[Option]) -> None:
    """Register ``options`` (and ``--help``, ``--version``) on an argparse parser made with
    ``add_help=False``; a usage error there prints one line (see :func:`one_line_errors`)."""
    parser.allow_abbrev = True
    for option in (*options, HELP, VERSION):
        flag = f"--{option.name}"
        convert = int if option.type in _INTEGER_TYPES else str
        if option.arg is None:
            parser.add_argument(flag, dest=option.dest, action="store_true")
        elif option.repeat:
            parser.add_argument(flag, dest=option.dest, action="append", type=convert)
        elif option.optional:
            const = convert(option.default) if option.default is not None else ""
            parser.add_argument(flag, dest=option.dest, type=convert, nargs="?", const=const)
        else:
            parser.add_argument(flag, dest=option.dest, type=convert)
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
