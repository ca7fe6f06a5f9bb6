"""The follower's half of pull replication: sending Fetch/FetchSnapshot, applying the answers.

Part of :class:`~kcore.raft.core.RaftCore` (a mixin, split out to keep files short); the
leader's half (answering fetches) is in ``core.py`` and :mod:`kcore.raft.leader`.

A follower (or observer) always has at most one request to its leader in flight. It sends
``Fetch(FetchOffset = log end, LastFetchedEpoch = last epoch)``; the leader's answer is one of:

* records: appended as they are (same offsets, same epochs); then the high watermark becomes
  ``min(leader's HW, log end)``: only now does the follower know its log matches the leader's
  up to its end, so only now may it trust the leader's HW for its own entries;
* ``DivergingEpoch(epoch, end offset)``: the logs differ after that point; the follower cuts
  its log where the two agree (Kafka's ``truncateToEndOffset``) and fetches again. Cutting
  below the high watermark would drop a committed entry: that raises;
* ``SnapshotId``: the leader no longer has the log at the follower's offset; the follower
  fetches that snapshot in chunks (``FetchSnapshot`` at increasing ``Position``), freezes it,
  restarts its log empty at the snapshot's end, and goes back to ``Fetch``.

Every successful answer from the leader resets the fetch timer; its expiry makes a voter
prospective and an observer ask a random voter for the leader.
"""

from __future__ import annotations

from itertools import groupby
from typing import TYPE_CHECKING

from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.raft import rpc
from kcore.raft.errors import RaftInvariantError
from kcore.raft.log import LogEntry, OffsetAndEpoch, RaftRecord
from kcore.raft.outputs import HighWatermarkAdvanced, LogAppended, LogTruncated, SnapshotLoaded
from kcore.raft.records import decode_entries
from kcore.raft.state import QuorumRole
from kcore.record import CorruptRecordError

if TYPE_CHECKING:
    from kcore.raft.core import RaftCore

    _Base = RaftCore
else:
    _Base = object

__all__ = ["FollowerMixin"]

NONE = ErrorCode.NONE


