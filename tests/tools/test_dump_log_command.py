"""``kcore dump-log`` as a process (``python -m kcore dump-log``, and ``kafka-dump-log.sh``
once) on the files of a running kcore, written by confluent-kafka: every codec, an
idempotent producer, transactions committed and aborted, a compacted topic, a group with
committed offsets. Batch lines are compared whole with Kafka's line built from the batch bytes
(tests/tools/dump_log_lines.py) and record lines with what the clients sent; the decoders show
the offset, group, transaction and metadata records the clients caused; damaged copies are
reported at the right position, with a non-zero exit and no traceback."""

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from crc32c import crc32c

from kcore.coordinator.partitioning import partition_for
from kcore.testing import EmbeddedCluster

from .dump_log_lines import batch_fields, batch_positions, kafka_batch_line

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
RECORDS = 40
BASE_TS = 1_700_000_000_000
TID = "dump-log-txn"
GROUP = "dump-log-group"
SEGMENT = "00000000000000000000"


def dump(*args: str, tool: list[str] | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    command = tool or [sys.executable, "-m", "kcore", "dump-log"]
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def _value(i: int) -> bytes:
    # Compressible (every codec really compresses it), and distinct per record.
    return f"value-{i:04d}-".encode() + b"abcdefgh" * 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    config = {
        "log.cleaner.backoff.ms": "500",
        "metadata.log.max.record.bytes.between.snapshots": "4096",
        "index.interval.bytes": "1024",
        "log.flush.offset.checkpoint.interval.ms": "200",  # checkpoint files appear soon
        "log.flush.interval.messages": "1",  # recovery points, hence epoch checkpoints, move
    }
    data_dir = tmp_path_factory.mktemp("dump-log")
    with EmbeddedCluster(config=config, data_dir=data_dir) as c:
        for codec in CODECS:
            c.create_topic(f"codec-{codec}")
            producer = Producer(
                {
                    "bootstrap.servers": c.bootstrap_servers,
                    "compression.type": codec,
                    "enable.idempotence": True,
                    "linger.ms": 50,
                }
            )
            for i in range(RECORDS):
                producer.produce(
                    f"codec-{codec}",
                    key=f"key-{i}".encode(),
                    value=_value(i),
                    headers=[("trace", b"1"), ("n", str(i).encode())],
                    timestamp=BASE_TS + i,
                    partition=0,
                )
                if i % 8 == 7:  # 5 batches of 8 records
                    assert producer.flush(30) == 0
        c.create_topic("txn")
        txn = Producer({"bootstrap.servers": c.bootstrap_servers, "transactional.id": TID})
        txn.init_transactions(30)
        txn.begin_transaction()
        txn.produce("txn", value=b"committed", partition=0)
        txn.commit_transaction(30)
        txn.begin_transaction()
        txn.produce("txn", value=b"aborted-1", partition=0)
        txn.produce("txn", value=b"aborted-2", partition=0)
        txn.flush(30)
        txn.abort_transaction(30)
        consumer = Consumer(
            {
                "bootstrap.servers": c.bootstrap_servers,
                "group.id": GROUP,
                "enable.auto.commit": False,
            }
        )
        consumer.assign([TopicPartition("codec-none", 0, 0)])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < RECORDS and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen += 1
        consumer.commit(offsets=[TopicPartition("codec-none", 0, 25)], asynchronous=False)
        consumer.close()
        yield c


def logs(cluster) -> Path:
    return cluster.data_dir / "logs"


def segment(cluster, partition_dir: str, suffix: str = ".log") -> Path:
    return logs(cluster) / partition_dir / f"{SEGMENT}{suffix}"


def _batch_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("baseOffset: ")]


@pytest.mark.parametrize("codec", CODECS)
def test_dump_log_lines_are_kafkas_for_every_codec(cluster, codec):
    path = segment(cluster, f"codec-{codec}-0")
    result = dump("--files", str(path), "--print-data-log")
    assert result.returncode == 0, result.stderr
    data = path.read_bytes()[: path.stat().st_size]
    lines = result.stdout.splitlines()
    assert lines[:2] == [f"Dumping {path}", "Log starting offset: 0"]
    positions = batch_positions(data)
    # Every batch line, whole, as Kafka's printBatchLevel writes it for these bytes...
    assert _batch_lines(result.stdout) == [kafka_batch_line(data, p) for p in positions]
    fields = [batch_fields(data, p) for p in positions]
    # ...and the fields the client decided: the codec, the idempotent producer, the count.
    assert len(positions) == RECORDS // 8
    assert {f["compresscodec"] for f in fields} == {codec}
    assert len({f["producerId"] for f in fields}) == 1 and fields[0]["producerId"] >= 0
    assert fields[0]["baseSequence"] == 0 and sum(f["count"] for f in fields) == RECORDS
    record_lines = [line for line in lines if line.startswith("| ")]
    assert record_lines == [
        f"| offset: {i} CreateTime: {BASE_TS + i} keySize: {len(f'key-{i}')} "
        f"valueSize: {len(_value(i))} sequence: {i} headerKeys: [trace,n] key: key-{i} "
        f"payload: {_value(i).decode()}"
        for i in range(RECORDS)
    ]
    assert lines[-1] == (
        f"Summary: batches: {len(positions)} records: {RECORDS} bytes: {len(data)} "
        f"firstOffset: 0 lastOffset: {RECORDS - 1} partitionLeaderEpochs: [0]"
    )


