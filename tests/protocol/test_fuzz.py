"""Time-bounded fuzzing of the decoders: hostile bytes may only ever raise MalformedMessage.

What is fed in
--------------
* **Mutated requests.** A corpus of valid request frames for every API and every version — a
  default instance (``api.request.cls()``) and a few with every field populated with random
  values — each mutated by byte flips, bit flips, truncations, insertions, deletions, length
  fields inflated (small int32/int16 counts and compact lengths replaced by huge ones) and
  duplicated chunks. Each mutant goes through ``decode_request`` and, for mutated bodies, straight
  into the request class's decoder (at its own version and at another version of the API).
* **Random streams.** Byte streams of random frames (valid header prefixes with random bodies,
  mutated frames, wrong size prefixes, pure noise) cut into random chunks through a
  ``FrameDecoder`` and every frame that comes out through ``decode_request``.
* **Mutated responses.** The same for responses, through ``decode_response``.

What is checked
---------------
* Nothing but :class:`MalformedMessage` (and its subclasses) escapes; errors from
  ``decode_request`` carry the correlation id whenever the 8-byte fixed header prefix is there.
* No single decode takes longer than 1 s (a hang or a quadratic path shows up as a slow decode).
* Whatever decodes re-encodes, and the re-encoding decodes to the same bytes again.
* Memory: on a sample, under ``tracemalloc``, no decode allocates more than a bounded multiple of
  its input (forged counts of 2**31-1 are also pinned in ``test_primitives.py``).

Reproducing
-----------
Every run is driven by one ``random.Random(seed)``; the seed is printed at the start and in every
failure, with the offending input in hex. ``KCORE_FUZZ_SEED=<n>`` replays a seed. The default suite
spends about 25 s here; ``make soak`` runs the 10-minute variant (marked ``slow``; a fresh seed
each run unless ``KCORE_FUZZ_SEED`` is set; ``KCORE_FUZZ_SOAK_SECONDS`` changes its length).
"""

from __future__ import annotations

import os
import random
import struct
import time
import traceback
import tracemalloc
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from kcore.protocol import (
    APIS,
    Api,
    FrameDecoder,
    MalformedMessage,
    decode_request,
    decode_response,
    encode_request,
    encode_response_bytes,
)
from kcore.protocol.codegen import snake_case
from kcore.protocol.declarations import FieldDecl, StructDecl
from kcore.protocol.messages import MessageType

DEFAULT_SEED = 0x6B636F72  # "kcor"
MAX_DECODE_SECONDS = 1.0
POPULATED_PER_VERSION = 3


def fuzz_seed(default: int | None) -> int:
    """The seed from ``KCORE_FUZZ_SEED``, else ``default``, else a fresh one (soak runs)."""
    env = os.environ.get("KCORE_FUZZ_SEED")
    if env:
        return int(env, 0)
    return default if default is not None else random.SystemRandom().randrange(2**32)


def all_versions(api: Api) -> range:
    return range(api.versions.lo, api.versions.hi + 1)


# --- building valid messages with every field populated ----------------------------------------

_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_STRING_ALPHABET = "abcxyz-_.0189é€𝄞"


def _random_scalar(rng: random.Random, mt: MessageType, fd: FieldDecl, v: int, depth: int) -> Any:
    t = fd.element_type
    if fd.is_struct:
        return populate(rng, mt, fd.struct, v, depth + 1)
    if t in _INT_BITS:
        half = 2 ** (_INT_BITS[t] - 1)
        return rng.choice([0, 1, -1, half - 1, -half, rng.randrange(-half, half)])
    if t == "uint16":
        return rng.choice([0, 2**16 - 1, rng.randrange(2**16)])
    if t == "uint32":
        return rng.choice([0, 2**32 - 1, rng.randrange(2**32)])
    if t == "float64":
        return rng.choice([0.0, -1.5, 1e300, rng.random()])
    if t == "bool":
        return rng.random() < 0.5
    if t == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    if t == "string":
        return "".join(rng.choice(_STRING_ALPHABET) for _ in range(rng.randrange(12)))
    if t in ("bytes", "records"):
        return rng.randbytes(rng.randrange(48))
    raise AssertionError(f"no generator for {t}")


