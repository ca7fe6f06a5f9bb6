"""kcore/metadata is an inner layer: no trio, no sockets, nothing of the outer layers
(architecture.md). Until ``tests/test_layering.py`` lists the package, this test checks it."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "kcore" / "metadata"
FORBIDDEN = (
    "trio", "socket", "kcore.server", "kcore.client", "kcore.testing", "kcore.mirror",
    "kcore.replica", "kcore.coordinator", "kcore.raft",
)  # fmt: skip


def test_metadata_package_imports_no_io_or_outer_layer():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [
                f"{path.name} imports {n}"
                for n in names
                if any(n == bad or n.startswith(bad + ".") for bad in FORBIDDEN)
            ]
    assert not offenders, offenders
