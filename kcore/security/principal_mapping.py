"""The principal of a TLS client: its certificate subject as Kafka writes it, then mapped.

Kafka's ``DefaultKafkaPrincipalBuilder`` names an SSL client ``User:<name>`` where ``<name>``
is the certificate subject in RFC 2253 form (``X500Principal.getName()``: most specific RDN
first, ``CN=alice,OU=eng,O=acme,C=US``) passed through ``ssl.principal.mapping.rules``
(``SslPrincipalMapper``). Both are reproduced here, sans IO:

* :func:`rfc2253_name` renders the subject of ``SSLObject.getpeercert()``. The RFC 2253
  keywords Java knows (CN, C, L, ST, O, OU, STREET, DC, UID) are written by keyword; any other
  attribute by its OID with the value as ``#`` + hex of its DER encoding, as Java does. Python's
  ``getpeercert`` does not say which ASN.1 string type a value had, so kcore assumes the type the
  attribute's standard prescribes (IA5String for emailAddress, PrintableString for serialNumber
  and dnQualifier, UTF8String for the others): a certificate that encodes, say, a title as a
  PrintableString gets a ``#13...`` from Java and ``#0c...`` from kcore.
* :class:`SslPrincipalMapper` parses the rules with Kafka's own regular expressions and applies
  them as Kafka does: rules in order, the first whose pattern matches the whole name wins (its
  replacement with ``$n`` back references, then ``/L`` or ``/U``), ``DEFAULT`` is the name
  itself, and no matching rule refuses the client. Patterns are Java regular expressions; kcore
  runs them with Python's ``re`` in ASCII mode (Java's ``\\w``, ``\\d`` and ``(?i)`` are ASCII
  by default), which agrees on everything Kafka's documentation and tests use.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["NoMatchingRule", "SslPrincipalMapper", "certificate_principal", "rfc2253_name"]

DEFAULT_RULES = "DEFAULT"

# Kafka's SslPrincipalMapper.RULE_PATTERN, RULE_SPLITTER and RULE_PARSER, verbatim.
_RULE_PATTERN = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE_PATTERN)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


class NoMatchingRule(ValueError):
    """No rule maps this name (Kafka refuses the connection's authentication)."""


class _Rule:
    __slots__ = ("is_default", "pattern", "replacement", "lower", "upper", "_regex")

    def __init__(self, pattern=None, replacement=None, lower=False, upper=False) -> None:
        self.is_default = pattern is None
        self.pattern, self.replacement = pattern, replacement
        self.lower, self.upper = lower, upper
        self._regex = None
        if pattern is not None:
            try:
                self._regex = re.compile(pattern, re.ASCII)
            except re.error as e:
                raise ValueError(f"Invalid rule pattern {pattern!r}: {e}") from None

    def apply(self, name: str) -> str | None:
        if self.is_default:
            return name
        if self._regex.fullmatch(name) is None:
            return None
        groups = self._regex.groups
        # Java's distinguishedName.replaceAll(pattern, replacement): every match is replaced.
        result = self._regex.sub(lambda m: _expand(self.replacement, m, groups), name)
        if self.lower:
            return result.lower()
        return result.upper() if self.upper else result

    def __str__(self) -> str:  # Kafka's Rule.toString, for the splitting tests
        if self.is_default:
            return "DEFAULT"
        text = "RULE:" + self.pattern
        if self.replacement is not None:
            text += "/" + self.replacement
        if self.lower:
            text += "/L"
        elif self.upper:
            text += "/U"
        return text


def _expand(replacement: str, match: re.Match, groups: int) -> str:
    """Java's ``Matcher.appendReplacement`` after Kafka's ``escapeLiteralBackReferences``:
    ``\\x`` is ``x``; ``$n`` is group n, read digit by digit while the number stays a valid
    group (``$12`` with 3 groups is group 1 then ``2``); a ``$n`` past the last group is the
    literal text (Kafka escapes it; with no groups at all Java would fail, Kafka too)."""
    out = []
    i, size = 0, len(replacement)
    while i < size:
        char = replacement[i]
        if char == "\\" and i + 1 < size:
            out.append(replacement[i + 1])
            i += 2
        elif char == "$" and i + 1 < size and replacement[i + 1].isdigit():
            first = int(replacement[i + 1])
            if groups == 0:
                raise ValueError(f"No group {first} in replacement {replacement!r}")
            if first > groups:  # escaped by Kafka: a literal
                out.append("$" + replacement[i + 1])
                i += 2
                continue
            number, j = first, i + 2
            while j < size and replacement[j].isdigit():
                longer = number * 10 + int(replacement[j])
                if longer > groups:
                    break
                number, j = longer, j + 1
            out.append(match.group(number) or "")
            i = j
        elif char == "$":
            raise ValueError(f"Illegal group reference in replacement {replacement!r}")
        else:
            out.append(char)
            i += 1
    return "".join(out)


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules``, parsed; :meth:`name` maps a subject.

    Raises:
        ValueError: a rule does not parse (Kafka's IllegalArgumentException, same message).
    """

    def __init__(self, rules: str | None = DEFAULT_RULES) -> None:
        self.rules = [r for r in (_parse(x) for x in _split(rules)) if r is not None]

    def name(self, distinguished_name: str) -> str:
        """The principal name for this subject (without the ``User:`` type)."""
        for rule in self.rules:
            mapped = rule.apply(distinguished_name)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(
            f"No rules apply to {distinguished_name}, rules [{', '.join(map(str, self.rules))}]"
        )

    def __str__(self) -> str:
        return f"SslPrincipalMapper(rules = [{', '.join(map(str, self.rules))}])"


def _split(rules: str | None) -> list[str]:
    text = DEFAULT_RULES if rules is None else rules
    return [m.group(1) for m in _RULE_SPLITTER.finditer(text.strip())]


def _parse(rule: str) -> _Rule | None:
    match = _RULE_PARSER.match(rule)
    if match is None:
        raise ValueError(f"Invalid rule: {rule}")
    if match.end() != len(rule):
        raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[match.end() :]}`")
    if match.group(1) is not None:
        return _Rule()
    if match.group(2) is not None:
        flag = match.group(6)
        return _Rule(match.group(2), match.group(4), flag == "L", flag == "U")
    return None  # an empty rule is ignored


# Python's attribute names (OpenSSL long names) -> Java's RFC 2253 keyword.
_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
# Others Java writes as OID=#DER: (OID, ASN.1 tag of the string type the standard prescribes).
_UTF8, _IA5, _PRINTABLE = 0x0C, 0x16, 0x13
_OIDS = {
    "emailAddress": ("1.2.840.113549.1.9.1", _IA5),
    "serialNumber": ("2.5.4.5", _PRINTABLE),
    "dnQualifier": ("2.5.4.46", _PRINTABLE),
    "title": ("2.5.4.12", _UTF8),
    "surname": ("2.5.4.4", _UTF8),
    "givenName": ("2.5.4.42", _UTF8),
    "initials": ("2.5.4.43", _UTF8),
    "generationQualifier": ("2.5.4.44", _UTF8),
    "pseudonym": ("2.5.4.65", _UTF8),
    "businessCategory": ("2.5.4.15", _UTF8),
    "postalCode": ("2.5.4.17", _UTF8),
    "name": ("2.5.4.41", _UTF8),
}


def _der_hex(tag: int, value: str) -> str:
    data = value.encode("utf-8")
    size = len(data)
    if size < 0x80:
        length = bytes([size])
    else:
        raw = size.to_bytes((size.bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(raw)]) + raw
    return "#" + (bytes([tag]) + length + data).hex()


def _escape(value: str) -> str:
    """RFC 2253 section 2.4 escaping, as Java's ``X500Principal.getName()`` writes it."""
    out = []
    for i, char in enumerate(value):
        if char in ',+"\\<>;' or (i == 0 and char in "# ") or (i == len(value) - 1 and char == " "):
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def rfc2253_name(subject: Sequence[Sequence[tuple[str, str]]]) -> str:
    """The RFC 2253 name of a ``getpeercert()["subject"]`` (RDNs in certificate order; a
    multi-valued RDN's attributes joined with ``+``)."""
    rdns = []
    for rdn in reversed(subject):
        parts = []
        for attribute, value in rdn:
            keyword = _KEYWORDS.get(attribute)
            if keyword is not None:
                parts.append(f"{keyword}={_escape(value)}")
            elif attribute in _OIDS:
                oid, tag = _OIDS[attribute]
                parts.append(f"{oid}={_der_hex(tag, value)}")
            else:  # an OID Python printed as such, or a name outside both tables
                parts.append(f"{attribute}={_der_hex(_UTF8, value)}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


def certificate_principal(mapper: SslPrincipalMapper, cert: dict | None) -> str | None:
    """Kafka's principal of a verified peer certificate (``getpeercert()``):
    ``User:<mapped RFC 2253 subject>``; None without one. Raises :class:`NoMatchingRule`."""
    if not cert or not cert.get("subject"):
        return None
    return "User:" + mapper.name(rfc2253_name(cert["subject"]))
