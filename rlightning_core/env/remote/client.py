"""The env client: wraps any env worker (any registered env) and serves it to a run's env server.

Python API::

    from rlightning_core.env.remote import EnvClient, build_client_worker

    worker = build_client_worker("gymnasium:CartPole-v1", num_envs=8)
    EnvClient(worker, "127.0.0.1:5555", token="...").serve()   # returns when the run closes the connection

The command line does the same: ``rlightning env-client --connect 127.0.0.1:5555 --token ... gymnasium:CartPole-v1``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from rlightning_core.env.remote.protocol import (
    HANDSHAKE_MAX_BYTES,
    PROTOCOL_VERSION,
    ConnectionClosed,
    ProtocolError,
    RemoteEnvError,
    array_from_wire,
    array_to_wire,
    recv_frame,
    send_frame,
    space_to_wire,
)

__all__ = ["EnvClient", "build_client_worker", "env_config_from_spec", "parse_address"]

log = logging.getLogger("rlightning.remote")

#: Refusals a retry cannot fix (anything else — the server full, a lost connection — is retried).
FATAL_REFUSALS = frozenset({"bad_token", "bad_version", "num_envs_mismatch", "space_mismatch", "malformed",
                            "unsupported_space", "frame_too_large", "protocol_error"})
CONFIG_SUFFIXES = (".yaml", ".yml", ".toml", ".json")


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) as a tuple.

    Raises:
        UserError: not of that form.
    """
    from rlightning_core.errors import UserError

    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"--connect: expected HOST:PORT such as 127.0.0.1:5555, got {address!r}")
    return host.strip("[]"), int(port)


