"""The API keys of kcore's cluster-mirroring RPCs (KIP-1279), kept in one table.

The proposal leaves every new RPC's key as "TBD" (spec §7.1 M-71, §20.5 A-33). Decision D-01
(``shared/spec/decisions.md``) gives them a contiguous block, in this order: CreateClusterMirror
94 ... WriteMirrorStates 104, all at version 0 and flexible from version 0.

The ``api`` line of each mirror declaration (``defs/<Name>.def``) carries the key given here;
``tests/protocol/test_mirror_declarations.py`` checks that the two agree and that no other
declaration uses these keys. Should upstream Kafka ever publish numbers for these RPCs, they
change here and in those ``api`` lines together.
"""

from __future__ import annotations

MIRROR_API_KEYS: dict[str, int] = {
    "CreateClusterMirror": 94,
    "StartMirrorTopics": 95,
    "StopMirrorTopics": 96,
    "PauseMirrorTopics": 97,
    "ResumeMirrorTopics": 98,
    "DeleteClusterMirror": 99,
    "ListClusterMirrors": 100,
    "DescribeClusterMirrors": 101,
    "BumpLeaderEpochs": 102,
    "ReadMirrorStates": 103,
    "WriteMirrorStates": 104,
}