def test_dump_log_transactions_markers_and_txn_index(cluster):
    path = segment(cluster, "txn-0")
    result = dump("--files", f"{path},{segment(cluster, 'txn-0', '.txnindex')}", "--deep-iteration")
    assert result.returncode == 0, result.stderr
    batches = _batch_lines(result.stdout)
    records = [line for line in result.stdout.splitlines() if line.startswith("| ")]
    assert [("isTransactional: true" in b, "isControl: true" in b) for b in batches] == [
        (True, False),
        (True, True),
        (True, False),
        (True, True),
    ]
    pid = batch_fields(path.read_bytes(), 0)["producerId"]
    assert all(f"producerId: {pid} " in b for b in batches)
    assert records[1].endswith("endTxnMarker: COMMIT coordinatorEpoch: 0")
    assert records[4] == (
        "| offset: 4 CreateTime: "
        + records[4].split("CreateTime: ")[1].split(" ")[0]
        + " keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMarker: ABORT "
        "coordinatorEpoch: 0"
    )
    # The aborted transaction: offsets 2-3, its ABORT marker at 4, the LSO after it 5.
    assert f"version: 0 producerId: {pid} firstOffset: 2 lastOffset: 4 lastStableOffset: 5" in (
        result.stdout.splitlines()
    )


def test_dump_log_transaction_log_decoder_shows_the_states(cluster):
    partition = partition_for(TID, 50)
    result = dump(
        "--files",
        str(segment(cluster, f"__transaction_state-{partition}")),
        "--transaction-log-decoder",
    )
    assert result.returncode == 0, result.stderr
    states = []
    for line in result.stdout.splitlines():
        if line.startswith("| "):
            assert f"key: transaction_metadata::transactionalId={TID} payload: producerId:" in line
            states.append(line.split("state=")[1].split(",")[0])
    assert states == [
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "CompleteCommit",
        "Ongoing",
        "PrepareAbort",
        "CompleteAbort",
    ]
    assert "partitions=[txn-0]" in result.stdout


def test_dump_log_offsets_decoder_shows_the_commit(cluster):
    partition = partition_for(GROUP, 50)
    result = dump(
        "--files", str(segment(cluster, f"__consumer_offsets-{partition}")), "--offsets-decoder"
    )
    assert result.returncode == 0, result.stderr
    commits = [
        line
        for line in result.stdout.splitlines()
        if f'key: {{"type":"1","data":{{"group":"{GROUP}","topic":"codec-none","partition":0}}}}'
        in line
    ]
    assert len(commits) == 1
    payload = json.loads(commits[0].split(" payload: ")[1])
    assert payload["version"] == "3" and payload["data"]["offset"] == 25


def test_dump_log_cluster_metadata_segment_and_snapshot(cluster):
    folder = logs(cluster) / "__cluster_metadata-0"
    segments = sorted(str(p) for p in folder.glob("*.log"))
    snapshots = sorted(str(p) for p in folder.glob("*.checkpoint"))
    assert snapshots, "a metadata snapshot was expected (4 KiB between snapshots)"
    result = dump("--files", ",".join(segments + snapshots[-1:]), "--cluster-metadata-decoder")
    assert result.returncode == 0, result.stderr
    name = Path(snapshots[-1]).name
    end, epoch = int(name[:20]), int(name[21:31])
    assert f"Snapshot end offset: {end}, epoch: {epoch}" in result.stdout
    assert ' SnapshotHeader {"version":0,"lastContainedLogTimestamp":' in result.stdout
    topics = {
        json.loads(line.split(" payload: ")[1])["data"]["name"]
        for line in result.stdout.splitlines()
        if '"type":"TOPIC_RECORD"' in line
    }
    assert {"txn", *(f"codec-{c}" for c in CODECS)} <= topics


