"""APIs, request/response headers, and whole-request decoding and encoding.

A request on the wire is ``size | header | body``; the header version follows from the body's
version (Kafka's rule):

* request header v2 (with tagged fields) for flexible body versions, v1 otherwise;
* response header v1 (tagged fields) for flexible body versions, v0 otherwise — **except
  ApiVersions**, whose response header is always v0, so a client that does not yet know which
  versions the broker speaks can still read the answer.

``decode_request`` is the server's entry point and ``encode_response`` its exit; the client side
(``kcore/client``, the tests) uses ``encode_request`` and ``decode_response``. Every decoding
failure is a :class:`~kcore.protocol.primitives.MalformedMessage` carrying the correlation id when
the fixed part of the header was readable.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from kcore.protocol import messages as m
from kcore.protocol.declarations import VersionRange
from kcore.protocol.messages import MESSAGES, Message, MessageType, ScatterBuffer
from kcore.protocol.primitives import INT32, MalformedMessage, UnsupportedVersion

API_VERSIONS_KEY = 18
UNSUPPORTED_VERSION = 35

_HEADER_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id


@dataclass(frozen=True, slots=True)
class Api:
    """One Kafka API: its key, name, versions and the types of its request and response."""

    key: int
    name: str
    versions: VersionRange
    flexible: VersionRange
    request: MessageType
    response: MessageType

    @property
    def min_version(self) -> int:
        return self.versions.lo

    @property
    def max_version(self) -> int:
        assert self.versions.hi is not None
        return self.versions.hi

    def request_header_version(self, version: int) -> int:
        return 2 if version in self.flexible else 1

    def response_header_version(self, version: int) -> int:
        if self.key == API_VERSIONS_KEY:
            return 0
        return 1 if version in self.flexible else 0


def _build_apis() -> dict[int, Api]:
    apis: dict[int, Api] = {}
    for mt in MESSAGES.values():
        decl = mt.decl
        if decl.kind != "request":
            continue
        name = decl.name.removesuffix("Request")
        response = MESSAGES[name + "Response"]
        if decl.api_key in apis:
            raise AssertionError(f"API key {decl.api_key} declared twice")
        apis[decl.api_key] = Api(decl.api_key, name, decl.versions, decl.flexible, mt, response)
    return dict(sorted(apis.items()))


#: Every API the codec knows, by key.
APIS: dict[int, Api] = _build_apis()
APIS_BY_NAME: dict[str, Api] = {api.name: api for api in APIS.values()}

RequestHeader = m.RequestHeader
ResponseHeader = m.ResponseHeader


@dataclass(slots=True)
class Request:
    """A decoded request: its header, its API and version, and its body."""

    header: Any  # RequestHeader
    api: Api
    body: Any

    @property
    def version(self) -> int:
        return self.header.request_api_version

    @property
    def correlation_id(self) -> int:
        return self.header.correlation_id


def decode_request(frame: bytes | bytearray | memoryview) -> Request:
    """Decode one request frame (without its 4-byte size prefix).

    Bytes after the body are ignored, as Kafka ignores them (see below).

    Raises :class:`UnsupportedVersion` for an unknown API key or version (the server answers
    UNSUPPORTED_VERSION; for ApiVersions, with the v0 fallback of
    :func:`api_versions_fallback_response`) and :class:`MalformedMessage` for anything else
    that does not decode. Both carry the correlation id when the header's first 8 bytes exist.
    """
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    if len(buf) < 8:
        raise MalformedMessage(f"request of {len(buf)} bytes is shorter than a request header")
    api_key, version, correlation_id = _HEADER_PREFIX.unpack_from(buf, 0)
    api = APIS.get(api_key)
    if api is None:
        raise UnsupportedVersion(
            f"unknown API key {api_key}", correlation_id, api_key=api_key, version=version
        )
    if version not in api.versions:
        raise UnsupportedVersion(
            f"{api.name} v{version} is not supported (supported: {api.versions})",
            correlation_id,
            api_key=api_key,
            version=version,
        )
    try:
        header, pos = RequestHeader.decode_from(buf, 0, api.request_header_version(version))
        body, pos = api.request.cls.decode_from(buf, pos, version)
    except MalformedMessage as e:
        e.correlation_id = correlation_id
        raise
    # Bytes after the body are ignored, as Kafka does: librdkafka up to at least 2.16 leaves
    # three stray bytes after an all-topics Metadata v9+ request (librdkafka issue #5049), and
    # refusing them would break every librdkafka metadata refresh.
    return Request(header, api, body)


def encode_request(
    api_key: int, version: int, correlation_id: int, client_id: str | None, body: Message
) -> bytes:
    """A complete request frame, size prefix included."""
    api = APIS[api_key]
    out = bytearray(b"\0\0\0\0")
    RequestHeader(
        request_api_key=api_key,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id=client_id,
    ).encode_into(out, api.request_header_version(version))
    body.encode_into(out, version)
    out[0:4] = INT32.pack(len(out) - 4)
    return bytes(out)


def encode_response(api_key: int, version: int, correlation_id: int, body: Message) -> list[Any]:
    """A complete response frame as a list of parts (size prefix first).

    Large ``records`` payloads (and file slices) stay separate parts, so the server can hand
    them to the kernel without copying; small responses come back as a single part.
    """
    api = APIS[api_key]
    out = ScatterBuffer()
    ResponseHeader(correlation_id=correlation_id).encode_into(
        out, api.response_header_version(version)
    )
    body.encode_into(out, version)
    size = out.total_size
    parts = out.parts()
    if len(parts) == 1:
        return [INT32.pack(size) + parts[0]]
    return [INT32.pack(size), *parts]


def encode_response_bytes(api_key: int, version: int, correlation_id: int, body: Message) -> bytes:
    """Like :func:`encode_response`, joined into one ``bytes`` (tests, small responses)."""
    return b"".join(bytes(p) for p in encode_response(api_key, version, correlation_id, body))


def decode_response(api_key: int, version: int, frame: bytes | bytearray | memoryview):
    """Decode a response frame (no size prefix); returns ``(correlation_id, body)``."""
    api = APIS[api_key]
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    header, pos = ResponseHeader.decode_from(buf, 0, api.response_header_version(version))
    body, pos = api.response.cls.decode_from(buf, pos, version)
    if pos != len(buf):
        raise MalformedMessage(f"{len(buf) - pos} unexpected bytes after {api.name} response")
    return header.correlation_id, body


def api_versions_fallback_response(correlation_id: int) -> bytes:
    """The answer to an ApiVersions request at a version the broker does not know.

    As Kafka does (KIP-511): a **v0** body with UNSUPPORTED_VERSION and the broker's ApiVersions
    range only, so the client retries with the highest version both sides know.
    """
    api = APIS[API_VERSIONS_KEY]
    body = api.response.cls(
        error_code=UNSUPPORTED_VERSION,
        api_keys=[
            api.response.cls.ApiVersion(
                api_key=API_VERSIONS_KEY, min_version=api.min_version, max_version=api.max_version
            )
        ],
    )
    return encode_response_bytes(API_VERSIONS_KEY, 0, correlation_id, body)
