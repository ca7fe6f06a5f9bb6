"""``controller.quorum.voters`` parsing, the config defaults, and the quorum-state file."""

from __future__ import annotations

import json
import os

import pytest

from kcore.raft.config import RaftConfig, VoterAddress, parse_quorum_voters
from kcore.raft.quorum_state import (
    QuorumStateError,
    QuorumStateFile,
    decode_quorum_state,
    encode_quorum_state,
)
from kcore.raft.state import ElectionState


def test_config_parses_quorum_voters_in_order():
    voters = parse_quorum_voters("3@ctl-3:9093, 1@10.0.0.1:9094,2@[::1]:9095")
    assert list(voters) == [3, 1, 2]
    assert voters[3] == VoterAddress("ctl-3", 9093)
    assert voters[2] == VoterAddress("::1", 9095)
    assert str(voters[2]) == "[::1]:9095"
    assert str(voters[1]) == "10.0.0.1:9094"


@pytest.mark.parametrize(
    "value,message",
    [
        ("", "empty"),
        ("1@host", "malformed"),
        ("x@host:1", "malformed"),
        ("1@host:99999", "out of range"),
        ("1@:9093", "no host"),
        ("1@a:1,1@b:2", "twice"),
        ("-1@a:1", "negative"),
    ],
)
def test_config_refuses_bad_quorum_voters(value, message):
    with pytest.raises(ValueError, match=message):
        parse_quorum_voters(value)


def test_config_defaults_are_kafkas():
    cfg = RaftConfig.from_properties({"controller.quorum.voters": "1@a:1,2@b:2,3@c:3"})
    assert cfg.voter_ids == (1, 2, 3)
    assert cfg.election_timeout_ms == 1000
    assert cfg.election_backoff_max_ms == 1000
    assert cfg.fetch_timeout_ms == 2000
    assert cfg.request_timeout_ms == 2000
    assert cfg.retry_backoff_ms == 20
    assert cfg.check_quorum_timeout_ms == 3000
    assert cfg.majority() == 2


def test_config_reads_overrides_and_checks_them():
    cfg = RaftConfig.from_properties(
        {
            "controller.quorum.voters": "1@a:1",
            "controller.quorum.election.timeout.ms": "500",
            "controller.quorum.fetch.timeout.ms": " 800 ",
        }
    )
    assert (cfg.election_timeout_ms, cfg.fetch_timeout_ms, cfg.majority()) == (500, 800, 1)
    with pytest.raises(ValueError, match="not an integer"):
        RaftConfig.from_properties(
            {"controller.quorum.voters": "1@a:1", "controller.quorum.retry.backoff.ms": "x"}
        )
    with pytest.raises(ValueError, match="positive"):
        RaftConfig.from_properties(
            {"controller.quorum.voters": "1@a:1", "controller.quorum.fetch.timeout.ms": "0"}
        )
    with pytest.raises(KeyError):
        RaftConfig.from_properties({})


def test_quorum_state_is_written_in_kafkas_format():
    text = encode_quorum_state(ElectionState(5, leader_id=1, voted_id=None), [3, 1, 2])
    assert text == (
        '{"clusterId":"","leaderId":1,"leaderEpoch":5,"votedId":-1,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}'
    )
    assert decode_quorum_state(text) == (ElectionState(5, 1, None), [1, 2, 3])


def test_quorum_state_reads_a_file_kafka_wrote_and_version_1():
    kafka = (
        '{"clusterId":"","leaderId":-1,"leaderEpoch":21,"votedId":2,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}'
    )
    assert decode_quorum_state(kafka)[0] == ElectionState(21, None, 2)
    v1 = json.dumps(
        {
            "leaderId": 3,
            "leaderEpoch": 7,
            "votedId": 3,
            "votedDirectoryId": "AAAAAAAAAAAAAAAAAAAAAA",
            "data_version": 1,
        }
    )
    assert decode_quorum_state(v1) == (ElectionState(7, 3, 3), None)


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"leaderEpoch":1}',
        '{"leaderEpoch":1,"data_version":9}',
        '{"leaderEpoch":"1","data_version":0}',
        '{"leaderEpoch":-1,"data_version":0}',
    ],
)
def test_quorum_state_refuses_a_corrupt_file(text):
    with pytest.raises(QuorumStateError):
        decode_quorum_state(text)


def test_quorum_state_file_round_trips_and_replaces_atomically(tmp_path):
    f = QuorumStateFile(tmp_path / "quorum-state")
    assert f.read() is None
    f.write(ElectionState(1, voted_id=2), [1, 2, 3])
    assert f.read() == ElectionState(1, None, 2)
    f.write(ElectionState(2, leader_id=3), [1, 2, 3])
    assert f.read() == ElectionState(2, 3, None)
    assert sorted(os.listdir(tmp_path)) == ["quorum-state"]  # no .tmp left behind
    (tmp_path / "quorum-state").write_text("{broken")
    with pytest.raises(QuorumStateError):
        f.read()


def test_quorum_state_file_ignores_a_leftover_tmp(tmp_path):
    (tmp_path / "quorum-state.tmp").write_text("half a write")
    f = QuorumStateFile(tmp_path / "quorum-state")
    assert f.read() is None
    f.write(ElectionState(4), [1])
    assert f.read() == ElectionState(4)
    assert sorted(os.listdir(tmp_path)) == ["quorum-state"]
