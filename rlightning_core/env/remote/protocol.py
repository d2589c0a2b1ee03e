"""The remote-env wire protocol (version 1): length-prefixed msgpack frames, arrays as raw little-endian buffers.

Every frame is a 4-byte unsigned big-endian payload length ``N`` followed by ``N`` bytes of msgpack: one map
with string keys whose ``"t"`` entry names the message type. Arrays travel as maps
``{"dtype": "float32", "shape": [8, 4], "data": <bin>}`` (C order, little-endian, dtype from :data:`DTYPES`);
spaces as the schema'd maps of :func:`space_to_wire`. Nothing is ever unpickled: msgpack extension types are
refused, and arrays are rebuilt with ``numpy.frombuffer`` from an allow-listed dtype. ``docs/remote-envs.md``
is the normative description, written for people implementing a client in another language.
"""

from __future__ import annotations

import hmac
import math
import socket
import struct
import time
from collections.abc import Mapping
from typing import Any

import msgpack
import numpy as np

from rlightning_core.errors import UserError

__all__ = [
    "DTYPES",
    "HANDSHAKE_MAX_BYTES",
    "PROTOCOL_VERSION",
    "ConnectionClosed",
    "ProtocolError",
    "RemoteEnvError",
    "array_from_wire",
    "array_to_wire",
    "decode",
    "encode",
    "recv_frame",
    "send_frame",
    "space_from_wire",
    "space_to_wire",
    "token_matches",
]

PROTOCOL_VERSION = 1
"""Bumped on any incompatible change; the server refuses a ``hello`` of another version."""

HANDSHAKE_MAX_BYTES = 64 * 1024
"""Largest frame the server reads before a client is authenticated."""

HEADER = struct.Struct(">I")

#: Wire dtype names and the numpy dtypes they decode to (always little-endian).
DTYPES: dict[str, np.dtype] = {
    name: np.dtype(name).newbyteorder("<")
    for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "float32", "float64")
}


class ProtocolError(Exception):
    """A peer broke the protocol. ``code`` is the error code sent back in the ``error`` message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class RemoteEnvError(UserError):
    """A remote-env run or client cannot go on (no client came, the server refused the client ...)."""


class ConnectionClosed(Exception):
    """The peer closed the connection (or it broke) before a whole frame arrived."""


# -- frames ------------------------------------------------------------------------------------------------


def _refuse_ext(code: int, _data: bytes) -> Any:
    raise ProtocolError("malformed", f"msgpack extension type {code} is not part of the protocol")


def encode(message: Mapping[str, Any]) -> bytes:
    """One message as a frame payload (msgpack, binary-safe, no extension types)."""
    return msgpack.packb(message, use_bin_type=True)


def decode(payload: bytes) -> dict[str, Any]:
    """A frame payload as a message map; anything but one msgpack map with a string ``t`` is ``malformed``."""
    try:
        message = msgpack.unpackb(payload, raw=False, strict_map_key=True, ext_hook=_refuse_ext,
                                  use_list=True)
    except ProtocolError:
        raise
    except Exception as exc:  # msgpack raises several types (ExtraData, FormatError, ValueError ...)
        raise ProtocolError("malformed", f"payload is not one msgpack message ({type(exc).__name__})") from None
    if not isinstance(message, dict) or not isinstance(message.get("t"), str):
        raise ProtocolError("malformed", "a message must be a msgpack map with a string 't' (its type)")
    return message


def send_frame(sock: socket.socket, message: Mapping[str, Any]) -> None:
    """Encode ``message`` and write it as one frame."""
    payload = encode(message)
    sock.sendall(HEADER.pack(len(payload)) + payload)


def recv_exact(sock: socket.socket, n: int, deadline: float | None) -> bytes:
    """Exactly ``n`` bytes from ``sock``.

    Raises ``TimeoutError`` past ``deadline`` and :class:`ConnectionClosed` if the peer goes away.
    """
    view = bytearray(n)
    got = 0
    while got < n:
        if deadline is not None:  # bytes already received are read even past the deadline
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            k = sock.recv_into(memoryview(view)[got:], n - got)
        except TimeoutError:
            raise
        except OSError as exc:
            raise ConnectionClosed(f"connection broke: {exc}") from None
        if k == 0:
            raise ConnectionClosed("peer closed the connection")
        got += k
    return bytes(view)


def recv_frame(sock: socket.socket, *, max_bytes: int, timeout: float | None) -> dict[str, Any]:
    """Read one frame and decode it.

    Raises:
        TimeoutError: no whole frame within ``timeout`` seconds.
        ConnectionClosed: the peer went away.
        ProtocolError: ``frame_too_large`` (checked on the header, before reading the payload), or
            ``malformed``.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    (n,) = HEADER.unpack(recv_exact(sock, HEADER.size, deadline))
    if n == 0:
        raise ProtocolError("malformed", "empty frame")
    if n > max_bytes:
        raise ProtocolError("frame_too_large", f"frame of {n} bytes exceeds the limit of {max_bytes} bytes")
    return decode(recv_exact(sock, n, deadline))


