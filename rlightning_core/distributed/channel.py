"""A direct line from the driver to the env runners on its node, for an in-driver learner's collect calls.

With the learner in the driver (``cluster.num_learners: 0``) every iteration's critical path has two hops
between the driver and each env runner: the collect request (with the new weights) and the chunk coming back.
A Ray actor call takes ~1 ms on an idle machine and 2-3 ms right after the actor computed (the request and the
reply each wake several threads of the core workers in both processes); on this project's 2-core machines
those hops were ~6 ms of an ~18 ms CartPole iteration, about what running the envs in parallel saves. A Unix
socket hop takes ~0.1 ms, so the runners on the driver's node (``cluster.local_channel``, on by default) take
their collect calls here. Ray still creates, places, restarts and kills the actors and carries every other call.

Trust: the socket lives in a fresh private directory (``tempfile.mkdtemp``, mode 0700) and a connection is only
kept after it presents the run's random token and its worker index, so what it carries (the same chunks and
stats Ray would pickle) comes from this run's own actors. Even so, messages are read with a restricted unpickler
(:func:`loads`): plain data, numpy arrays and scalars, and rlightning's own record (attrs) classes; no other
global, so no callable of the pickle's choosing runs.

The inference servers' sockets (:mod:`rlightning_core.distributed.inference`) use the same framing
(:func:`send`, :func:`receive`), token length and reader.
"""

from __future__ import annotations

import io
import os
import pickle
import secrets
import select
import shutil
import socket
import struct
import tempfile
import time
import traceback
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from rlightning_core.env.remote.protocol import ConnectionClosed, recv_exact

__all__ = ["HEADER", "TOKEN_BYTES", "ChannelHub", "ChannelLost", "ChannelTimeout", "RemoteError", "error_info",
           "fault_from_info", "fault_info", "gather", "loads", "rebuild_error", "receive", "send", "serve"]

#: Message header: kind (``H`` hello, ``Q`` request, ``K`` result, ``E`` error) and payload length.
HEADER = _HEADER = struct.Struct("!cQ")
TOKEN_BYTES = _TOKEN_BYTES = 16


#: The globals a channel message may name besides rlightning's classes: how numpy pickles arrays and scalars.
_NUMPY_GLOBALS = {("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "_reconstruct"),
                  ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "scalar"),
                  ("numpy._core.multiarray", "scalar"), ("numpy", "bool_"), ("numpy.core.numeric", "_frombuffer"),
                  ("numpy._core.numeric", "_frombuffer")}


class _DataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _NUMPY_GLOBALS or (module.startswith("numpy.dtypes") and "." not in name):
            return super().find_class(module, name)
        if (module == "rlightning_core" or module.startswith("rlightning_core.")) and "." not in name:
            found = super().find_class(module, name)
            # a record class (chunk, stats, ...): building one only sets fields; never a function or a class whose
            # constructor acts (starts processes, opens sockets)
            if isinstance(found, type) and attrs.has(found):
                return found
        raise pickle.UnpicklingError(
            f"a channel message names {module}.{name}, which is not plain data, numpy or an rlightning class; "
            "if a plugin's chunk extras, policy outputs or preprocessor state hold such objects, set "
            "cluster.local_channel: false")


def loads(payload: bytes) -> Any:
    """Read one channel message: only plain data, numpy arrays and scalars, and rlightning record classes."""
    return _DataUnpickler(io.BytesIO(payload)).load()


class ChannelLost(RuntimeError):
    """The runner's end of the channel closed (its process died, or it never connected)."""


class ChannelTimeout(RuntimeError):
    """No answer before the deadline (the runner is hung, or busy far longer than allowed)."""


class RemoteError(RuntimeError):
    """The runner's call raised something other than an env fault; the message carries its traceback."""


#: How long the driver may block writing a request (a runner that stopped reading is hung, or dead).
_REQUEST_SEND_TIMEOUT_S = 60.0


def _send(sock: socket.socket, kind: bytes, payload: bytes, timeout: float | None = None) -> None:
    """Write one message; ``timeout`` bounds the whole write (``None``: block, as a runner does for its reply)."""
    sock.settimeout(timeout)
    try:
        sock.sendall(_HEADER.pack(kind, len(payload)))
        sock.sendall(payload)
    except OSError as exc:
        raise ChannelLost(f"the channel is closed ({exc})") from None


def _recv_exact(sock: socket.socket, n: int, deadline: float | None) -> bytes:
    if deadline is None:
        sock.settimeout(None)  # wait as long as it takes (a runner waiting for its next request)
    try:
        return recv_exact(sock, n, deadline)
    except TimeoutError:
        raise ChannelTimeout("no answer before the deadline") from None
    except ConnectionClosed as exc:
        raise ChannelLost(f"the channel broke ({exc})") from None


def _recv(sock: socket.socket, deadline: float | None) -> tuple[bytes, bytes]:
    kind, n = _HEADER.unpack(_recv_exact(sock, _HEADER.size, deadline))
    return kind, _recv_exact(sock, n, deadline) if n else b""