def populate(rng: random.Random, mt: MessageType, sd: StructDecl, version: int, depth: int = 0):
    """An instance of ``sd`` with every field present at ``version`` set to a random value."""
    values = {}
    for fd in sd.fields:
        if version not in fd.versions:
            continue
        if version in fd.nullable and rng.random() < 0.2:
            value = None
        elif fd.is_array:
            count = rng.choice([0, 1, 2, 3]) if depth < 4 else 0
            value = [_random_scalar(rng, mt, fd, version, depth) for _ in range(count)]
        else:
            value = _random_scalar(rng, mt, fd, version, depth)
        values[snake_case(fd.name)] = value
    return mt.classes[id(sd)](**values)


@dataclass(frozen=True, slots=True)
class RequestCase:
    api: Api
    version: int
    header: bytes  # request header bytes
    body: bytes

    @property
    def frame(self) -> bytes:
        return self.header + self.body


@dataclass(frozen=True, slots=True)
class ResponseCase:
    api: Api
    version: int
    frame: bytes  # without size prefix


def build_corpus(rng: random.Random) -> tuple[list[RequestCase], list[ResponseCase]]:
    """Valid frames for every API and version: a default instance plus populated ones."""
    requests, responses = [], []
    for api in APIS.values():
        for v in all_versions(api):
            bodies = [api.request.cls()] + [
                populate(rng, api.request, api.request.decl.root, v)
                for _ in range(POPULATED_PER_VERSION)
            ]
            for body in bodies:
                client_id = rng.choice([None, "", "kcore-fuzz"])
                frame = encode_request(api.key, v, rng.randrange(-(2**31), 2**31), client_id, body)
                encoded_body = body.encode(v)
                frame = frame[4:]
                header = frame[: len(frame) - len(encoded_body)]
                assert header + encoded_body == frame
                requests.append(RequestCase(api, v, header, encoded_body))
            bodies = [api.response.cls()] + [
                populate(rng, api.response, api.response.decl.root, v)
                for _ in range(POPULATED_PER_VERSION)
            ]
            for body in bodies:
                correlation_id = rng.randrange(-(2**31), 2**31)
                frame = encode_response_bytes(api.key, v, correlation_id, body)[4:]
                responses.append(ResponseCase(api, v, frame))
    rng.shuffle(requests)
    rng.shuffle(responses)
    return requests, responses


# --- mutations ---------------------------------------------------------------------------------

_BIG_INT32 = [0x7FFFFFFF, 0x7FFFFFFE, 0x40000000, -2, -(2**31), 0x10000]
_BIG_INT16 = [0x7FFF, 0x7FFE, -2, -(2**15), 0x100]
_BIG_UVARINTS = [
    bytes.fromhex("ffffffff0f"),  # 2**32 - 1
    bytes.fromhex("feffffff0f"),  # 2**32 - 2
    bytes.fromhex("ffffffff07"),  # 2**31 - 1
    bytes.fromhex("8080808008"),  # 2**31
    bytes.fromhex("ffff03"),  # 65535
    b"\x80" * 5 + b"\x01",  # overlong
]


def _inflate_length(rng: random.Random, data: bytearray) -> None:
    """Replace something that looks like a small count or length by a huge one."""
    n = len(data)
    kind = rng.randrange(3)
    for _ in range(8):  # a few tries to find a plausible length field
        if n == 0:
            return
        i = rng.randrange(n)
        if kind == 0 and i + 4 <= n and data[i : i + 3] == b"\0\0\0":
            small = data[i + 3]
            data[i : i + 4] = struct.pack(">i", rng.choice([*_BIG_INT32, small + 1]))
            return
        if kind == 1 and i + 2 <= n and data[i] == 0:
            small = data[i + 1]
            data[i : i + 2] = struct.pack(">h", rng.choice([*_BIG_INT16, small + 1]))
            return
        if kind == 2 and 0 < data[i] < 0x80:
            small = data[i]
            data[i : i + 1] = rng.choice([*_BIG_UVARINTS, bytes([min(small + 1, 0x7F)])])
            return
    i = rng.randrange(n)
    data[i : i + 4] = struct.pack(">i", rng.choice(_BIG_INT32))


def mutate(rng: random.Random, original: bytes, others: Callable[[], bytes]) -> bytes:
    """One to three random mutations of ``original``."""
    data = bytearray(original)
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        n = len(data)
        op = rng.randrange(9)
        if op == 0 and n:  # byte flips
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(n)] = rng.randrange(256)
        elif op == 1 and n:  # bit flip
            data[rng.randrange(n)] ^= 1 << rng.randrange(8)
        elif op == 2 and n:  # truncation
            del data[rng.randrange(n) :]
        elif op == 3:  # insertion
            i = rng.randint(0, n)
            data[i:i] = rng.randbytes(rng.randint(1, 8))
        elif op == 4 and n:  # deletion
            i = rng.randrange(n)
            del data[i : i + rng.randint(1, 16)]
        elif op == 5:  # length-field inflation
            _inflate_length(rng, data)
        elif op == 6 and n:  # duplicated chunk
            i = rng.randrange(n)
            chunk = data[i : i + rng.randint(1, 64)]
            j = rng.randint(0, n)
            data[j:j] = chunk * rng.choice([1, 1, 2, 5])
        elif op == 7:  # splice with another message
            other = others()
            i, j = rng.randint(0, n), rng.randint(0, len(other))
            data[i:] = other[j:]
        elif op == 8 and n:  # interesting bytes
            i = rng.randrange(n)
            data[i] = rng.choice([0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF])
    return bytes(data)


