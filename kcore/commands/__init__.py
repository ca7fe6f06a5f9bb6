"""The ``kcore`` subcommands, one module each (``kcore/cli.py`` dispatches)."""