# -- arrays ------------------------------------------------------------------------------------------------


def array_to_wire(array: Any) -> dict[str, Any]:
    """``{"dtype", "shape", "data"}`` of an array (converted to little-endian C order when it is not)."""
    a = np.asarray(array)
    name = a.dtype.name if a.dtype.kind in "biuf" else None  # the name ignores byte order ('>f4' -> float32)
    if name not in DTYPES:
        raise ProtocolError("malformed", f"dtype {a.dtype} cannot travel (allowed: {', '.join(DTYPES)})")
    a = a.astype(DTYPES[name], order="C", copy=False)  # keeps 0-d shapes, unlike ascontiguousarray
    return {"dtype": name, "shape": list(a.shape), "data": a.tobytes()}


def array_from_wire(value: Any, what: str) -> np.ndarray:
    """Rebuild an array sent by :func:`array_to_wire`; every field is checked (``what`` names it in errors)."""
    if not isinstance(value, dict) or set(value) != {"dtype", "shape", "data"}:
        raise ProtocolError("malformed", f"{what}: an array is a map of exactly dtype, shape and data")
    name, shape, data = value["dtype"], value["shape"], value["data"]
    if not isinstance(name, str) or name not in DTYPES:
        raise ProtocolError("malformed", f"{what}: dtype {name!r} is not one of {', '.join(DTYPES)}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in shape):
        raise ProtocolError("malformed", f"{what}: shape must be a list of non-negative ints, got {shape!r}")
    if not isinstance(data, bytes):
        raise ProtocolError("malformed", f"{what}: data must be msgpack bin")
    dt = DTYPES[name]
    expected = math.prod(shape) * dt.itemsize
    if len(data) != expected:
        raise ProtocolError("malformed", f"{what}: {len(data)} bytes of data for shape {shape} {name} "
                                         f"(expected {expected})")
    return np.frombuffer(data, dtype=dt).reshape(shape)  # read-only view of the frame; callers copy


# -- spaces ------------------------------------------------------------------------------------------------


def space_to_wire(space: Any) -> dict[str, Any]:
    """A Gymnasium space as a schema'd map (``box``, ``discrete``, ``multi_discrete``, ``multi_binary``, ``dict``).

    A ``Dict`` observation space (or its :class:`~rlightning_core.spaces.FlatDict`) travels as ``dict``: a map of
    its keys' spaces (``Box`` or ``MultiBinary``). Its observations travel flat, in the FlatDict layout: the keys in
    sorted order, each flattened in C order, as one ``float32`` array (``uint8`` when every key is ``uint8``).
    """
    from gymnasium import spaces

    from rlightning_core.spaces import FlatDict

    if isinstance(space, FlatDict):
        space = space.dict_space
    if isinstance(space, spaces.Dict):
        try:
            FlatDict(space)  # the keys it can lay out flat (Box, MultiBinary)
        except TypeError as exc:
            raise ProtocolError("unsupported_space", f"this Dict space cannot travel: {exc}") from None
        return {"kind": "dict", "spaces": {str(k): space_to_wire(v) for k, v in space.spaces.items()}}
    if isinstance(space, spaces.Box):
        return {"kind": "box", "shape": list(space.shape), "dtype": np.dtype(space.dtype).name,
                "low": array_to_wire(space.low), "high": array_to_wire(space.high)}
    if isinstance(space, spaces.Discrete):
        return {"kind": "discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {"kind": "multi_discrete", "nvec": array_to_wire(space.nvec.astype(np.int64)),
                "start": array_to_wire(space.start.astype(np.int64))}
    if isinstance(space, spaces.MultiBinary):
        return {"kind": "multi_binary", "n": [int(k) for k in np.atleast_1d(space.n)]}
    raise ProtocolError("unsupported_space", f"{type(space).__name__} spaces cannot travel (supported: Box, "
                                             "Discrete, MultiDiscrete, MultiBinary)")


def _int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProtocolError("malformed", f"{what} must be an int, got {value!r}")
    return value


def space_from_wire(value: Any, what: str) -> Any:
    """Rebuild a Gymnasium space from :func:`space_to_wire`'s map; raises ``malformed`` on any bad field."""
    from gymnasium import spaces

    if not isinstance(value, dict) or not isinstance(value.get("kind"), str):
        raise ProtocolError("malformed", f"{what}: a space is a map with a string 'kind'")
    kind = value["kind"]
    try:
        if kind == "box":
            low = array_from_wire(value.get("low"), f"{what}.low")
            high = array_from_wire(value.get("high"), f"{what}.high")
            shape = value.get("shape")
            dtype = value.get("dtype")
            if dtype not in DTYPES or list(low.shape) != shape or list(high.shape) != shape:
                raise ProtocolError("malformed", f"{what}: box shape/dtype disagree with low/high")
            return spaces.Box(low=low, high=high, shape=tuple(shape), dtype=np.dtype(dtype))
        if kind == "discrete":
            return spaces.Discrete(_int(value.get("n"), f"{what}.n"), start=_int(value.get("start", 0),
                                                                                   f"{what}.start"))
        if kind == "multi_discrete":
            nvec = array_from_wire(value.get("nvec"), f"{what}.nvec")
            start = array_from_wire(value["start"], f"{what}.start") if "start" in value else None
            return spaces.MultiDiscrete(nvec, start=start)
        if kind == "dict":
            from rlightning_core.spaces import FlatDict

            subs = value.get("spaces")
            if not isinstance(subs, dict) or not subs or not all(isinstance(k, str) for k in subs):
                raise ProtocolError("malformed", f"{what}.spaces must be a non-empty map of key -> space")
            inner = {k: space_from_wire(v, f"{what}.spaces.{k}") for k, v in subs.items()}
            return FlatDict(spaces.Dict(inner))
        if kind == "multi_binary":
            n = value.get("n")
            if not isinstance(n, list) or not n:
                raise ProtocolError("malformed", f"{what}.n must be a non-empty list of ints")
            return spaces.MultiBinary([_int(k, f"{what}.n") for k in n] if len(n) > 1 else _int(n[0], what))
    except ProtocolError:
        raise
    except Exception as exc:  # gymnasium rejects inconsistent bounds, negative sizes ...
        raise ProtocolError("malformed", f"{what}: {type(exc).__name__}: {exc}") from None
    raise ProtocolError("unsupported_space", f"{what}: unknown space kind {kind!r}")


def token_matches(given: Any, expected: str) -> bool:
    """Constant-time comparison of the token a client sent with the server's."""
    if not isinstance(given, str):
        return False
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))
