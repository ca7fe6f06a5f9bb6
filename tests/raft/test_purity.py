"""The Raft core stays sans-IO: no clock, no sockets, no threads, no files (but one module)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RAFT = Path(__file__).resolve().parents[2] / "kcore" / "raft"
# The persistence classes may touch files: quorum_state.py, disk_log.py (the log on kcore/log)
# and snapshot_files.py. driver.py and transport.py are the Trio shell that owns the clock and
# the sockets.
IO_ALLOWED = {"quorum_state.py", "disk_log.py", "snapshot_files.py", "driver.py", "transport.py"}
FORBIDDEN = (
    "trio",
    "socket",
    "asyncio",
    "threading",
    "time",
    "os",
    "pathlib",
    "select",
    "kcore.server",
    "kcore.client",
    "kcore.testing",
    "kcore.mirror",
    "kcore.metadata",
)


def imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


@pytest.mark.parametrize("path", sorted(RAFT.glob("*.py")), ids=lambda p: p.name)
def test_raft_module_does_no_io(path):
    if path.name in IO_ALLOWED:
        return
    bad = [n for n in imports(path) if any(n == f or n.startswith(f + ".") for f in FORBIDDEN)]
    assert not bad, f"{path.name} imports {bad}"


def test_raft_modules_stay_short():
    for path in RAFT.glob("*.py"):
        assert len(path.read_text(encoding="utf-8").splitlines()) < 800, path.name
