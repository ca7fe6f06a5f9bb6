"""Suite-wide pytest options.

``slow`` tests (long fuzzing, soak runs) are kept out of ``make test``; ``make soak`` runs them.
"""

import pytest


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="also run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    skip_slow = pytest.mark.skip(reason="slow: run with `make soak` (pytest --run-slow)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)