class EnvClient:
    """Serves ``worker`` to the env server at ``address`` until the run closes the connection.

    Args:
        worker: an env worker (``num_envs``, spaces, ``reset``, ``step``); not closed by the client.
        address: ``HOST:PORT`` or ``(host, port)`` of the server.
        token: the run's shared token.
        name: shown in the server's logs (default: ``hostname-pid``).
        reconnect: after a lost connection (or a full server), reconnect until ``retry_s`` passes without a
            session; refusals that a retry cannot fix (wrong token, version, spaces) always end the client.
        retry_s: how long to keep retrying.
        connect_timeout_s: timeout of one connection attempt and of the server's ``welcome``.
    """

    def __init__(self, worker: Any, address: str | tuple[str, int], *, token: str, name: str | None = None,
                 reconnect: bool = True, retry_s: float = 60.0, connect_timeout_s: float = 10.0) -> None:
        from rlightning_core.env.dict_obs import flatten_dict_observations

        self.worker = flatten_dict_observations(worker)  # Dict observations travel flat (protocol.space_to_wire)
        self.address = parse_address(address) if isinstance(address, str) else (address[0], int(address[1]))
        self.token = token
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.reconnect = reconnect
        self.retry_s = retry_s
        self.connect_timeout_s = connect_timeout_s
        self.sessions = 0
        """Sessions served so far (a reconnect starts a new one)."""
        self.steps = 0
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._had_session = False
        self._hello = {"t": "hello", "protocol": PROTOCOL_VERSION, "token": token, "num_envs": int(worker.num_envs),
                       "observation_space": space_to_wire(self.worker.observation_space),
                       "action_space": space_to_wire(self.worker.action_space), "name": self.name}

    def serve(self) -> str:
        """Connect and serve until the server says ``close`` (returns its reason) or :meth:`stop` is called.

        Raises:
            RemoteEnvError: refused for a reason a retry cannot fix, or no session within ``retry_s``.
        """
        host, port = self.address
        last_ok = time.monotonic()
        delay = 0.1
        while not self._stop.is_set():
            self._had_session = False
            try:
                return self._session()
            except RemoteEnvError:
                raise
            except (OSError, ConnectionClosed, ProtocolError) as exc:
                if self._stop.is_set():
                    return "stopped"
                if self._had_session:  # the retry window starts when a session ends
                    last_ok, delay = time.monotonic(), 0.1
                what = exc.message if isinstance(exc, ProtocolError) else str(exc) or type(exc).__name__
                if not self.reconnect:
                    raise RemoteEnvError(f"env client: connection to {host}:{port} failed: {what}") from None
                if time.monotonic() - last_ok > self.retry_s:
                    raise RemoteEnvError(f"env client: no session with {host}:{port} for {self.retry_s:g} s "
                                         f"(last error: {what})") from None
                log.info("env client: %s; retrying in %.1f s", what, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, 2.0)
        return "stopped"

    def stop(self) -> None:
        """Make :meth:`serve` return (from another thread)."""
        self._stop.set()
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _session(self) -> str:
        sock = socket.create_connection(self.address, timeout=self.connect_timeout_s)
        self._sock = sock
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            send_frame(sock, self._hello)
            welcome = recv_frame(sock, max_bytes=HANDSHAKE_MAX_BYTES, timeout=self.connect_timeout_s)
            if welcome["t"] == "error":
                code, message = welcome.get("code"), welcome.get("message")
                if code in FATAL_REFUSALS:
                    raise RemoteEnvError(f"env server {self.address[0]}:{self.address[1]} refused this client: "
                                         f"{code}: {message}")
                raise ProtocolError(str(code), f"refused: {code}: {message}")
            if welcome["t"] != "welcome":
                raise ProtocolError("protocol_error", f"expected 'welcome', got {welcome['t']!r}")
            self.sessions += 1
            self._had_session = True
            log.info("env client: connected to %s:%d as client %s", *self.address, welcome.get("client_id"))
            return self._serve_loop(sock, welcome)
        finally:
            self._sock = None
            try:
                sock.close()
            except OSError:
                pass

    def _serve_loop(self, sock: socket.socket, welcome: dict[str, Any]) -> str:
        idle = float(welcome.get("heartbeat_timeout_s", 30.0))
        max_bytes = int(welcome.get("max_frame_bytes", 64 * 1024 * 1024))
        worker = self.worker
        n = int(worker.num_envs)
        while not self._stop.is_set():
            msg = recv_frame(sock, max_bytes=max_bytes, timeout=idle)
            kind = msg["t"]
            if kind == "step":
                actions = array_from_wire(msg.get("actions"), "step.actions")
                if actions.shape[:1] != (n,):
                    raise ProtocolError("protocol_error", f"step.actions: expected {n} actions, got {actions.shape}")
                try:
                    batch = worker.step(np.array(actions))
                except Exception as exc:
                    self._env_failed(sock, "step", exc)
                send_frame(sock, _step_reply(msg.get("seq"), batch))
                self.steps += 1
            elif kind == "ping":
                send_frame(sock, {"t": "pong", "time": msg.get("time")})
            elif kind == "reset":
                seed = msg.get("seed")
                if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
                    raise ProtocolError("protocol_error", f"reset.seed must be a non-negative int, got {seed!r}")
                try:
                    obs = worker.reset(seed=seed)
                except Exception as exc:
                    self._env_failed(sock, "reset", exc)
                send_frame(sock, {"t": "reset_ok", "seq": msg.get("seq"), "obs": array_to_wire(obs)})
            elif kind == "close":
                log.info("env client: the server closed the session: %s", msg.get("reason"))
                return str(msg.get("reason", ""))
            elif kind == "error":  # dropped: reconnect unless a retry cannot help
                code, message = msg.get("code"), msg.get("message")
                if code in FATAL_REFUSALS:
                    raise RemoteEnvError(f"env server dropped this client: {code}: {message}")
                raise ProtocolError(str(code), f"dropped by the server: {code}: {message}")
            else:
                raise ProtocolError("protocol_error", f"unexpected message {kind!r}")
        return "stopped"

    def _env_failed(self, sock: socket.socket, what: str, exc: Exception) -> None:
        message = f"the env raised in {what}: {type(exc).__name__}: {exc}"
        try:
            send_frame(sock, {"t": "error", "code": "env_error", "message": message[:2000]})
        except OSError:
            pass
        raise RemoteEnvError(f"env client: {message}") from exc


def _step_reply(seq: Any, batch: Any) -> dict[str, Any]:
    return {
        "t": "step_ok", "seq": seq,
        "obs": array_to_wire(batch.obs),
        "reward": array_to_wire(np.asarray(batch.reward, dtype=np.float32)),
        "terminated": array_to_wire(np.asarray(batch.terminated, dtype=bool)),
        "truncated": array_to_wire(np.asarray(batch.truncated, dtype=bool)),
        "final_obs": None if batch.final_obs is None else array_to_wire(batch.final_obs),
        "episodes": [[int(e.env_index), float(e.episode_return), int(e.length)] for e in batch.episodes],
        "metrics": {str(k): [float(v) for v in vs] for k, vs in batch.metrics.items()},
    }


