"""The ``quorum-state`` file: the node's epoch, leader and vote, written before they take effect.

Layout (Kafka's ``FileQuorumStateStore``; schema ``QuorumStateData`` version 0, as JSON on one
line, UTF-8)::

    {"clusterId":"","leaderId":1,"leaderEpoch":5,"votedId":-1,"appliedOffset":0,
     "currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}

``-1`` means "none" for ``leaderId`` and ``votedId``. ``appliedOffset`` is always 0 (Kafka never
used it) and ``clusterId`` is written empty, as Kafka writes it. Version 1 (KIP-853: no
``clusterId``/``appliedOffset``/``currentVoters``, a ``votedDirectoryId``) is read too, so a
file written by a newer Kafka still loads.

After a crash: the file is replaced atomically (write ``quorum-state.tmp``, fsync it, rename
it over ``quorum-state``, fsync the directory), so a reader sees either the old or the new
state, never a torn one. A leftover ``.tmp`` is ignored and overwritten.

Who calls it: the Raft driver, for every :class:`~kcore.raft.outputs.PersistQuorumState`
output of the core, *before* it sends anything the core produced after that output.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from kcore.raft.state import ElectionState

__all__ = ["QuorumStateFile", "QuorumStateError", "decode_quorum_state", "encode_quorum_state"]

FILE_NAME = "quorum-state"
_SUPPORTED_VERSIONS = (0, 1)


class QuorumStateError(ValueError):
    """The file exists but cannot be understood: refuse to start rather than guess a vote."""


def encode_quorum_state(state: ElectionState, voters: Iterable[int]) -> str:
    """The file's text (version 0) for ``state``; ``voters`` fills ``currentVoters``."""
    data = {
        "clusterId": "",
        "leaderId": -1 if state.leader_id is None else state.leader_id,
        "leaderEpoch": state.epoch,
        "votedId": -1 if state.voted_id is None else state.voted_id,
        "appliedOffset": 0,
        "currentVoters": [{"voterId": v} for v in sorted(voters)],
        "data_version": 0,
    }
    return json.dumps(data, separators=(",", ":"))


def _int_field(data: dict, key: str, default: int | None = None) -> int:
    value = data.get(key, default)
    if type(value) is not int:
        raise QuorumStateError(f"quorum-state field {key!r} is {value!r}, not an integer")
    return value


def decode_quorum_state(text: str) -> tuple[ElectionState, list[int] | None]:
    """Parse the file's text: the election state and the stored voters (``None`` if absent).

    Raises:
        QuorumStateError: not JSON, not an object, an unknown ``data_version``, or a field of
            the wrong type.
    """
    try:
        data = json.loads(text)
    except ValueError as e:
        raise QuorumStateError(f"quorum-state is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise QuorumStateError("quorum-state is not a JSON object")
    version = _int_field(data, "data_version")
    if version not in _SUPPORTED_VERSIONS:
        raise QuorumStateError(f"quorum-state data_version {version} is not supported")
    leader = _int_field(data, "leaderId", -1)
    epoch = _int_field(data, "leaderEpoch", -1)
    voted = _int_field(data, "votedId", -1)
    if epoch < 0:
        raise QuorumStateError(f"quorum-state leaderEpoch {epoch} is negative")
    voters = None
    raw_voters = data.get("currentVoters")
    if isinstance(raw_voters, list):
        voters = [_int_field(v, "voterId") for v in raw_voters if isinstance(v, dict)]
    state = ElectionState(epoch, None if leader < 0 else leader, None if voted < 0 else voted)
    return state, voters


class QuorumStateFile:
    """Reads and atomically replaces ``<log dir>/__cluster_metadata-0/quorum-state``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """``path`` is the file itself (conventionally named ``quorum-state``)."""
        self.path = Path(path)

    def read(self) -> ElectionState | None:
        """The stored state, or ``None`` when the file does not exist (a fresh node).

        Raises:
            QuorumStateError: the file exists but is corrupt (see :func:`decode_quorum_state`).
        """
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        return decode_quorum_state(text)[0]

    def write(self, state: ElectionState, voters: Iterable[int]) -> None:
        """Durably replace the file: tmp file, fsync, rename, fsync of the directory."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        data = (encode_quorum_state(state, voters) + "\n").encode("utf-8")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        # The rename is durable only once the directory entry is: fsync the directory too.
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
