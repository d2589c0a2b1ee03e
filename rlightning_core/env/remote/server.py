"""The env server's network side: listening socket, handshakes, heartbeats, and the connected clients.

Threads: one acceptor (handshakes each run in a short-lived thread, bounded in number) and one heartbeat thread.
A connection that sends nothing cannot keep a real client out, and refusals are logged rate-limited
(:mod:`rlightning_core.env.remote.admission`).
Request/reply traffic of resets and steps runs on the caller's thread (the env worker's), holding the client's
lock, so the hot path costs one ``sendall`` and one read per client and step. The heartbeat thread only pings a
client whose lock it can take without waiting, so it never delays a step.
"""

from __future__ import annotations

import itertools
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from rlightning_core.env.remote.admission import MAX_PENDING_HANDSHAKES, PendingHandshakes, RefusalLog
from rlightning_core.env.remote.protocol import (
    HANDSHAKE_MAX_BYTES,
    PROTOCOL_VERSION,
    ConnectionClosed,
    ProtocolError,
    recv_frame,
    send_frame,
    space_from_wire,
    token_matches,
)

__all__ = ["MAX_PENDING_HANDSHAKES", "ClientConn", "EnvServer"]

log = logging.getLogger("rlightning.remote")


class ClientConn:
    """One authenticated client: its socket, what it offered in ``hello``, and its liveness."""

    def __init__(self, sock: socket.socket, peer: tuple[str, int], hello: dict[str, Any], client_id: int,
                 max_frame_bytes: int) -> None:
        self.sock = sock
        self.peer = peer
        self.id = client_id
        self.name = str(hello.get("name") or "")[:100]
        self.num_envs = int(hello["num_envs"])
        self.max_frame_bytes = max_frame_bytes
        self.lock = threading.Lock()
        """Held by whoever is talking to the client (a step of the worker, or a heartbeat)."""
        self.alive = True
        self.drop_reason = ""
        self.last_io = time.monotonic()
        self.group: int | None = None
        """Slot group served, ``None`` while a standby."""
        self._seq = itertools.count(1)

    def describe(self) -> str:
        """``client 3 'lab-robot-2' (127.0.0.1:50412)`` for logs."""
        name = f" {self.name!r}" if self.name else ""
        return f"client {self.id}{name} ({self.peer[0]}:{self.peer[1]})"

    def send(self, message: dict[str, Any]) -> int:
        """Send a request (a ``seq`` is added); returns the seq. The caller holds :attr:`lock`."""
        seq = next(self._seq)
        send_frame(self.sock, {**message, "seq": seq})
        self.last_io = time.monotonic()
        return seq

    def receive(self, expect: str, seq: int | None, timeout: float) -> dict[str, Any]:
        """Read the reply of type ``expect`` (matching ``seq``); an ``error`` or anything else is a protocol error."""
        msg = recv_frame(self.sock, max_bytes=self.max_frame_bytes, timeout=timeout)
        self.last_io = time.monotonic()
        kind = msg["t"]
        if kind == "error":
            raise ProtocolError("client_error", f"{msg.get('code')}: {msg.get('message')}")
        if kind != expect or (seq is not None and msg.get("seq") != seq):
            raise ProtocolError("protocol_error", f"expected {expect!r} seq {seq}, got {kind!r} seq "
                                                  f"{msg.get('seq')!r}")
        return msg

    def close(self, reason: str, *, code: str | None = None) -> None:
        """Tell the client why (``error`` with ``code``, else ``close``), best effort, and close the socket."""
        self.alive = False
        self.drop_reason = self.drop_reason or reason
        _say_goodbye(self.sock, reason, code)