# -- what a client serves ----------------------------------------------------------------------------------


def env_config_from_spec(spec: str, env_name: str | None = None) -> tuple[Any, int]:
    """The env config a client serves, and its default ``num_envs``.

    ``spec`` is a config file (``.yaml``/``.yml``/``.toml``/``.json``; its ``env`` entry named ``env_name``,
    else the first) or ``TYPE:ID`` such as ``gymnasium:CartPole-v1`` (everything after the first colon is
    ``params.id``). A ``remote`` entry stands for the env its ``params.local_env`` names, with
    ``num_envs / num_clients`` envs: a client can be started from the run's own config.

    Raises:
        UserError / ConfigError: unreadable file, no such env entry, a remote entry without ``local_env``.
    """
    from rlightning_core.config.schema import EnvConfig
    from rlightning_core.errors import UserError

    path = Path(spec)
    if path.suffix.lower() in CONFIG_SUFFIXES:
        if not path.is_file():
            raise UserError(f"{spec}: no such config file")
        return _from_config_file(path, env_name)
    kind, sep, env_id = spec.partition(":")
    if not sep or not kind or not env_id:
        raise UserError(f"CONFIG_OR_ENV_SPEC: expected a config file ({', '.join(CONFIG_SUFFIXES)}) or "
                        f"TYPE:ID such as gymnasium:CartPole-v1, got {spec!r}")
    if env_name is not None:
        raise UserError("--env selects an entry of a config file; it cannot be used with a TYPE:ID spec")
    return EnvConfig(type=kind, params={"id": env_id}), 1


def _from_config_file(path: Path, env_name: str | None) -> tuple[Any, int]:
    from rlightning_core.config.loading import read_config_file
    from rlightning_core.config.schema import EnvConfig
    from rlightning_core.config.structuring import collect_errors, structure
    from rlightning_core.errors import ConfigError, UserError

    data = read_config_file(path)
    raw = data.get("env") if isinstance(data, dict) else None
    if raw is None:
        raise UserError(f"{path}: no env section to serve")
    entries = raw if isinstance(raw, list) else [raw]
    cfgs: list[EnvConfig] = []
    problems: list[str] = []
    for i, entry in enumerate(entries):
        try:
            cfgs.append(structure(entry, EnvConfig))
        except Exception as exc:
            collect_errors(exc, f"{path}: env[{i}]" if isinstance(raw, list) else f"{path}: env", problems)
    if problems:
        raise ConfigError(problems)
    chosen = cfgs[0]
    if env_name is not None:
        named = [c for c in cfgs if c.label == env_name or c.name == env_name]
        if not named:
            raise UserError(f"{path}: no env entry named {env_name!r} (entries: "
                            f"{', '.join(c.label for c in cfgs)})")
        chosen = named[0]
    if chosen.type != "remote":
        return chosen, chosen.num_envs
    params = chosen.params if isinstance(chosen.params, dict) else {}
    local = params.get("local_env")
    if not isinstance(local, dict) or "type" not in local:
        raise UserError(f"{path}: env {chosen.label!r} is a remote env (the server side) without "
                        "params.local_env; give the client the env to serve, e.g. gymnasium:CartPole-v1")
    clients = int(params.get("num_clients", 1))
    return EnvConfig(type=local["type"], params=dict(local.get("params") or {}), name=chosen.label), \
        max(1, chosen.num_envs // clients)


def build_client_worker(spec: str, *, num_envs: int | None = None, seed: int = 0, env_name: str | None = None,
                        registry: Any = None) -> Any:
    """Build the env worker a client serves from ``spec`` (see :func:`env_config_from_spec`)."""
    import attrs

    from rlightning_core.env.group import build_env_group

    cfg, default_n = env_config_from_spec(spec, env_name)
    cfg = attrs.evolve(cfg, num_envs=num_envs or default_n, num_workers=1)
    group = build_env_group([cfg], seed=seed, registry=registry)
    return group.workers[0]