class FollowerMixin(_Base):
    """Fetching, truncation and snapshot installation for :class:`RaftCore`."""

    def _send_fetch(self, destination: int, now: int) -> None:
        writer = self._snapshot_writer
        if writer is not None:
            request = rpc.fetch_snapshot_request(
                self.cluster_id,
                replica_id=self.node_id,
                epoch=self._epoch,
                snapshot_id=writer.snapshot_id,
                position=writer.size,
                max_bytes=self.config.fetch_snapshot_max_bytes,
            )
        else:
            request = rpc.fetch_request(
                self.cluster_id,
                replica_id=self.node_id,
                epoch=self._epoch,
                fetch_offset=self.log.end_offset,
                last_fetched_epoch=self.log.last_fetched_epoch,
                log_start_offset=self.log.start_offset,
                max_wait_ms=self.config.fetch_max_wait_ms,
                max_bytes=self.config.fetch_max_bytes,
            )
        self._send(destination, request, now)

    def _fetch_from_bootstrap(self, now: int) -> None:
        """An observer without a (responsive) leader fetches from a random ready voter; the
        voter answers with the leader it knows (Kafka's ``maybeSendFetchToAnyBootstrap``)."""
        others = [v for v in self.voters if v != self.node_id]
        if any(self._requests.has_inflight(v) for v in others):
            return
        ready = [v for v in others if self._requests.is_ready(v, now)]
        if ready:
            self._send_fetch(self._rng.choice(ready), now)

    # -- Fetch answers ------------------------------------------------------------------------

    def _partition_to_handle(
        self, source: int, response: m.FetchResponse | m.FetchSnapshotResponse, now: int
    ):
        """The partition of a Fetch/FetchSnapshot answer, or None when nothing is left to do.

        Deals with what both answers share: one without the single partition backs off from
        ``source``; one that ``_maybe_handle_common_response`` fully handles (it is about an
        older epoch, or names a newer epoch or leader) backs off too if it carries an error.
        The partition returned may still carry an error: each caller treats its own.
        """
        part = rpc.partition_of(response)
        if part is None:
            self._requests.backoff(source, now)
            return None
        leader = part.current_leader
        handled = self._maybe_handle_common_response(
            part.error_code, leader.leader_id, leader.leader_epoch, now
        )
        if handled:
            if part.error_code != NONE:
                self._requests.backoff(source, now)
            return None
        return part

    def _on_fetch_response(self, source: int, response: m.FetchResponse, now: int) -> None:
        part = self._partition_to_handle(source, response, now)
        if part is None:
            return
        if part.error_code != NONE:
            self._requests.backoff(source, now)
            return
        if self._role is not QuorumRole.FOLLOWER or source != self._leader_id:
            return
        if part.diverging_epoch.epoch >= 0:
            self._got_leader_answer(now)
            self._truncate_to_leader(
                OffsetAndEpoch(part.diverging_epoch.end_offset, part.diverging_epoch.epoch)
            )
            return
        if part.snapshot_id.epoch >= 0 and part.snapshot_id.end_offset >= 0:
            self._got_leader_answer(now)
            sid = OffsetAndEpoch(part.snapshot_id.end_offset, part.snapshot_id.epoch)
            self._snapshot_writer = self.snapshots.create(sid)
            return
        try:
            entries = decode_entries(part.records)
        except CorruptRecordError:
            self._requests.backoff(source, now)
            return
        self._got_leader_answer(now)
        self._append_as_follower(entries)
        if part.high_watermark >= 0:
            self._advance_follower_high_watermark(part.high_watermark)

    def _got_leader_answer(self, now: int) -> None:
        self._fetch_deadline = now + self.config.fetch_timeout_ms
        self._has_fetched = True

    def _append_as_follower(self, entries: list[LogEntry]) -> None:
        if not entries:
            return
        log = self.log
        if entries[0].offset != log.end_offset:
            raise RaftInvariantError(
                f"fetched entries start at {entries[0].offset}, the log ends at {log.end_offset}"
            )
        first = log.end_offset
        for epoch, run in groupby(entries, key=lambda e: e.epoch):
            run = list(run)
            if epoch > self._epoch:
                raise RaftInvariantError(f"entry of epoch {epoch} from a leader of {self._epoch}")
            offsets = log.append([RaftRecord(e.value, e.control_type) for e in run], epoch)
            if offsets.start != run[0].offset or len(offsets) != len(run):
                raise RaftInvariantError(f"fetched offsets {run[0].offset}.. landed at {offsets}")
        log.flush()
        self._emit(LogAppended(first, log.end_offset))

    def _truncate_to_leader(self, leader_end: OffsetAndEpoch) -> None:
        """Cut the log where it stops agreeing with the leader's (``truncateToEndOffset``)."""
        log = self.log
        if leader_end.epoch == 0:
            offset = min(leader_end.offset, log.end_offset)
        else:
            local = log.end_offset_for_epoch(leader_end.epoch)
            offset = (
                min(local.offset, leader_end.offset)
                if local.epoch == leader_end.epoch
                else (local.offset)
            )
        if offset < self._high_watermark:
            raise RaftInvariantError(
                f"the leader asks node {self.node_id} to truncate to {offset}, below its high "
                f"watermark {self._high_watermark}"
            )
        if offset < log.end_offset:
            log.truncate_to(offset)
            log.flush()
            self._emit(LogTruncated(offset))

    def _advance_follower_high_watermark(self, leader_hw: int) -> None:
        hw = min(leader_hw, self.log.end_offset)
        if hw > self._high_watermark:
            self._high_watermark = hw
            self._emit(HighWatermarkAdvanced(hw))

    # -- FetchSnapshot answers ----------------------------------------------------------------

    def _on_fetch_snapshot_response(
        self, source: int, response: m.FetchSnapshotResponse, now: int
    ) -> None:
        part = self._partition_to_handle(source, response, now)
        if part is None:
            return
        writer = self._snapshot_writer
        if self._role is not QuorumRole.FOLLOWER or source != self._leader_id or writer is None:
            return
        sid = OffsetAndEpoch(part.snapshot_id.end_offset, part.snapshot_id.epoch)
        if part.error_code in (ErrorCode.SNAPSHOT_NOT_FOUND, ErrorCode.POSITION_OUT_OF_RANGE) or (
            part.error_code == NONE and (sid != writer.snapshot_id or part.position != writer.size)
        ):
            # The leader moved on to a newer snapshot (or we lost our place): start over with
            # a Fetch, whose answer names the snapshot to get now.
            writer.abort()
            self._snapshot_writer = None
            return
        if part.error_code != NONE:
            self._requests.backoff(source, now)
            return
        self._got_leader_answer(now)
        writer.append(bytes(part.unaligned_records or b""))
        if writer.size > part.size:
            writer.abort()
            self._snapshot_writer = None
        elif writer.size == part.size:
            self._install_snapshot(writer.snapshot_id)

    def _install_snapshot(self, sid: OffsetAndEpoch) -> None:
        writer = self._snapshot_writer
        self._snapshot_writer = None
        if sid.offset < self._high_watermark:
            # The leader only sends a snapshot to a follower behind its log start, so the
            # follower's high watermark (at most its log end) cannot be past the snapshot.
            writer.abort()
            raise RaftInvariantError(
                f"snapshot {sid} ends below node {self.node_id}'s high watermark "
                f"{self._high_watermark}"
            )
        writer.freeze()
        self.log.reset_to_snapshot(sid)
        self.log.flush()
        self.snapshots.delete_before(sid)
        self._emit(SnapshotLoaded(sid))
        if sid.offset > self._high_watermark:
            self._high_watermark = sid.offset
            self._emit(HighWatermarkAdvanced(sid.offset))
