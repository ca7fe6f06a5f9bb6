"""DescribeLogDirs: which partitions each log directory holds, and how large they are.

Answered from the log manager, as Kafka's ``ReplicaManager.describeLogDirs`` does: one result
per directory of ``log.dirs`` (absolute path), listing the requested partitions it holds (all of
them when the request's topic list is null) with their size (the sum of their segment sizes),
their offset lag (``max(HW - LEO, 0)``: 0 for a current log; kcore has no future logs, so
``is_future_key`` is always false) and, from v4, the volume's total and usable bytes (what
``shutil.disk_usage`` reports; kcore has no cordoned directories, so v5's ``is_cordoned`` is
false). Versions 1-5, as Kafka 4.x. A requested topic or partition this broker has no log for is
simply absent, as is a topic left with no partition. A directory that cannot be described gets
KAFKA_STORAGE_ERROR (it is missing) or UNKNOWN_SERVER_ERROR in its own result; the request never
fails as a whole — except without DESCRIBE on the cluster (with an authorizer): then no
directory is described and the answer is CLUSTER_AUTHORIZATION_FAILED (v3+'s top-level error),
as Kafka answers.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from kcore.metadata.acls import AclOperation
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.server import authz
from kcore.server.registry import HandlerRegistry

log = logging.getLogger(__name__)

R = m.DescribeLogDirsResponse


def _requested(body: m.DescribeLogDirsRequest):
    """None for every partition, else the set of requested (topic, partition)."""
    if body.topics is None:
        return None
    return {(t.topic, p) for t in body.topics for p in t.partitions}


def describe_dir(log_manager, directory: Path, wanted, version: int) -> R.DescribeLogDirsResult:
    """One directory's result (errors reported in it)."""
    path = str(Path(directory).absolute())
    result = R.DescribeLogDirsResult(log_dir=path, topics=[])
    try:
        if not Path(directory).is_dir():
            result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            return result
        by_topic: dict[str, list] = {}
        for tp, owner in sorted(log_manager._dir_of.items()):
            if owner != directory or (wanted is not None and tp not in wanted):
                continue
            plog = log_manager.logs.get(tp)
            if plog is None:
                continue
            by_topic.setdefault(tp[0], []).append(
                R.DescribeLogDirsPartition(
                    partition_index=tp[1],
                    partition_size=plog.size_in_bytes(),
                    offset_lag=max(plog.high_watermark - plog.log_end_offset, 0),
                    is_future_key=False,
                )
            )
        result.topics = [
            R.DescribeLogDirsTopic(name=name, partitions=parts) for name, parts in by_topic.items()
        ]
        if version >= 4:
            usage = shutil.disk_usage(directory)
            result.total_bytes = usage.total
            result.usable_bytes = usage.free
    except OSError:
        log.exception("cannot describe log dir %s", path)
        result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
        result.topics = []
    except Exception:
        log.exception("cannot describe log dir %s", path)
        result.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
        result.topics = []
    return result


def register(registry: HandlerRegistry) -> None:
    # As Kafka 4.x: v0 was removed in 4.0 (v1 only changed throttling), v5 came in 4.1.
    @registry.register(35, 1, 5)
    async def describe_log_dirs(ctx, body: m.DescribeLogDirsRequest) -> R:
        if not authz.allowed_on_cluster(ctx, AclOperation.DESCRIBE):
            return R(results=[], error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
        log_manager = ctx.server.log_manager
        wanted = _requested(body)
        return R(
            results=[
                describe_dir(log_manager, d, wanted, ctx.version) for d in log_manager.log_dirs
            ]
        )
