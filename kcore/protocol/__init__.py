"""The Kafka wire protocol, sans-IO: bytes in, typed messages out, and back.

* :mod:`kcore.protocol.messages` — a class per declared message (``FetchRequest``, ...), with
  ``decode``/``encode`` per version, built from the declarations in ``defs/``.
* :mod:`kcore.protocol.api` — the API table (:data:`APIS`), headers, whole-request decoding and
  response encoding, the ApiVersions fallback.
* :mod:`kcore.protocol.framing` — :class:`FrameDecoder` for size-prefixed frames.
* :mod:`kcore.protocol.primitives` — the primitive types and :class:`MalformedMessage`, the one
  exception every decoding failure raises.
* :mod:`kcore.protocol.errors` — Kafka's error codes.

Nothing here performs I/O or imports ``trio``.
"""

from kcore.protocol.api import (
    APIS,
    APIS_BY_NAME,
    Api,
    Request,
    api_versions_fallback_response,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_bytes,
)
from kcore.protocol.framing import FrameDecoder
from kcore.protocol.messages import ScatterBuffer
from kcore.protocol.primitives import FrameTooLarge, MalformedMessage, UnsupportedVersion

__all__ = [
    "APIS",
    "APIS_BY_NAME",
    "Api",
    "FrameDecoder",
    "FrameTooLarge",
    "MalformedMessage",
    "Request",
    "ScatterBuffer",
    "UnsupportedVersion",
    "api_versions_fallback_response",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_bytes",
]