# --- the harness -------------------------------------------------------------------------------


@dataclass
class Fuzzer:
    """Runs decoders over inputs and records anything that is not a clean MalformedMessage."""

    seed: int
    rng: random.Random = field(init=False)
    decodes: int = 0
    malformed: int = 0
    slowest: tuple[float, str, bytes] = (0.0, "", b"")
    failures: dict[tuple, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        print(f"fuzz seed={self.seed} (replay with KCORE_FUZZ_SEED={self.seed})")

    def fail(self, label: str, data: bytes, problem: str, exc: BaseException | None) -> None:
        if exc is not None:
            where = traceback.extract_tb(exc.__traceback__)[-1]
            key: tuple = (type(exc).__name__, where.filename, where.lineno)
            detail = "".join(traceback.format_exception(exc, limit=-4))
        else:
            key, detail = (problem, label), ""
        if key in self.failures or len(self.failures) >= 20:
            return
        self.failures[key] = (
            f"[seed={self.seed} decode #{self.decodes}] {label}: {problem}\n"
            f"  input ({len(data)} bytes): {data.hex()}\n{detail}"
        )

    def run(
        self,
        label: str,
        data: bytes,
        decode: Callable[[bytes], Any],
        reencode: Callable[[Any], bytes] | None = None,
        correlation_id: int | None = None,
    ) -> Any:
        """Decode ``data``; on success check the result re-encodes stably."""
        self.decodes += 1
        start = time.perf_counter()
        try:
            result = decode(data)
        except MalformedMessage as e:
            self.malformed += 1
            result = None
            if correlation_id is not None and e.correlation_id != correlation_id:
                self.fail(label, data, f"error carries correlation id {e.correlation_id}", None)
        except Exception as e:  # the bug this test exists to find
            self.fail(label, data, f"raised {type(e).__name__}: {e}", e)
            return None
        elapsed = time.perf_counter() - start
        if elapsed > self.slowest[0]:
            self.slowest = (elapsed, label, data)
        if result is not None and reencode is not None:
            try:
                once = reencode(result)
                again = reencode(decode(once))
            except Exception as e:
                self.fail(label, data, f"decoded value does not re-encode: {e!r}", e)
            else:
                if once != again:
                    self.fail(label, data, "re-encoding is not stable", None)
        return result

    def check(self) -> None:
        print(f"{self.decodes} decodes, {self.malformed} malformed, slowest {self.slowest[0]:.4f}s")
        assert not self.failures, "decoders misbehaved:\n\n" + "\n\n".join(self.failures.values())
        seconds, label, data = self.slowest
        assert seconds < MAX_DECODE_SECONDS, (
            f"[seed={self.seed}] {label} took {seconds:.2f}s on {len(data)} bytes: {data.hex()}"
        )


def reencode_request(req) -> bytes:
    h = req.header
    return encode_request(req.api.key, req.version, h.correlation_id, h.client_id, req.body)[4:]


def _header_correlation_id(frame: bytes) -> int | None:
    return struct.unpack_from(">i", frame, 4)[0] if len(frame) >= 8 else None


def fuzz_requests(fz: Fuzzer, corpus: list[RequestCase], seconds: float) -> int:
    """Mutated request frames and bodies into decode_request and the body decoders."""
    rng = fz.rng
    deadline = time.monotonic() + seconds
    i = 0

    def other_body() -> bytes:
        return rng.choice(corpus).body

    while time.monotonic() < deadline or i < len(corpus):
        case = corpus[i % len(corpus)]
        i += 1
        api, v, cls = case.api, case.version, case.api.request.cls
        if rng.random() < 0.25:
            frame = mutate(rng, case.frame, lambda: rng.choice(corpus).frame)
        else:
            body = mutate(rng, case.body, other_body)
            frame = case.header + body
            fz.run(
                f"{cls.__name__}.decode(v{v})",
                body,
                lambda d, cls=cls, v=v: cls.decode(d, v),
                lambda o, v=v: o.encode(v),
            )
            other_v = rng.choice(all_versions(api))
            fz.run(
                f"{cls.__name__}.decode(v{other_v}) of a v{v} body",
                body,
                lambda d, cls=cls, v=other_v: cls.decode(d, v),
            )
        fz.run(
            f"decode_request ({api.name} v{v})",
            frame,
            decode_request,
            reencode_request,
            correlation_id=_header_correlation_id(frame),
        )
    return i


def _random_frame(rng: random.Random, corpus: list[RequestCase]) -> bytes:
    choice = rng.randrange(4)
    if choice == 0:  # a valid header prefix for a real API and version, then noise
        api = rng.choice(list(APIS.values()))
        prefix = struct.pack(
            ">hhi", api.key, rng.choice(all_versions(api)), rng.randrange(-(2**31), 2**31)
        )
        return prefix + rng.randbytes(rng.choice([0, 1, 2, 5, 16, 100, 1000]))
    if choice == 1:  # a valid frame
        return rng.choice(corpus).frame
    if choice == 2:  # a mutated frame
        return mutate(rng, rng.choice(corpus).frame, lambda: rng.choice(corpus).frame)
    return rng.randbytes(rng.choice([0, 3, 8, 9, 30, 300]))


def fuzz_streams(fz: Fuzzer, corpus: list[RequestCase], seconds: float) -> int:
    """Random byte streams through FrameDecoder, then every frame through decode_request."""
    rng = fz.rng
    deadline = time.monotonic() + seconds
    streams = 0
    while time.monotonic() < deadline:
        streams += 1
        stream = bytearray()
        for _ in range(rng.randint(1, 10)):
            frame = _random_frame(rng, corpus)
            size = len(frame)
            r = rng.random()
            if r < 0.05:
                size = rng.randrange(-(2**31), 2**31)  # a lying prefix
            elif r < 0.10:
                size = max(0, size + rng.randint(-3, 3))
            stream += struct.pack(">i", size) + frame
        if rng.random() < 0.1:
            stream = bytearray(rng.randbytes(rng.randrange(64)))  # pure noise
        decoder = FrameDecoder(max_frame_bytes=rng.choice([64, 4096, 1 << 20]))
        pos = 0
        try:
            while pos < len(stream):
                step = rng.choice([1, 2, 3, 7, 64, 1000, len(stream)])
                decoder.receive_data(bytes(stream[pos : pos + step]))
                pos += step
                while (frame := decoder.next_frame()) is not None:
                    fz.run(
                        "decode_request (stream)",
                        frame,
                        decode_request,
                        correlation_id=_header_correlation_id(frame),
                    )
        except MalformedMessage:
            pass  # a bad size prefix: the connection would be closed
        except Exception as e:
            fz.fail("FrameDecoder", bytes(stream), f"raised {type(e).__name__}: {e}", e)
    return streams


def fuzz_responses(fz: Fuzzer, corpus: list[ResponseCase], seconds: float) -> int:
    """Mutated and random response frames through decode_response."""
    rng = fz.rng
    deadline = time.monotonic() + seconds
    i = 0
    apis = list(APIS.values())
    while time.monotonic() < deadline or i < len(corpus):
        case = corpus[i % len(corpus)]
        i += 1
        api, v = case.api, case.version
        if rng.random() < 0.1:
            api = rng.choice(apis)
            v = rng.choice(all_versions(api))
            data = rng.randbytes(rng.choice([0, 4, 5, 8, 40, 400]))
        else:
            data = mutate(rng, case.frame, lambda: rng.choice(corpus).frame)
        fz.run(
            f"decode_response({api.name}, v{v})",
            data,
            lambda d, k=api.key, v=v: decode_response(k, v, d),
            lambda r, k=api.key, v=v: encode_response_bytes(k, v, r[0], r[1])[4:],
        )
    return i


# --- the tests ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus() -> tuple[list[RequestCase], list[ResponseCase]]:
    # Always the same corpus, so a seed printed by a failing test replays exactly.
    return build_corpus(random.Random(DEFAULT_SEED))


def test_fuzz_corpus_covers_every_api_and_version_and_decodes_cleanly(corpus):
    requests, responses = corpus
    expected = {(api.key, v) for api in APIS.values() for v in all_versions(api)}
    assert {(c.api.key, c.version) for c in requests} == expected
    assert {(c.api.key, c.version) for c in responses} == expected
    for c in requests:  # the mutations start from frames that really are valid
        req = decode_request(c.frame)
        assert req.body.encode(c.version) == c.body
    for c in responses:
        decode_response(c.api.key, c.version, c.frame)


def test_fuzz_mutated_requests_raise_only_malformed_message(corpus):
    fz = Fuzzer(fuzz_seed(DEFAULT_SEED))
    fuzz_requests(fz, corpus[0], seconds=10)
    fz.check()


def test_fuzz_random_streams_through_frame_decoder_raise_only_malformed_message(corpus):
    fz = Fuzzer(fuzz_seed(DEFAULT_SEED + 1))
    streams = fuzz_streams(fz, corpus[0], seconds=4)
    assert streams > 100
    fz.check()


def test_fuzz_mutated_responses_raise_only_malformed_message(corpus):
    fz = Fuzzer(fuzz_seed(DEFAULT_SEED + 2))
    fuzz_responses(fz, corpus[1], seconds=8)
    fz.check()


# Decoded objects cost more than their bytes: a one-byte element of an array becomes a Python
# object of ~100 bytes plus a list slot. 400x the input (plus a fixed allowance for the error
# message and the traceback) is generous for that and still far below what a count trusted from
# the wire would cost (2**31 elements).
ALLOC_PER_INPUT_BYTE = 400
ALLOC_FIXED = 64 * 1024


def test_fuzz_decoders_allocate_in_proportion_to_their_input(corpus):
    requests, responses = corpus
    fz = Fuzzer(fuzz_seed(DEFAULT_SEED + 3))
    rng = fz.rng
    worst = (0.0, "", b"")
    tracemalloc.start()
    try:
        for i in range(3000):
            if i % 2:
                case = requests[i % len(requests)]
                data = mutate(rng, case.frame, lambda: rng.choice(requests).frame)

                def decode(d):
                    return decode_request(d)

                label = f"decode_request ({case.api.name} v{case.version})"
            else:
                rcase = responses[i % len(responses)]
                data = mutate(rng, rcase.frame, lambda: rng.choice(responses).frame)

                def decode(d, k=rcase.api.key, v=rcase.version):
                    return decode_response(k, v, d)

                label = f"decode_response({rcase.api.name}, v{rcase.version})"
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            result = fz.run(label, data, decode)
            peak = tracemalloc.get_traced_memory()[1] - base
            del result
            ratio = (peak - ALLOC_FIXED) / max(1, len(data))
            if ratio > worst[0]:
                worst = (ratio, label, data)
    finally:
        tracemalloc.stop()
    fz.check()
    ratio, label, data = worst
    assert ratio <= ALLOC_PER_INPUT_BYTE, (
        f"[seed={fz.seed}] {label} allocated {ratio:.0f}x its {len(data)}-byte input "
        f"(beyond {ALLOC_FIXED} bytes): {data.hex()}"
    )


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_fuzz_soak_ten_minutes_raises_only_malformed_message():
    seed = fuzz_seed(None)
    total = float(os.environ.get("KCORE_FUZZ_SOAK_SECONDS", "600"))
    requests, responses = build_corpus(random.Random(seed))
    fz = Fuzzer(seed)
    fuzz_requests(fz, requests, seconds=total * 0.5)
    fuzz_streams(fz, requests, seconds=total * 0.15)
    fuzz_responses(fz, responses, seconds=total * 0.35)
    fz.check()


# --- the harness itself can fail ---------------------------------------------------------------


def test_fuzz_harness_reports_foreign_exception_with_seed_and_input():
    fz = Fuzzer(seed=1234)

    def broken(data: bytes):
        if data == b"\x01\x02":
            raise KeyError("boom")
        raise MalformedMessage("fine")

    fz.run("broken decoder", b"\x00", broken)
    fz.run("broken decoder", b"\x01\x02", broken)
    with pytest.raises(AssertionError, match=r"(?s)seed=1234 decode #2.*KeyError.*0102"):
        fz.check()


def test_fuzz_harness_reports_missing_correlation_id():
    fz = Fuzzer(seed=1)
    fz.run("decode_request", b"\0" * 8, decode_request, correlation_id=5)
    with pytest.raises(AssertionError, match="error carries correlation id 0"):
        fz.check()


def test_fuzz_harness_reports_slow_decode():
    fz = Fuzzer(seed=2)
    fz.run("sleepy", b"\xaa", lambda d: time.sleep(MAX_DECODE_SECONDS + 0.05))
    with pytest.raises(AssertionError, match=r"sleepy took .* on 1 bytes: aa"):
        fz.check()
