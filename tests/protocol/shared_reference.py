"""Where the tests that read ``../shared`` (Kafka's reference schemas, the mirroring spec and its
decisions) find it, and what they do when it is not there.

Outside this workspace -- a user's clone -- ``../shared`` is absent and those tests skip. Under
CI (``CI=true``, as the CI run sets it) a missing reference is a broken checkout, not a reason
to skip ~500 tests: they fail instead, saying what is missing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2].parent / "shared"


def in_ci() -> bool:
    """True when the ``CI`` environment variable says so (``true``/``1``/``yes``, any case)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def require(path: Path, what: str) -> None:
    """Skip the calling test when ``path`` is missing -- or fail it under CI."""
    if path.exists():
        return
    message = f"{what} not found at {path.resolve()} (../shared is not beside the repository)"
    if in_ci():
        pytest.fail(f"{message}; CI=true: a missing reference fails the run", pytrace=False)
    pytest.skip(message)
