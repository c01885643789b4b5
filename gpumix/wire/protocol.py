"""The wire protocol between agents, the hub and clients.

Frames: a 4-byte big-endian length, then one UTF-8 JSON object. Every
message carries `v` (protocol version) and `type`. Limits keep a bad peer
from costing the hub memory: a frame over the limit, bad JSON, a wrong
version or an unknown type closes that one connection, never the hub.

Standard library only: the agent imports this inside training processes.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

PROTOCOL_VERSION = 1
HEADER = struct.Struct(">I")
MAX_AGENT_FRAME_BYTES = 64 * 1024  # what the hub accepts from anyone
MAX_SNAPSHOT_FRAME_BYTES = 16 * 1024 * 1024  # what a client accepts from the hub

# Messages an agent sends.
AGENT_TYPES = {"hello", "step", "steps", "transport", "bye"}  # steps: gpumix/wire/step_columns.py
# Requests a client sends; the hub answers each with one message.
CLIENT_TYPES = {"hello", "snapshot", "series", "power", "replan", "supervisor"}
ROLES = {"agent", "client"}


class ProtocolError(ValueError):
    """The peer broke the protocol; str() is the logged reason."""


def encode(message: dict[str, Any]) -> bytes:
    message = {"v": PROTOCOL_VERSION, **message}
    try:
        body = json.dumps(message, separators=(",", ":"), allow_nan=False, default=str).encode()
    except ValueError:  # a derived figure overflowed to inf/nan: send null, never fail the frame
        body = json.dumps(_finite(message), separators=(",", ":"), allow_nan=False, default=str).encode()
    return HEADER.pack(len(body)) + body


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def frame_length(header: bytes, limit: int) -> int:
    (length,) = HEADER.unpack(header)
    if length > limit:
        raise ProtocolError(f"frame of {length} bytes is over the {limit}-byte limit")
    if length == 0:
        raise ProtocolError("empty frame")
    return length


_DECODER = json.JSONDecoder()  # json.loads' own default decoder, without its per-call checks


def _loads(body: bytes | bytearray) -> Any:
    """json.loads(body), a third cheaper for the usual frame (issue 13: one decode per step the hub
    reads): a body opening with "{" and no NUL byte next is what json.loads itself reads as UTF-8
    (json.detect_encoding), decoded as it does (surrogatepass); any other goes through json.loads."""
    if body[:1] == b"{" and body[1:2] != b"\x00":
        return _DECODER.decode(body.decode("utf-8", "surrogatepass"))
    return json.loads(body)


def decode(body: bytes | bytearray, allowed_types: set[str]) -> dict[str, Any]:
    try:
        message = _loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ProtocolError(f"not JSON: {error}") from None
    if not isinstance(message, dict):
        raise ProtocolError("a message must be a JSON object")
    if message.get("v") != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {message.get('v')!r}, this hub speaks {PROTOCOL_VERSION}")
    kind = message.get("type")
    if kind not in allowed_types:
        raise ProtocolError(f"unknown message type {kind!r}")
    return message


def number(message: dict[str, Any], key: str, required: bool = False) -> float | None:
    """A finite number field, or None; ProtocolError if it is something else."""
    value = message.get(key)
    if value is None:
        if required:
            raise ProtocolError(f"'{key}' is missing")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProtocolError(f"'{key}' must be a number, got {type(value).__name__}")
    try:
        result = float(value)
    except OverflowError:
        raise ProtocolError(f"'{key}' is out of range") from None
    if not math.isfinite(result):  # json.loads takes NaN/Infinity; the snapshot could not carry them
        raise ProtocolError(f"'{key}' must be finite")
    return result


def integer(message: dict[str, Any], key: str, required: bool = False) -> int | None:
    value = message.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"'{key}' must be an integer")
    return value


def text(message: dict[str, Any], key: str, limit: int = 256) -> str | None:
    value = message.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise ProtocolError(f"'{key}' must be a string of at most {limit} characters")
    return value