def test_dump_log_indexes_of_the_active_segment(cluster):
    files = [segment(cluster, "codec-none-0", s) for s in (".index", ".timeindex")]
    result = dump("--files", ",".join(map(str, files)))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    entries = [line for line in lines if line.startswith("offset: ")]
    assert entries, "1 KiB index interval: entries expected"
    data = segment(cluster, "codec-none-0").read_bytes()
    last_offsets = {
        batch_fields(data, p)["position"]: batch_fields(data, p)["lastOffset"]
        for p in batch_positions(data)
    }
    for line in entries:
        offset, position = int(line.split()[1]), int(line.split()[3])
        assert last_offsets[position] == offset
    assert any(line.startswith("timestamp: ") for line in lines)
    verify = dump("--files", ",".join(map(str, files)), "--verify-index-only")
    assert verify.returncode == 0, verify.stderr
    assert not [line for line in verify.stdout.splitlines() if not line.startswith("Dumping")]
    sanity = dump("--files", str(files[0]), "--index-sanity-check")
    assert sanity.returncode == 0 and f"{files[0]} passed sanity check." in sanity.stdout


def test_dump_log_checkpoints(cluster):
    folder = logs(cluster)
    files = [
        folder / "codec-none-0" / "leader-epoch-checkpoint",
        folder / "replication-offset-checkpoint",
    ]
    deadline = time.monotonic() + 30
    while not all(f.exists() for f in files) and time.monotonic() < deadline:
        time.sleep(0.2)
    result = dump(
        "--files",
        f"{folder / 'codec-none-0' / 'leader-epoch-checkpoint'},"
        f"{folder / 'replication-offset-checkpoint'}",
    )
    assert result.returncode == 0, result.stderr
    assert "leaderEpoch: 0 startOffset: 0" in result.stdout.splitlines()
    assert any(
        line.startswith("topic: codec-none partition: 0 offset: ")
        for line in result.stdout.splitlines()
    )


def test_dump_log_compacted_topic_shows_the_gaps(cluster):
    topic = f"compacted-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(
        topic,
        config={
            "cleanup.policy": "compact",
            "segment.ms": "300",
            "min.cleanable.dirty.ratio": "0.01",
            "max.compaction.lag.ms": "100",
        },
    )
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True}
    )
    deadline = time.monotonic() + 90
    result = None
    rounds = 0
    while time.monotonic() < deadline:
        # Three updates of one key and a key of its own per round: once cleaned, a segment
        # keeps one record per round, so its offsets jump by 4.
        for key in ("hot", "hot", "hot", f"once-{rounds}"):
            producer.produce(topic, key=key.encode(), value=b"x" * 100, partition=0)
        producer.flush(10)
        rounds += 1
        time.sleep(0.3)
        files = ",".join(str(p) for p in sorted((logs(cluster) / f"{topic}-0").glob("*.log")))
        result = dump("--files", files, "--deep-iteration")
        # (A segment the cleaner replaced between the glob and the dump is "no such file":
        # a live directory moves; the next round lists it again.)
        if "Non-consecutive offsets in" in result.stderr and result.returncode == 0:
            break
    assert result is not None and "Non-consecutive offsets in" in result.stderr, result.stderr
    assert result.returncode == 0  # gaps after compaction are not damage
    assert " is followed by " in result.stderr
    snapshots = sorted((logs(cluster) / f"{topic}-0").glob("*.snapshot"))
    assert snapshots, "rolled segments leave producer snapshots"
    snap = dump("--files", str(snapshots[-1]))
    assert snap.returncode == 0, snap.stderr
    pid = batch_fields(segment(cluster, f"{topic}-0").read_bytes(), 0)["producerId"]
    assert (
        f"producerId: {pid} producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty"
        in snap.stdout
    )


