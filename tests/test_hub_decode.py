"""protocol.decode's cheaper JSON read (issue 13) gives what json.loads gave, on the usual frames and
on odd bytes: BOMs, UTF-16 and UTF-32, lone surrogates, bad UTF-8, bad JSON, bytes and bytearray."""

from __future__ import annotations

import json
import random
from typing import Any

from gpumix.wire import protocol
from gpumix.wire.protocol import ProtocolError

STEP = {"v": 1, "type": "step", "step": 7, "step_time_s": 0.1, "loss": 2.5, "samples": 32, "tag": "é€😀"}


def old_decode(body: bytes | bytearray, allowed: set[str]) -> Any:
    """protocol.decode as it was: json.loads on the bytes."""
    try:
        message = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ProtocolError(f"not JSON: {error}") from None
    if not isinstance(message, dict):
        raise ProtocolError("a message must be a JSON object")
    if message.get("v") != protocol.PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {message.get('v')!r}, this hub speaks {protocol.PROTOCOL_VERSION}")
    if message.get("type") not in allowed:
        raise ProtocolError(f"unknown message type {message.get('type')!r}")
    return message


def outcome(decode: Any, body: bytes | bytearray) -> Any:
    try:
        return ("ok", decode(body, protocol.AGENT_TYPES))
    except ProtocolError as error:
        return ("refused", str(error))


def bodies() -> list[bytes]:
    text = json.dumps(STEP, ensure_ascii=False)
    fixed = [
        text.encode(), protocol.encode(STEP)[4:], b"\xef\xbb\xbf" + text.encode(), text.encode("utf-16"),
        text.encode("utf-16-le"), text.encode("utf-32"), text.encode("utf-32-be"),
        b'{"v":1,"type":"step","s":"\xed\xa0\x80"}',  # a lone surrogate: json.loads passes it
        b'{"v":1,"type":"step","s":"\xff"}', b'{"v":1,"type":"step",}', b"{", b"{\x00", b'{"v":1,"type":"bye"}x',
        b'{"v":1,"type":"step","x":NaN}', b"[1]", b'"{"', b" {}", b"{}", b'{"v":2,"type":"step"}',
    ]
    rng = random.Random(13)
    mutated = []
    for _ in range(3000):  # bytes flipped, cut or inserted in a real frame
        body = bytearray(rng.choice(fixed[:3]))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(body))
            choice = rng.random()
            if choice < 0.4:
                body[at] = rng.randrange(256)
            elif choice < 0.7:
                del body[at:]
                body = body or bytearray(b"{")
            else:
                body[at:at] = bytes([rng.randrange(256)])
        mutated.append(bytes(body))
    return fixed + mutated


def test_decode_is_json_loads_on_usual_and_odd_bodies() -> None:
    refused = kept = 0
    for body in bodies():
        for given in (body, bytearray(body)):  # the hub's frames are bytearray slices
            new, old = outcome(protocol.decode, given), outcome(old_decode, given)
            assert repr(new) == repr(old), body
            refused += new[0] == "refused"
            kept += new[0] == "ok"
    assert refused > 100 and kept > 5  # both outcomes were exercised
