#!/usr/bin/env python3
"""Print the reader and writer kcore generates for a message at one version.

    python tools/show_codec.py Fetch 16            # FetchRequest v16
    python tools/show_codec.py FetchResponse 16
    python tools/show_codec.py RequestHeader 2

An API name alone means its request. This is the code that runs: the codec compiles exactly
this source (tracebacks through it show these lines).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kcore.protocol.messages import MESSAGES  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("message", help="message name (FetchResponse) or API name (Fetch)")
    parser.add_argument("version", type=int)
    args = parser.parse_args()
    mt = MESSAGES.get(args.message) or MESSAGES.get(args.message + "Request")
    if mt is None:
        print(f"no message named {args.message!r}", file=sys.stderr)
        return 2
    if args.version not in mt.versions:
        print(f"{mt.name} has versions {mt.versions}", file=sys.stderr)
        return 2
    print(f"# {mt.name} v{args.version}")
    print(mt.source(args.version))
    return 0


if __name__ == "__main__":
    sys.exit(main())
