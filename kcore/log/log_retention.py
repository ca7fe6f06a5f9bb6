"""Retention of a partition log: DeleteRecords, retention.ms / retention.bytes, and the
delayed removal of deleted segments.

:class:`LogRetention` is a mixin of :class:`~kcore.log.partition_log.PartitionLog` (it uses its
``segments``, ``_bases``, ``config``, ``high_watermark``, ``log_start_offset``, ``epoch_cache``,
``producer_state``, ``roll`` and ``size_in_bytes``), kept apart because retention is its own
concern: what may go (only segments wholly below the high watermark, as in Kafka) and when
(renamed ``.deleted`` at once, removed after ``file.delete.delay.ms`` so fetches holding a slice
of them can finish). Called by the log manager's maintenance and by DeleteRecords.
"""

from __future__ import annotations

from kcore.protocol.errors import ErrorCode, KafkaError


class LogRetention:
    def increment_log_start_offset(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up (never past the HW); returns it."""
        if offset > self.high_watermark:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"cannot delete records of {self.name} up to {offset}, above the high "
                f"watermark {self.high_watermark}",
            )
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self.epoch_cache.truncate_from_start(offset)
        return self.log_start_offset

    def delete_old_segments(self, now_ms: int) -> int:
        """Apply retention.ms, retention.bytes and the log start offset; returns segments gone.

        Only segments wholly below the high watermark are deleted by retention (the next
        segment starts at or below it), as in Kafka: data not yet replicated never goes. The
        active segment is removed by time only when it holds data, everything in it expired and
        it is all below the high watermark: it is rolled first. Files are renamed ``.deleted``
        and removed after ``file.delete.delay.ms`` by :meth:`delete_pending_segments`, so
        fetches already holding a slice of them can finish.
        """
        deleted = self.delete_segments_below_log_start(now_ms)
        if "delete" not in self.config.cleanup_policy:
            return deleted
        retention_ms = self.config.retention_ms
        if retention_ms >= 0:
            expired = 0
            for seg in self.segments:
                if seg.size == 0 or now_ms - seg.max_timestamp <= retention_ms:
                    break
                expired += 1
            if expired == len(self.segments) and self.high_watermark == self.log_end_offset:
                self.roll(now_ms)
            deleted += self._delete_first(expired, now_ms)
        retention_bytes = self.config.retention_bytes
        if retention_bytes >= 0:
            excess = self.size_in_bytes() - retention_bytes
            count = 0
            for seg in self.segments[:-1]:
                if excess < seg.size:
                    break
                excess -= seg.size
                count += 1
            deleted += self._delete_first(count, now_ms)
        return deleted

    def _deletable_below_high_watermark(self, count: int) -> int:
        """How many of the first ``count`` segments end at or below the high watermark."""
        n = 0
        while (
            n < min(count, len(self.segments) - 1)
            and self.segments[n + 1].base_offset <= self.high_watermark
        ):
            n += 1
        return n

    def delete_segments_below_log_start(self, now_ms: int) -> int:
        count = 0
        for i in range(len(self.segments) - 1):
            if self.segments[i + 1].base_offset <= self.log_start_offset:
                count += 1
            else:
                break
        return self._delete_first(count, now_ms)

    def _delete_first(self, count: int, now_ms: int) -> int:
        count = self._deletable_below_high_watermark(count)
        if count <= 0:
            return 0
        gone = self.segments[:count]
        del self.segments[:count]
        del self._bases[:count]
        for seg in gone:
            seg.rename_for_deletion()
            self._pending_deletes.append((now_ms + self.config.file_delete_delay_ms, seg))
        new_start = self.segments[0].base_offset
        if new_start > self.log_start_offset:
            self.log_start_offset = new_start
            self.epoch_cache.truncate_from_start(new_start)
        self.producer_state.delete_snapshots_before(new_start)
        self.high_watermark = max(self.high_watermark, self.log_start_offset)
        return count

    def delete_pending_segments(self, now_ms: int, force: bool = False) -> None:
        keep = []
        for due, seg in self._pending_deletes:
            if force or now_ms >= due:
                seg.delete()
            else:
                keep.append((due, seg))
        self._pending_deletes = keep
