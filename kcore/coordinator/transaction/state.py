"""The states of a transactional id and the one table of legal transitions between them.

Theory of operation
-------------------
The transaction coordinator keeps, per transactional id, one :class:`TransactionState`. The
states, their byte ids (``TransactionStatus`` in the ``__transaction_state`` value) and their
names (what DescribeTransactions and ListTransactions show) are Kafka's:

* ``EMPTY`` (0): a producer id and epoch are assigned, no transaction is open. InitProducerId
  leads here; AddPartitionsToTxn / AddOffsetsToTxn leave it for ``ONGOING``.
* ``ONGOING`` (1): partitions were added; data may be in flight to them.
* ``PREPARE_COMMIT`` (2) / ``PREPARE_ABORT`` (3): EndTxn (or the coordinator itself, on a
  timeout or a fencing InitProducerId) decided the outcome and persisted it. From here the
  outcome is irrevocable: the coordinator must write COMMIT/ABORT markers to every partition of
  the transaction, even across a coordinator failover (the new coordinator finds the record on
  load and resends them).
* ``COMPLETE_COMMIT`` (4) / ``COMPLETE_ABORT`` (5): every marker was written; the transaction
  is over and its partitions are forgotten.
* ``DEAD`` (6): the transactional id expired; it is removed and a tombstone is written. It is
  never read back from the log (the tombstone is).
* ``PREPARE_EPOCH_FENCE`` (7): the coordinator bumped the epoch to fence the current producer
  and is about to abort its open transaction. It is only ever a *pending* state: the record
  that is persisted is the ``PREPARE_ABORT`` with the bumped epoch.

:data:`VALID_PREVIOUS_STATES` is the transition table, written the way Kafka's
``TransactionState`` writes it: for each target state, the states it may be entered from.
:func:`check_transition` raises :class:`IllegalTransition` for anything else, so the
coordinator cannot drift into a state the table does not show. Transitions are
*Kafka transaction version 1* ones; the extra sources of ``PREPARE_ABORT`` (``EMPTY`` and the
complete states) exist for transaction version 2's "abort without partitions" and are kept so
that a log written by a Kafka 4.x coordinator replays.

Pure: no I/O.
"""

from __future__ import annotations

import enum

__all__ = [
    "EXPIRABLE_STATES",
    "IllegalTransition",
    "TransactionState",
    "VALID_PREVIOUS_STATES",
    "check_transition",
]


class TransactionState(enum.Enum):
    """A transaction state. ``value`` is the byte id stored in the log; ``kafka_name`` is the
    name the admin APIs use."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def id(self) -> int:
        """The ``TransactionStatus`` byte of the ``__transaction_state`` value."""
        return self.value

    @property
    def kafka_name(self) -> str:
        """Kafka's name of the state ("Empty", "PrepareCommit", ...), as DescribeTransactions
        and ListTransactions report it and ListTransactions' state filter matches it."""
        return _NAMES[self]

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        """The state with log byte ``state_id``; ``ValueError`` for an unknown id."""
        return cls(state_id)

    @classmethod
    def from_kafka_name(cls, name: str) -> TransactionState | None:
        """The state called ``name`` (case-sensitive, as Kafka), or None."""
        return _BY_NAME.get(name)

    @property
    def is_prepare(self) -> bool:
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)

    @property
    def is_complete(self) -> bool:
        return self in (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)


_NAMES = {
    TransactionState.EMPTY: "Empty",
    TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit",
    TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit",
    TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead",
    TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}

_S = TransactionState

# target state -> the states it may be entered from, with the event that causes it.
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    # InitProducerId (epoch bump or new producer id); never while a transaction is open.
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    # AddPartitionsToTxn / AddOffsetsToTxn: the first add opens the transaction, later ones grow it.
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    # EndTxn(commit).
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    # EndTxn(abort), a transaction timeout, or a fencing InitProducerId (via PREPARE_EPOCH_FENCE);
    # the EMPTY / COMPLETE_* sources are transaction version 2's abort of an empty transaction.
    _S.PREPARE_ABORT: frozenset(
        {_S.ONGOING, _S.PREPARE_EPOCH_FENCE, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}
    ),
    # Every marker written.
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    # transactional.id.expiration.ms of inactivity with no transaction open.
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    # The coordinator fences the producer of an open transaction (timeout, new InitProducerId).
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}

# States in which a transactional id may expire (Kafka's ``isExpirationAllowed``).
EXPIRABLE_STATES = VALID_PREVIOUS_STATES[_S.DEAD]


class IllegalTransition(Exception):
    """A transition the table does not allow: a bug in the coordinator, never a client error."""


def check_transition(transactional_id: str, current: TransactionState, target: TransactionState):
    """Raise :class:`IllegalTransition` unless ``current -> target`` is in the table."""
    if current not in VALID_PREVIOUS_STATES[target]:
        raise IllegalTransition(
            f"transactional id {transactional_id!r}: {current.kafka_name} -> "
            f"{target.kafka_name} is not a legal transition (allowed from: "
            f"{', '.join(sorted(s.kafka_name for s in VALID_PREVIOUS_STATES[target]))})"
        )
