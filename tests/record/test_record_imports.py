"""kcore.record stays an inner layer: pure code, no I/O, no async, no outer kcore packages."""

import ast
from pathlib import Path

import kcore.record

ALLOWED = {
    "__future__",
    "collections",
    "dataclasses",
    "enum",
    "struct",
    "typing",
    "zlib",
    # the codecs and the CRC, all pure computation in C
    "crc32c",
    "lz4",
    "snappy",
    "zstandard",
    # the wire primitives this package builds on, and itself
    "kcore.protocol.primitives",
    "kcore.record",
}


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module)
    return names


def test_record_package_imports_only_pure_modules():
    package = Path(kcore.record.__file__).parent
    for path in sorted(package.glob("*.py")):
        for name in imported_modules(path):
            assert any(name == a or name.startswith(a + ".") for a in ALLOWED), (path.name, name)
