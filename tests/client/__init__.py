"""Client tests (a package so that ``fake_broker.py`` is imported relative to the tests)."""
