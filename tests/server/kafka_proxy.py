"""A test-only TCP proxy between Kafka clients and a broker that loses Produce responses.

It reads the Kafka framing on both directions (a 4-byte size, then for a request the api key,
version and correlation id; for a response the correlation id), remembers the correlation ids
of Produce requests (api key 0) per connection, and when the broker's answer to one comes back
while ``drop`` is above zero it loses that answer — after the broker has appended the records:

* ``mode="close"``: the answer is discarded and the client's connection is closed, as a network
  failure between broker and client would; the client sees the request in flight on a broken
  connection and retries it on a new one.
* ``mode="swallow"``: the answer is discarded and the connection stays open, so the client
  waits out its request timeout before retrying.

Every other frame is passed through unchanged, byte for byte. Threads, not Trio, so that it
can sit between a synchronous client (confluent-kafka) and a broker in another thread.
The broker must advertise the proxy's address (``advertised.listeners``), or clients would
connect to the broker directly after the first Metadata answer.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

PRODUCE = 0


class _Frames:
    """Split a byte stream into whole Kafka frames (size prefix included)."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self.buf += data
        frames = []
        while len(self.buf) >= 4:
            (size,) = struct.unpack_from(">i", self.buf, 0)
            if len(self.buf) < 4 + size:
                break
            frames.append(bytes(self.buf[: 4 + size]))
            del self.buf[: 4 + size]
        return frames


class ProduceResponseDropper:
    """Listens on 127.0.0.1 (``port``) and forwards to ``upstream`` once :meth:`start` ran."""

    def __init__(self, drop: int, mode: str = "close") -> None:
        if mode not in ("close", "swallow"):
            raise ValueError(mode)
        self.drop = drop
        self.mode = mode
        self.upstream: tuple[str, int] | None = None
        self.dropped = 0  # Produce answers lost so far
        self.produce_requests = 0  # Produce requests the broker received through the proxy
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.closed = threading.Event()
        self.sockets: list[socket.socket] = []

    def start(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def close(self) -> None:
        self.closed.set()
        self.listener.close()
        with self.lock:
            for s in self.sockets:
                _shut(s)

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                broker = socket.create_connection(self.upstream, timeout=10)
                broker.settimeout(None)
            except OSError:
                client.close()
                continue
            for s in (client, broker):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.sockets += [client, broker]
            produce_ids: set[int] = set()
            threading.Thread(
                target=self._requests, args=(client, broker, produce_ids), daemon=True
            ).start()
            threading.Thread(
                target=self._responses, args=(client, broker, produce_ids), daemon=True
            ).start()

    def _requests(self, client: socket.socket, broker: socket.socket, ids: set[int]) -> None:
        frames = _Frames()
        try:
            while data := client.recv(65536):
                for frame in frames.feed(data):
                    api_key, _, correlation_id = struct.unpack_from(">hhi", frame, 4)
                    if api_key == PRODUCE:
                        with self.lock:
                            ids.add(correlation_id)
                            self.produce_requests += 1
                    broker.sendall(frame)
        except OSError:
            pass
        _shut(client)
        _shut(broker)

    def _responses(self, client: socket.socket, broker: socket.socket, ids: set[int]) -> None:
        frames = _Frames()
        try:
            while data := broker.recv(65536):
                for frame in frames.feed(data):
                    (correlation_id,) = struct.unpack_from(">i", frame, 4)
                    with self.lock:
                        lose = correlation_id in ids and self.drop > 0
                        ids.discard(correlation_id)
                        if lose:
                            self.drop -= 1
                            self.dropped += 1
                    if not lose:
                        client.sendall(frame)
                    elif self.mode == "close":
                        raise OSError("closing the client connection")
        except OSError:
            pass
        _shut(client)
        _shut(broker)


def _shut(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    s.close()
