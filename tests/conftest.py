"""Suite-wide pytest options.

``slow`` tests (long fuzzing, soak runs) are kept out of ``make test``; ``make soak`` runs them.
"""

import pytest
from hypothesis import settings

# Hypothesis's default 200 ms deadline per example is a timing assertion on the real clock: on a
# loaded machine a correct example can take longer and fail the run. Tests bound their work by
# max_examples and sizes instead.
settings.register_profile("kcore", deadline=None)
settings.load_profile("kcore")


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="also run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    skip_slow = pytest.mark.skip(reason="slow: run with `make soak` (pytest --run-slow)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)
