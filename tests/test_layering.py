"""The inner layers stay pure: no trio, no sockets, nothing of the server (architecture.md)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PURE_PACKAGES = [
    "kcore/protocol",
    "kcore/record",
    "kcore/log",
    "kcore/metadata",
    "kcore/raft",
    "kcore/coordinator",
    "kcore/replica",
    "kcore/mirror",
    "kcore/inspect",
    "kcore/security",
]
FORBIDDEN = ("trio", "socket", "kcore.server", "kcore.client", "kcore.testing", "kcore.mirror")
# kcore/inspect renders every file kcore writes, __mirror_state's included: it reads the
# mirror's (pure) record module, as it reads the coordinators'.
ALLOWED = {"kcore/inspect": ("kcore.mirror.records",)}
# The Trio shell of the pure Raft core lives beside it (architecture.md: "a thin Trio driver"):
# these modules own the clock and the sockets so that nothing else in kcore/raft has to.
EXEMPT = {"kcore/raft/driver.py", "kcore/raft/transport.py"}
# Cluster mirroring's Trio shells (kcore/mirror's pure modules import each other freely), and
# the fetcher framework's: the pure fetch state and per-batch step stay beside them.
EXEMPT |= {
    "kcore/mirror/source.py",
    "kcore/mirror/fetcher.py",
    "kcore/mirror/manager.py",
    "kcore/mirror/metadata_sync_shell.py",
    "kcore/mirror/partition_ops.py",
    "kcore/mirror/remote_endpoint.py",
    "kcore/replica/fetcher.py",
}
# The Trio shell of a TLS connection: the TLS settings and principal mapping beside it are pure.
EXEMPT |= {"kcore/security/tls_transport.py"}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _within(name: str, package: str) -> bool:
    own = package.replace("/", ".")
    return name == own or name.startswith(own + ".")


@pytest.mark.parametrize("package", PURE_PACKAGES)
def test_layering_pure_package_imports_no_io_layer(package):
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"{package} has no modules"
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in files
        if path.relative_to(ROOT).as_posix() not in EXEMPT
        for name in _imports(path)
        if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN)
        and not _within(name, package)  # a package may use its own modules
        and name not in ALLOWED.get(package, ())
    ]
    assert not offenders, "\n".join(offenders)


def test_layering_checker_sees_a_forbidden_import(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import trio\nfrom kcore.server.x import y\n")
    assert _imports(probe) == ["trio", "kcore.server.x"]
