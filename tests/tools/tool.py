"""Running a ``kcore`` tool as an operator does: a separate process, its exit status and its
two streams, against a running embedded kcore."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 120


def kcore(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """``kcore ARGV...`` in a new process (this checkout's code): returncode, stdout, stderr."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "kcore.cli", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT_S,
        cwd=ROOT,
    )


def wrapper(script: str, *argv: str) -> subprocess.CompletedProcess:
    """``tools/<script> ARGV...`` (the Kafka-named wrapper) with this venv's ``kcore``."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "KCORE": str(Path(sys.executable).with_name("kcore")),
    }
    return subprocess.run(
        [str(ROOT / "tools" / script), *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT_S,
    )


def usage_error(capsys, *argv: str) -> tuple[int, str, str]:
    """``kcore ARGV...`` in this process, for command-line mistakes found before any request:
    (exit status, stdout, stderr); an argparse exit counts as the status."""
    from kcore import cli

    capsys.readouterr()
    try:
        status = cli.main(list(argv))
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    return status, out, err


def one_line(result: subprocess.CompletedProcess) -> str:
    """The single line a failed tool printed on stderr (asserting there is exactly one)."""
    assert result.returncode != 0, result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]