def test_dump_log_reports_a_flipped_byte_and_a_truncated_batch(cluster, tmp_path):
    original = segment(cluster, "codec-none-0").read_bytes()
    positions = batch_positions(original)
    assert len(positions) >= 3
    flipped = bytearray(original)
    at = positions[1] + 61 + 5  # in the records of the second batch
    flipped[at] ^= 0x01
    (tmp_path / "flip").mkdir()
    path = tmp_path / "flip" / f"{SEGMENT}.log"
    path.write_bytes(bytes(flipped))
    result = dump("--files", str(path), "--print-data-log")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    stored = batch_fields(original, positions[1])["crc"]
    size = batch_fields(original, positions[1])["size"]
    computed = crc32c(bytes(flipped[positions[1] + 21 : positions[1] + size]))
    assert _batch_lines(result.stdout)[1] == kafka_batch_line(bytes(flipped), positions[1])
    assert _batch_lines(result.stdout)[1].endswith(f"crc: {stored} isvalid: false")
    assert (
        f"{path}: corrupt batch at position {positions[1]} (baseOffset "
        f"{batch_fields(original, positions[1])['baseOffset']}): crc {stored} found, {computed} "
        "expected; its records are not read"
    ) in result.stderr.splitlines()

    cut = positions[2] + 30
    (tmp_path / "cut").mkdir()
    path = tmp_path / "cut" / f"{SEGMENT}.log"
    path.write_bytes(original[:cut])
    result = dump("--files", str(path), "--deep-iteration")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"Found 30 invalid bytes at the end of {SEGMENT}.log" in result.stdout.splitlines()
    assert f"{path}: parsing stopped at position {positions[2]}: " in result.stderr
    assert len(_batch_lines(result.stdout)) == 2


def test_dump_log_unknown_kind_and_missing_file(cluster, tmp_path):
    meta = logs(cluster) / "meta.properties"
    result = dump("--files", f"{meta},{tmp_path / 'gone.log'}")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"Ignoring unknown file {meta}: not one of .log, .index" in result.stderr
    assert f"{tmp_path / 'gone.log'}: no such file" in result.stderr
    refused = dump("--files", str(meta), "--value-decoder-class", "com.example.MyDecoder")
    assert refused.returncode == 2 and "cannot load Java decoder classes" in refused.stderr


def test_dump_log_json_parses_and_matches_the_lines(cluster):
    path = segment(cluster, "codec-lz4-0")
    text = dump("--files", str(path), "--print-data-log")
    result = dump("--files", str(path), "--print-data-log", "--json")
    assert result.returncode == 0, result.stderr
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    batches = [o for o in objects if o["kind"] == "batch"]
    records = [o for o in objects if o["kind"] == "record"]
    assert len(batches) == len(_batch_lines(text.stdout)) and len(records) == RECORDS
    assert batches[0]["compresscodec"] == "lz4" and records[3]["key"] == "key-3"
    assert records[3]["headerKeys"] == ["trace", "n"] and objects[-1]["kind"] == "summary"


def test_kafka_dump_log_sh_wrapper(cluster):
    tool = [str(ROOT / "tools" / "kafka-dump-log.sh")]
    env_kcore = Path(sys.executable).with_name("kcore")
    # make test's venv installs kcore, so the script is there: its absence is a broken setup.
    assert env_kcore.exists(), f"no kcore script beside the interpreter ({env_kcore})"
    path = segment(cluster, "codec-none-0")
    result = subprocess.run(
        [*tool, "--files", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT), KCORE=str(env_kcore)),
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert _batch_lines(result.stdout) == [
        kafka_batch_line(path.read_bytes(), p) for p in batch_positions(path.read_bytes())
    ]


def test_dump_log_never_writes_the_files(cluster, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(logs(cluster) / "codec-none-0", folder)
    before = {p.name: (p.stat().st_size, p.read_bytes()) for p in folder.iterdir()}
    files = ",".join(str(p) for p in sorted(folder.iterdir()))
    dump("--files", files, "--print-data-log")
    dump("--files", files, "--index-sanity-check")
    assert {p.name: (p.stat().st_size, p.read_bytes()) for p in folder.iterdir()} == before


def test_dump_log_max_bytes_reads_only_the_first_batches(cluster):
    path = segment(cluster, "codec-none-0")
    data = path.read_bytes()
    positions = batch_positions(data)
    result = dump("--files", str(path), "--max-bytes", str(positions[2] + 10))
    assert result.returncode == 0, result.stderr
    assert _batch_lines(result.stdout) == [kafka_batch_line(data, p) for p in positions[:2]]
    assert "invalid bytes" not in result.stdout


def test_dump_log_mirror_state_decoder_prints_the_spec_example(tmp_path):
    from mirror.dump_log import DUMP_EXAMPLE
    from mirror.test_records import example_segment

    folder = tmp_path / "__mirror_state-0"
    folder.mkdir()
    path = folder / f"{SEGMENT}.log"
    path.write_bytes(example_segment())
    result = dump("--mirror-state-decoder", "--files", str(path))
    assert result.returncode == 0, result.stderr
    # spec §8.4, line for line (M-108).
    assert result.stdout.splitlines()[:-1] == [
        f"Dumping {path}",
        "Log starting offset: 0",
        *DUMP_EXAMPLE,
    ]
