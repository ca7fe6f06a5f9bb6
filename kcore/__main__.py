"""``python -m kcore ...``: the same as the ``kcore`` command."""

import sys

from kcore.cli import main

sys.exit(main())