def send(sock: socket.socket, kind: bytes, payload: bytes, timeout: float | None = None) -> None:
    """Write one framed message (``kind`` ``H``/``Q``/``K``/``E``); :class:`ChannelLost` if the peer is gone."""
    _send(sock, kind, payload, timeout)


def receive(sock: socket.socket, deadline: float | None) -> tuple[bytes, bytes]:
    """Read one framed message: its kind and payload (:class:`ChannelLost`, :class:`ChannelTimeout`)."""
    return _recv(sock, deadline)


def _plain(value: Any) -> bool:
    """Whether ``value`` is plain data the restricted unpickler reads back (numbers, strings, lists, dicts)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def _is_ours(module: str) -> bool:
    return module == "rlightning_core" or module.startswith(("rlightning_core.", "rlightning_"))


def error_info(exc: BaseException) -> dict[str, Any]:
    """What the driver needs to rebuild the error.

    An env fault stays an ``EnvStepError`` (restartable); one of rlightning's own errors (say a
    ``NonFiniteError`` from the learner) is rebuilt as itself, so the engine and the CLI treat it as they
    would in-process (a clean message, no traceback, for a run that diverged).
    """
    from rlightning_core.env.runner import EnvStepError
    from rlightning_core.errors import RlightningError

    cls = type(exc)
    info: dict[str, Any] = {"type": f"{cls.__module__}.{cls.__qualname__}", "message": str(exc),
                            "traceback": "".join(traceback.format_exception(exc))}
    if isinstance(exc, EnvStepError):
        info["env"] = {"label": exc.label, "phase": exc.phase, "kind": exc.kind}
    elif isinstance(exc, RlightningError) and _is_ours(cls.__module__) and _plain(list(exc.args)):
        info["rlightning"] = {"module": cls.__module__, "name": cls.__qualname__, "args": list(exc.args),
                              "state": {k: v for k, v in vars(exc).items() if _plain(v)}}
    return info


def _rebuild_rlightning(known: dict[str, Any]) -> BaseException | None:
    """The rlightning error :func:`error_info` described (only a class of rlightning's own errors)."""
    import importlib

    from rlightning_core.errors import RlightningError

    module, name = str(known["module"]), str(known["name"])
    if not _is_ours(module) or "." in name:
        return None
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    if not (isinstance(cls, type) and issubclass(cls, RlightningError)):
        return None
    exc = cls.__new__(cls)
    exc.args = tuple(known["args"])
    vars(exc).update(known["state"])
    return exc


def rebuild_error(info: dict[str, Any], where: str) -> BaseException:
    """The exception :func:`error_info` described, raised in ``where``.

    An ``EnvStepError``, one of rlightning's own errors, else a :class:`RemoteError` carrying the type, message
    and traceback.
    """
    from rlightning_core.env.runner import EnvStepError

    tail = f"\n\n{where}'s traceback:\n{info['traceback']}"
    if "env" in info:
        return EnvStepError(info["message"] + tail, **info["env"])
    rebuilt = _rebuild_rlightning(info["rlightning"]) if "rlightning" in info else None
    if rebuilt is not None:
        rebuilt.add_note(f"raised in {where}; its traceback:\n{info['traceback']}")
        return rebuilt
    return RemoteError(f"{where} failed: {info['type']}: {info['message']}{tail}")


def serve(path: str, token: bytes, index: int, handler: Callable[..., Any]) -> None:
    """The runner's end: answer the driver's requests with ``handler(*args)`` until it closes the channel.

    Runs on a thread of its own in the actor (the ``channel`` concurrency group).
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    with sock:
        _send(sock, b"H", token + index.to_bytes(4, "big"))
        while True:
            try:
                _, payload = _recv(sock, None)
            except ChannelLost:
                return  # the driver closed it: the run ended, or this worker is being replaced
            try:
                answer = b"K", pickle.dumps(handler(*loads(payload)), protocol=5)
            except Exception as exc:  # sent to the driver, which decides (restart, or stop the run)
                answer = b"E", pickle.dumps(error_info(exc))
            try:
                _send(sock, *answer)
            except ChannelLost:
                return  # the driver stopped waiting (it gave up on this worker) and closed the channel


class ChannelHub:
    """The driver's end: a listening Unix socket and one connection per attached env runner."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="rl-ch-")  # mode 0700: only this user reaches the socket
        self.path = os.path.join(self._dir, "hub")
        self.token = secrets.token_bytes(_TOKEN_BYTES)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # the directory goes at interpreter exit even without close() (a user's unhandled signal, an error)
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._dir, True)
        self._listener.bind(self.path)
        self._listener.listen(64)
        self.conns: dict[int, socket.socket] = {}
        self.attached = 0
        """Connections made so far (replacements of failed workers included)."""
        self._serving: dict[int, Any] = {}

    def attach(self, ray: Any, index: int, actor: Any, timeout: float) -> None:
        """Start ``actor.serve_channel`` and wait (at most ``timeout``) until it connects as worker ``index``.

        Raises the actor's own error if it fails first, :class:`ChannelTimeout` if it never connects.
        """
        self.detach(index)
        ref = actor.serve_channel.options(concurrency_group="channel").remote(self.path, self.token, index)

        def ended() -> bool:
            done, _ = ray.wait([ref], timeout=0)
            if done:
                ray.get(ref)  # raises the actor's error (e.g. it died)
            return bool(done)

        self.accept(index, ended, timeout)
        self._serving[index] = ref

    def accept(self, index: int, ended: Callable[[], bool], timeout: float) -> None:
        """Wait until worker ``index`` connects with this hub's token (other connections are dropped).

        ``ended()`` tells that the worker stopped trying (:class:`ChannelLost`); past ``timeout``:
        :class:`ChannelTimeout`.
        """
        deadline = time.monotonic() + timeout
        hello = self.token + index.to_bytes(4, "big")
        while True:
            readable, _, _ = select.select([self._listener], [], [], 0.05)
            if readable:
                conn, _ = self._listener.accept()
                try:
                    kind, payload = _recv(conn, time.monotonic() + 10.0)
                except (ChannelLost, ChannelTimeout):
                    conn.close()
                    continue
                if kind == b"H" and secrets.compare_digest(payload, hello):
                    self.conns[index] = conn
                    self.attached += 1
                    return
                conn.close()  # not this worker (or not this run): ignore it
                continue
            if ended():
                raise ChannelLost(f"env worker {index} ended its channel before connecting")
            if time.monotonic() > deadline:
                raise ChannelTimeout(f"env worker {index} did not connect its channel within {timeout:.0f}s")

    def request(self, index: int, args: tuple[Any, ...]) -> None:
        """Send one call's arguments to worker ``index`` (it runs the handler on them)."""
        _send(self.conns[index], b"Q", pickle.dumps(args, protocol=5), _REQUEST_SEND_TIMEOUT_S)

    def reply(self, index: int, deadline: float, where: str) -> Any:
        """The result of the call sent to worker ``index``.

        Its error is re-raised (:class:`EnvStepError` for an env fault); :class:`ChannelLost` if the worker
        died, :class:`ChannelTimeout` past ``deadline``.
        """
        try:
            kind, payload = _recv(self.conns[index], deadline)
        except ChannelLost as exc:
            raise ChannelLost(f"{where} died: its channel closed ({exc})") from None
        except ChannelTimeout:
            raise ChannelTimeout(f"{where} sent no answer in time (hung?)") from None
        if kind == b"K":
            return loads(payload)
        if kind == b"E":
            raise rebuild_error(loads(payload), where)
        raise ChannelLost(f"{where} sent an unexpected message {kind!r}")

    def detach(self, index: int) -> None:
        """Close worker ``index``'s connection (its ``serve_channel`` returns)."""
        conn = self.conns.pop(index, None)
        self._serving.pop(index, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """Close every connection and the listening socket; remove the socket's directory."""
        for index in list(self.conns):
            self.detach(index)
        self._listener.close()
        self._cleanup()


def gather(hub: ChannelHub, args: tuple[Any, ...], timeouts: Mapping[int, float],
           ) -> tuple[dict[int, Any], dict[int, BaseException]]:
    """Send ``args`` to every worker in ``timeouts`` at once, then read each answer (within its timeout).

    Returns the answers and the failures by worker index: :class:`ChannelLost` (died), :class:`ChannelTimeout`
    (hung) or ``EnvStepError`` (its env raised or returned NaN). A failed worker is detached; any other error
    (a bug in the worker) is raised.
    """
    from rlightning_core.env.runner import EnvStepError

    failed: dict[int, BaseException] = {}
    for i in timeouts:
        try:
            hub.request(i, args)
        except ChannelLost as exc:
            failed[i] = exc
    answers: dict[int, Any] = {}
    for i, limit in timeouts.items():
        if i in failed:
            hub.detach(i)
            continue
        try:
            answers[i] = hub.reply(i, time.monotonic() + limit, f"env worker {i}")
        except (ChannelLost, ChannelTimeout, EnvStepError) as exc:
            hub.detach(i)
            failed[i] = exc
    return answers, failed


def fault_info(exc: BaseException) -> dict[str, Any]:
    """A :func:`gather` failure as plain data, to pass it on through Ray (``EnvStepError`` has keyword fields)."""
    info: dict[str, Any] = {"kind": type(exc).__name__, "message": str(exc)}
    for key in ("label", "phase"):
        if hasattr(exc, key):
            info[key] = getattr(exc, key)
    if info["kind"] == "EnvStepError":
        info["fault"] = exc.kind  # type: ignore[attr-defined]
    return info


def fault_from_info(info: Mapping[str, Any]) -> BaseException:
    """The exception :func:`fault_info` described."""
    from rlightning_core.env.runner import EnvStepError

    if info["kind"] == "EnvStepError":
        return EnvStepError(info["message"], label=info.get("label", ""), phase=info.get("phase", "step"),
                            kind=info.get("fault", "raised"))
    return ChannelTimeout(info["message"]) if info["kind"] == "ChannelTimeout" else ChannelLost(info["message"])
