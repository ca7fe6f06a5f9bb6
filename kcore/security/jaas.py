"""``sasl.jaas.config`` values: Kafka's one-module JAAS syntax, parsed strictly.

A value is one login module entry, as Kafka's ``JaasConfig`` reads it::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";

the module's class name, its control flag (``required``, ``requisite``, ``sufficient`` or
``optional``), options ``name=value`` (a value quoted with ``"`` — backslash escapes the next
character — or a bare word), and a closing ``;``. Comments (``//`` to the end of the line,
``/* ... */``) are skipped as Java's ``StreamTokenizer`` skips them for Kafka. Anything else —
no module, two modules, a missing ``;``, an option without a value, a repeated option — is
refused with :class:`JaasConfigError`, whose message never includes an option's value (they
are passwords).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "PLAIN_LOGIN_MODULE",
    "SCRAM_LOGIN_MODULE",
    "JaasConfigError",
    "JaasModule",
    "parse_jaas_config",
]

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_FLAGS = ("required", "requisite", "sufficient", "optional")


class JaasConfigError(ValueError):
    """A malformed ``sasl.jaas.config`` value."""


@dataclass(frozen=True)
class JaasModule:
    class_name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:  # the options are secrets: their names only
        return f"JaasModule({self.class_name!r}, {self.flag!r}, options={sorted(self.options)})"


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) with kind ``word``, ``quoted`` or a one-character symbol (``=``, ``;``)."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise JaasConfigError("Invalid JAAS config: unterminated comment")
            i = end + 2
        elif c == '"':
            chars, i = [], i + 1
            while True:
                if i >= n:
                    raise JaasConfigError("Invalid JAAS config: unterminated quoted value")
                if text[i] == "\\" and i + 1 < n:
                    chars.append(text[i + 1])
                    i += 2
                elif text[i] == '"':
                    i += 1
                    break
                else:
                    chars.append(text[i])
                    i += 1
            out.append(("quoted", "".join(chars)))
        elif c in "=;":
            out.append((c, c))
            i += 1
        else:
            start = i
            while i < n and not text[i].isspace() and text[i] not in '=;"':
                i += 1
            out.append(("word", text[start:i]))
    return out


def parse_jaas_config(text: str, key: str = "sasl.jaas.config") -> JaasModule:
    """The one login module of a ``sasl.jaas.config`` value. Raises :class:`JaasConfigError`
    naming ``key``."""
    tokens = _tokens(text)
    modules: list[JaasModule] = []
    i = 0
    while i < len(tokens):
        kind, value = tokens[i]
        if kind != "word":
            raise JaasConfigError(f"Invalid JAAS config in {key}: expected a login module name")
        if i + 1 >= len(tokens) or tokens[i + 1][0] != "word":
            raise JaasConfigError(
                f"Invalid JAAS config in {key}: login module {value} has no control flag"
            )
        flag = tokens[i + 1][1].lower()
        if flag not in _FLAGS:
            raise JaasConfigError(
                f"Invalid JAAS config in {key}: invalid control flag {tokens[i + 1][1]!r} "
                f"(one of {', '.join(_FLAGS)})"
            )
        i += 2
        options: dict[str, str] = {}
        while True:
            if i >= len(tokens):
                raise JaasConfigError(f"Invalid JAAS config in {key}: the entry must end with ';'")
            kind, name = tokens[i]
            if kind == ";":
                i += 1
                break
            if kind != "word":
                raise JaasConfigError(f"Invalid JAAS config in {key}: expected an option name")
            if (
                i + 2 >= len(tokens)
                or tokens[i + 1][0] != "="
                or tokens[i + 2][0]
                not in (
                    "word",
                    "quoted",
                )
            ):
                raise JaasConfigError(f"Value not specified for key '{name}' in JAAS config")
            if name in options:
                raise JaasConfigError(f"Invalid JAAS config in {key}: option {name} given twice")
            options[name] = tokens[i + 2][1]
            i += 3
        modules.append(JaasModule(value, flag, options))
    if len(modules) != 1:
        raise JaasConfigError(
            f"JAAS config property {key} contains {len(modules)} login modules, should be 1 module"
        )
    return modules[0]
