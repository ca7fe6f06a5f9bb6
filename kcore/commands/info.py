"""``kcore apis`` and ``kcore version``."""

from __future__ import annotations

import argparse

from kcore import __version__


def apis_main(args: argparse.Namespace) -> int:
    """List the APIs the protocol codec knows, with their versions."""
    from kcore.protocol import APIS

    print(f"{'key':>4}  {'api':<32} {'versions':<10} flexible")
    for api in APIS.values():
        print(f"{api.key:>4}  {api.name:<32} {api.versions!s:<10} {api.flexible}")
    return 0


def version_main(args: argparse.Namespace) -> int:
    print(f"kcore {__version__}")
    return 0
