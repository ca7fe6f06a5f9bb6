"""Protocol tests (a package so that ``strategies.py`` is imported relative to the tests)."""
