"""The client's own exceptions, and helpers that turn response error codes into exceptions.

Two families of failure reach a caller of :mod:`kcore.client`:

* **Transport failures** are the client's own types, all under :class:`ClientError`::

      ClientError
      ├── NetworkError                 the broker could not be reached or stopped answering
      │   ├── ConnectionFailed         connect() failed: refused, unreachable, negotiation failed
      │   │   └── ConnectTimeout       ... because connect_timeout passed (also a trio.TooSlowError)
      │   └── ConnectionLost           an open connection broke; every in-flight request gets it
      │       └── ProtocolError        ... because the peer broke the protocol (garbage, an
      │                                unknown or out-of-order correlation id, a frame too large)
      ├── RequestTimeout               no response within the request timeout (a trio.TooSlowError);
      │                                the connection stays open
      └── UnsupportedVersionError      the broker (or the codec) does not speak the API/version

  ``NetworkError`` and ``RequestTimeout`` are worth retrying on a fresh connection (Kafka's
  ``NetworkException`` and ``TimeoutException`` are retriable); the others are not.

* **Kafka errors** come back inside responses as ``error_code`` fields. The client never raises
  them by itself (a response is returned as it came); :func:`first_error` and
  :func:`raise_for_error` turn them into :class:`~kcore.protocol.errors.KafkaError` when the
  caller wants that, and :data:`REFRESH_METADATA_ERRORS` says which ones mean "your metadata is
  stale" (Kafka's ``InvalidMetadataException`` family).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import trio

from kcore.protocol.errors import ErrorCode, KafkaError, error_info
from kcore.protocol.messages import Message

__all__ = [
    "AuthenticationFailed",
    "ClientError",
    "ConnectTimeout",
    "ConnectionFailed",
    "ConnectionLost",
    "NetworkError",
    "ProtocolError",
    "REFRESH_METADATA_ERRORS",
    "RequestTimeout",
    "UnsupportedVersionError",
    "first_error",
    "iter_errors",
    "is_retriable",
    "raise_for_error",
]


class ClientError(Exception):
    """Base class of every exception the client raises itself (not Kafka error codes)."""


class NetworkError(ClientError):
    """The broker could not be reached, or the connection to it broke."""


class ConnectionFailed(NetworkError):
    """A connection could not be opened (refused, unreachable, or ApiVersions failed)."""


class AuthenticationFailed(ConnectionFailed):
    """The broker refused the client's SASL authentication (wrong credentials, mechanism not
    enabled); trying again with the same settings cannot succeed."""


class ConnectTimeout(ConnectionFailed, trio.TooSlowError):
    """The TCP connect plus the ApiVersions exchange took longer than ``connect_timeout``."""


class ConnectionLost(NetworkError):
    """An open connection broke; the request may or may not have reached the broker."""


class ProtocolError(ConnectionLost):
    """The peer sent something that is not a valid response; the connection was closed."""


class RequestTimeout(ClientError, trio.TooSlowError):
    """No response arrived within the request timeout. The connection is still usable."""


class UnsupportedVersionError(ClientError):
    """No version of the API is supported by both the broker and the codec."""


# Kafka's InvalidMetadataException subclasses (and NotController): the client should refresh its
# metadata before retrying, because the error means "you asked the wrong broker".
REFRESH_METADATA_ERRORS: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.LISTENER_NOT_FOUND,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
    }
)


def is_retriable(exc: BaseException) -> bool:
    """Whether sending the request again (perhaps elsewhere) may succeed."""
    if isinstance(exc, KafkaError):
        return exc.retriable
    if isinstance(exc, AuthenticationFailed):
        return False
    return isinstance(exc, NetworkError | RequestTimeout)


def iter_errors(body: Message) -> Iterator[tuple[str, int, str | None]]:
    """Every non-zero ``error_code`` in a response, as ``(path, code, error_message)``.

    Walks the whole message (top level, topics, partitions, ...), so it works for any API.
    ``path`` names where the code sits, e.g. ``"responses[0].partitions[2]"``, with the
    ``name``/``topic``/``partition_index`` of the element when it has one, to make messages
    readable: ``"topics[orders].partitions[3]"``.
    """
    yield from _walk(body, "")


def _label(obj: Message, index: int) -> str:
    for attr in ("name", "topic", "resource_name", "partition_index", "index", "partition"):
        value = getattr(obj, attr, None) if attr in obj._fields else None
        if isinstance(value, str | int) and not isinstance(value, bool):
            return str(value)
    return str(index)


def _walk(obj: Message, path: str) -> Iterator[tuple[str, int, str | None]]:
    fields = obj._fields
    if "error_code" in fields:
        code = obj.error_code
        if code:
            message = obj.error_message if "error_message" in fields else None
            yield (path or "<response>"), code, message
    for name in fields:
        value = getattr(obj, name)
        if isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, Message):
                    yield from _walk(item, f"{path}{'.' if path else ''}{name}[{_label(item, i)}]")
        elif isinstance(value, Message):
            yield from _walk(value, f"{path}{'.' if path else ''}{name}")


def first_error(body: Message, *, ignore: Iterable[int] = ()) -> KafkaError | None:
    """The first non-zero error code in a response (not in ``ignore``) as a KafkaError, or None."""
    skip = {int(c) for c in ignore}
    for path, code, message in iter_errors(body):
        if code in skip:
            continue
        if message is None:
            message = f"{error_info(code)[2]} (at {path})"
        return KafkaError(code, message)
    return None


def raise_for_error(body: Message, *, ignore: Iterable[int] = ()) -> Message:
    """Raise the first error code of ``body`` as a KafkaError; return ``body`` when it has none.

    ``ignore`` lists codes that are not failures for this caller (e.g. TOPIC_ALREADY_EXISTS
    when creating a topic idempotently).
    """
    err = first_error(body, ignore=ignore)
    if err is not None:
        raise err
    return body
