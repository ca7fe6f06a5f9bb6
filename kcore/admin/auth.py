"""Bearer tokens of the admin endpoint (``admin.auth.token.file``).

The file holds one credential a line: ``TOKEN`` (the caller acts as ``User:admin``) or
``PRINCIPAL TOKEN`` (``User:ops s3cret``: the caller acts as that principal, so the broker's
ACLs apply to what it may do over HTTP as over Kafka). Blank lines and ``#`` comments are
skipped. The file is read again when its modification time changes, so a token is revoked or
rotated without a restart; a file that became unreadable or empty keeps the last good tokens
and logs why (refusing every operator mid-incident would be worse than a token living a few
seconds longer). Tokens are compared in constant time.
"""

from __future__ import annotations

import hmac
import logging
import os
from pathlib import Path

from kcore.log.config import InvalidConfigError

log = logging.getLogger(__name__)

DEFAULT_PRINCIPAL = "User:admin"


def parse_tokens(text: str, source: str) -> dict[str, str]:
    """token -> principal, from the file's text; raises ValueError naming the bad line."""
    tokens: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) == 1:
            principal, token = DEFAULT_PRINCIPAL, parts[0]
        elif len(parts) == 2 and ":" in parts[0]:
            principal, token = parts
        else:
            raise ValueError(f"{source} line {number}: expected TOKEN or PRINCIPAL TOKEN")
        tokens[token] = principal
    if not tokens:
        raise ValueError(f"{source} holds no token")
    return tokens


class TokenFile:
    """The tokens of one file, re-read when it changes."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        try:
            self._mtime = os.stat(self.path).st_mtime_ns
            self._tokens = parse_tokens(self.path.read_text(), str(self.path))
        except (OSError, ValueError) as e:
            raise InvalidConfigError("admin.auth.token.file", f"cannot use {path}: {e}") from None

    def _refresh(self) -> None:
        try:
            mtime = os.stat(self.path).st_mtime_ns
            if mtime == self._mtime:
                return
            self._mtime = mtime
            self._tokens = parse_tokens(self.path.read_text(), str(self.path))
            log.info("admin tokens re-read from %s (%d tokens)", self.path, len(self._tokens))
        except (OSError, ValueError) as e:
            log.warning("admin token file not re-read, the previous tokens stay: %s", e)

    def principal(self, authorization: str | None) -> str | None:
        """The principal of an ``Authorization`` header's bearer token, or None."""
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        self._refresh()
        given = token.strip().encode()
        found = None
        for known, principal in self._tokens.items():  # every token compared: constant time
            if hmac.compare_digest(known.encode(), given):
                found = principal
        return found