def _say_goodbye(sock: socket.socket, reason: str, code: str | None) -> None:
    try:
        sock.settimeout(0.5)
        msg = {"t": "error", "code": code, "message": reason} if code else {"t": "close", "reason": reason}
        send_frame(sock, msg)
    except OSError:
        pass
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class EnvServer:
    """Accepts env clients on ``host:port`` and keeps them alive; the worker decides what they serve.

    Args:
        host: address to bind.
        port: port to bind (``0``: any free port; see :attr:`address`).
        token: the shared secret, compared in constant time.
        envs_per_client: envs every client must offer.
        capacity: clients held at once (group owners plus standbys).
        handshake_timeout_s: time a new connection has to send its ``hello``.
        heartbeat_s: ping a client idle this long.
        heartbeat_timeout_s: drop a client whose ping is not answered this long.
        max_frame_bytes: largest frame accepted after the handshake.
        label: name used in log lines.
        clock: monotonic seconds for the refusal log's windows (a test passes its own).
    """

    def __init__(self, *, host: str, port: int, token: str, envs_per_client: int, capacity: int,
                 handshake_timeout_s: float, heartbeat_s: float, heartbeat_timeout_s: float,
                 max_frame_bytes: int, label: str = "remote", clock: Callable[[], float] = time.monotonic) -> None:
        self._token = token
        self.envs_per_client = envs_per_client
        self.capacity = capacity
        self.handshake_timeout_s = handshake_timeout_s
        self.heartbeat_s = heartbeat_s
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.max_frame_bytes = max_frame_bytes
        self.label = label
        self.cond = threading.Condition()
        """Guards :attr:`clients`, the spaces and the counters; notified when a client joins or leaves."""
        self.clients: list[ClientConn] = []
        self.space_wire: tuple[Any, Any] | None = None
        self.observation_space: Any = None
        self.action_space: Any = None
        self.refused = 0
        """Connections refused (every one counts, whether or not the rate-limited log shows it)."""
        self.disconnects = 0
        self._ids = itertools.count(1)
        self._pending = PendingHandshakes(MAX_PENDING_HANDSHAKES)
        self._refusals = RefusalLog(label, clock=clock)
        self._stop = threading.Event()
        try:
            self._listener = socket.create_server((host, port), reuse_port=False)
        except OSError as exc:
            from rlightning_core.errors import ConfigError

            raise ConfigError([f"env.params: the remote env server cannot listen on {host}:{port}: {exc}"]) from None
        self._listener.settimeout(0.25)
        bound = self._listener.getsockname()
        self.address: tuple[str, int] = (str(bound[0]), int(bound[1]))
        """``(host, port)`` actually bound (the port picked when ``port`` was 0)."""
        self._threads = [threading.Thread(target=self._accept_loop, name=f"remote-env-accept-{label}", daemon=True),
                         threading.Thread(target=self._heartbeat_loop, name=f"remote-env-heartbeat-{label}",
                                          daemon=True)]
        for t in self._threads:
            t.start()

    # -- client bookkeeping ----------------------------------------------------------------------------------

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait (on :attr:`cond`) until ``predicate()`` holds; ``False`` on timeout or when the server stops."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return False
                self.cond.wait(min(left, 0.5))
            return True

    def live_clients(self) -> list[ClientConn]:
        """Connected clients, oldest first."""
        with self.cond:
            return [c for c in self.clients if c.alive]

    def drop(self, client: ClientConn, reason: str, *, code: str = "dropped") -> None:
        """Disconnect ``client``: it is sent ``error`` with ``code``; counted and logged once.

        Its group, if it had one, is vacated by the worker on its next step.
        """
        with self.cond:
            if client not in self.clients:
                return
            self.clients.remove(client)
            self.disconnects += 1
            self.cond.notify_all()
        log.warning("remote env %s: dropped %s: %s", self.label, client.describe(), reason)
        client.close(reason, code=code)

    # -- threads ---------------------------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                sock, peer = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                time.sleep(0.05)
                continue
            entry = self._pending.enter(sock, peer)  # may close the oldest idle handshake to make room
            if entry is None:  # every place is held by a connection whose hello is being checked
                self._refuse(sock, peer, "busy", "too many connections are handshaking; retry later")
                continue
            threading.Thread(target=self._handshake, args=(entry,), daemon=True,
                             name=f"remote-env-handshake-{peer[1]}").start()

    def _refuse(self, sock: socket.socket, peer: Any, code: str, message: str) -> None:
        with self.cond:
            self.refused += 1
            self.cond.notify_all()
        self._refusals.refused(peer, code, message)
        _say_goodbye(sock, message, code)

    def _handshake(self, entry: Any) -> None:
        sock, peer = entry.sock, entry.peer
        try:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                hello = recv_frame(sock, max_bytes=HANDSHAKE_MAX_BYTES, timeout=self.handshake_timeout_s)
                if not self._pending.got_hello(entry):
                    raise ConnectionClosed("made room for a newer connection")
                client = self._admit(sock, peer, hello)
            except ProtocolError as exc:
                self._refuse(sock, peer, exc.code, exc.message)
                return
            except TimeoutError:
                self._refuse(sock, peer, "handshake_timeout", f"no hello within {self.handshake_timeout_s} s")
                return
            except (ConnectionClosed, OSError) as exc:
                if entry.evicted:  # an idle connection gave its place to a newer one
                    self._refuse(sock, peer, "busy", f"no hello yet, and all {self._pending.limit} handshake "
                                                     "places were needed; retry later")
                else:
                    self._refuse(sock, peer, "closed", f"connection closed during the handshake ({exc})")
                return
            log.info("remote env %s: %s connected (%d envs)", self.label, client.describe(), client.num_envs)
        finally:
            self._pending.leave(entry)

    def _admit(self, sock: socket.socket, peer: tuple[str, int], hello: dict[str, Any]) -> ClientConn:
        if hello["t"] != "hello":
            raise ProtocolError("malformed", f"the first message must be 'hello', got {hello['t']!r}")
        version = hello.get("protocol")
        if version != PROTOCOL_VERSION:
            raise ProtocolError("bad_version", f"this server speaks protocol {PROTOCOL_VERSION}, the client "
                                               f"{version!r}")
        if not token_matches(hello.get("token"), self._token):
            raise ProtocolError("bad_token", "wrong token")
        num_envs = hello.get("num_envs")
        if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
            raise ProtocolError("malformed", f"num_envs must be a positive int, got {num_envs!r}")
        obs_wire, act_wire = hello.get("observation_space"), hello.get("action_space")
        obs_space = space_from_wire(obs_wire, "observation_space")
        act_space = space_from_wire(act_wire, "action_space")
        if num_envs != self.envs_per_client:
            raise ProtocolError("num_envs_mismatch", f"this server takes clients of {self.envs_per_client} envs, "
                                                     f"the client offered {num_envs}")
        sock.settimeout(self.handshake_timeout_s)
        with self.cond:
            if self.space_wire is not None and self.space_wire != (obs_wire, act_wire):
                raise ProtocolError("space_mismatch", f"the run's spaces are {self.observation_space} / "
                                                      f"{self.action_space}, the client offered {obs_space} / "
                                                      f"{act_space}")
            if len(self.clients) >= self.capacity:
                raise ProtocolError("server_full", f"all {self.capacity} client places are taken")
            client = ClientConn(sock, peer, hello, next(self._ids), self.max_frame_bytes)
            with client.lock:  # welcome goes out before anyone else may talk to the client
                send_frame(sock, {"t": "welcome", "protocol": PROTOCOL_VERSION, "client_id": client.id,
                                  "heartbeat_s": self.heartbeat_s, "heartbeat_timeout_s": self.heartbeat_timeout_s,
                                  "max_frame_bytes": self.max_frame_bytes})
                if self.space_wire is None:
                    self.space_wire = (obs_wire, act_wire)
                    self.observation_space, self.action_space = obs_space, act_space
                self.clients.append(client)
                self.cond.notify_all()
        return client

    def _heartbeat_loop(self) -> None:
        period = min(self.heartbeat_s / 2, 1.0)
        while not self._stop.wait(period):
            self._refusals.flush()  # the count of a window of refusals that are over
            for client in self.live_clients():
                if time.monotonic() - client.last_io < self.heartbeat_s:
                    continue
                if not client.lock.acquire(blocking=False):
                    continue  # a step is talking to it: that is traffic enough
                try:
                    if not client.alive:
                        continue
                    client.send({"t": "ping", "time": time.time()})
                    client.receive("pong", None, timeout=self.heartbeat_timeout_s)
                except TimeoutError:
                    self.drop(client, f"no pong within {self.heartbeat_timeout_s} s", code="timeout")
                except ProtocolError as exc:
                    self.drop(client, exc.message, code=exc.code)
                except (ConnectionClosed, OSError) as exc:
                    self.drop(client, f"connection lost ({exc})", code="connection_lost")
                finally:
                    client.lock.release()

    # -- lifetime --------------------------------------------------------------------------------------------

    def close(self, reason: str = "the run is over") -> None:
        """Stop accepting, say ``close`` to every client, release the port. Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        try:
            self._listener.close()
        except OSError:
            pass
        with self.cond:
            clients, self.clients = list(self.clients), []
            self.cond.notify_all()
        for c in clients:  # closing the sockets also wakes a heartbeat waiting for a pong
            c.close(reason)
        for t in self._threads:
            t.join(timeout=5.0)
        self._refusals.flush(force=True)
