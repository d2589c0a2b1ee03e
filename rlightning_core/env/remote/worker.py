"""``RemoteEnvWorker``: an env server that presents its connected clients to the engine as one env worker.

The worker has a fixed number of rows (``num_envs``), split into ``num_clients`` *slot groups* of
``num_envs / num_clients`` rows; each connected client serves one group. The engine therefore always sees the
same batch shape, whoever is connected:

- A client that disconnects, times out or breaks the protocol is dropped: its episodes in flight are discarded
  (counted in ``client_dropped_episodes``) and its group becomes *vacant*. A standby client (beyond ``num_clients``,
  up to ``max_clients``) or the next client to connect takes the group over on the next step, after a reset.
- While a group is vacant, ``vacant_slots: continue`` steps the other groups and fills the vacant rows with
  placeholder transitions (the last observation, reward 0, ``truncated``: each one a cut 1-step episode that
  bootstraps from its own observation, so it carries no reward signal); ``vacant_slots: wait`` blocks the step
  until a client takes the group (``rejoin_timeout_s``).
- The step on which a client takes a group over returns its reset observations, reward 0 and ``truncated``
  with ``final_obs`` the previous observation, so a trajectory never spans two clients.

Metrics (``env/<label>/...``): ``clients_connected``, ``vacant_slots``, and the run totals
``client_disconnects``, ``client_dropped_episodes``, ``refused_connections``; ``client<g>/episode_return`` per group;
``server_port`` (the port clients connect to, so that ``metrics.jsonl`` in the run dir records it).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from rlightning_core.env.base import EpisodeStats, StepBatch
from rlightning_core.env.remote.params import RemoteEnvParams
from rlightning_core.env.remote.protocol import (
    ConnectionClosed,
    ProtocolError,
    RemoteEnvError,
    array_from_wire,
    array_to_wire,
)
from rlightning_core.env.remote.server import ClientConn, EnvServer
from rlightning_core.env.seeding import derive_seed
from rlightning_core.files import write_text_atomic

__all__ = ["RemoteEnvWorker", "make_remote_worker"]

log = logging.getLogger("rlightning.remote")

_IO_ERRORS = (TimeoutError, ConnectionClosed, ProtocolError, OSError)


def make_remote_worker(params: RemoteEnvParams, *, num_envs: int, seed: int, worker_index: int = 0,
                       render_mode: str | None = None) -> RemoteEnvWorker:
    """The ``remote`` env factory: start a server and wait for its first clients (see :class:`RemoteEnvWorker`)."""
    return RemoteEnvWorker(params, num_envs=num_envs, seed=seed, worker_index=worker_index,
                           render_mode=render_mode)


class RemoteEnvWorker:
    """An :class:`~rlightning_core.env.base.EnvWorker` whose envs are served by remote clients.

    Construction starts the server (its address is logged, kept in :attr:`address`, and written to
    ``params.address_file``) and waits up to ``connect_timeout_s`` for ``min_clients`` clients; the first
    client's spaces become the worker's.

    Args:
        params: the structured ``env[i].params``.
        num_envs: rows of the worker, a multiple of ``params.num_clients``.
        seed: used when :meth:`reset` is called without a seed, and for the resets of clients that join later.
        worker_index: index within its env config (the port is ``params.port + worker_index`` when fixed).
        render_mode: not supported (remote envs render on their own side).

    Raises:
        ConfigError: ``num_envs`` does not split into ``num_clients`` groups, the port cannot be bound, or the
            token is missing.
        RemoteEnvError: no ``min_clients`` clients connected in time.
    """

    def __init__(self, params: RemoteEnvParams, *, num_envs: int, seed: int, worker_index: int = 0,
                 render_mode: str | None = None) -> None:
        from rlightning_core.errors import ConfigError

        if num_envs % params.num_clients:
            raise ConfigError([f"env.num_envs ({num_envs}) must be a multiple of env.params.num_clients "
                               f"({params.num_clients}): every client serves num_envs / num_clients envs"])
        if render_mode is not None:
            raise ConfigError([f"env type 'remote' cannot render (render_mode={render_mode!r}): remote envs "
                               "render on the client side; give env.params.local_env to record videos locally"])
        self.params = params
        self.num_envs = num_envs
        self.seed = seed
        self.worker_index = worker_index
        self.group_size = num_envs // params.num_clients
        self.num_groups = params.num_clients
        self.label = f"{params.role}-{worker_index}"
        port = params.port + worker_index if params.port else 0
        self._server = EnvServer(host=params.host, port=port, token=params.resolve_token(),
                                 envs_per_client=self.group_size, capacity=params.capacity,
                                 handshake_timeout_s=params.handshake_timeout_s, heartbeat_s=params.heartbeat_s,
                                 heartbeat_timeout_s=params.heartbeat_timeout_s,
                                 max_frame_bytes=params.max_frame_bytes, label=self.label)
        self.address: tuple[str, int] = self._server.address
        """``(host, port)`` the server listens on (the port picked when ``params.port`` is 0)."""
        self._groups: list[ClientConn | None] = [None] * self.num_groups
        self._joins = 0
        self.dropped_episodes = 0
        self._ep_len = np.zeros(num_envs, dtype=np.int64)
        self._pending: list[tuple[int, ClientConn, int]] | None = None
        self._joined: dict[int, np.ndarray] = {}
        self._closed = False
        self._address_path: Path | None = None
        self._has_reset = False
        try:
            self._announce()
            self._wait_clients(params.wait_for, params.connect_timeout_s, "to start")
        except BaseException:
            self.close()
            raise
        self.observation_space = self._server.observation_space
        self.action_space = self._server.action_space
        self._obs = np.zeros((num_envs, *self.observation_space.shape), dtype=self.observation_space.dtype)

    # -- start -----------------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port clients connect to."""
        return self.address[1]

    def _announce(self) -> None:
        host, port = self.address
        log.info("remote env server (%s) listening on %s:%d; waiting for %d client(s) of %d envs: "
                 "rlightning env-client --connect %s:%d --num-envs %d ENV_SPEC", self.label, host, port,
                 self.params.wait_for, self.group_size, host, port, self.group_size)
        if self.params.address_file:
            path = Path(self.params.address_file)
            if self.params.role != "train" or self.worker_index:
                suffix = ("" if self.params.role == "train" else ".eval") + \
                    (f".{self.worker_index}" if self.worker_index else "")
                path = path.with_name(path.stem + suffix + path.suffix)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._address_path = path
            write_text_atomic(path, json.dumps({"host": host, "port": port, "role": self.params.role,
                                                "worker_index": self.worker_index, "pid": os.getpid()}) + "\n",
                              what="remote env address file")

    def _wait_clients(self, count: int, timeout: float, why: str) -> None:
        if not self._server.wait_for(lambda: len(self._server.clients) >= count, timeout):
            host, port = self.address
            have = len(self._server.clients)
            raise RemoteEnvError(
                f"remote env server {host}:{port} ({self.label}): {have} of {count} env client(s) connected "
                f"within {timeout:g} s {why}; start clients with `rlightning env-client --connect {host}:{port} "
                f"--num-envs {self.group_size} ENV_SPEC` (and the run's token), or raise env.params."
                f"{'connect_timeout_s' if why == 'to start' else 'rejoin_timeout_s'}")

    # -- groups ----------------------------------------------------------------------------------------------

    def _rows(self, g: int) -> slice:
        return slice(g * self.group_size, (g + 1) * self.group_size)

    def _vacate(self, g: int, reason: str, code: str = "dropped") -> None:
        """Drop group ``g``'s client (if still connected) and discard its episodes in flight."""
        client = self._groups[g]
        self._groups[g] = None
        if client is not None and client.alive:
            self._server.drop(client, reason, code=code)
        rows = self._rows(g)
        lost = int(np.count_nonzero(self._ep_len[rows]))
        if lost:
            self.dropped_episodes += lost
            log.warning("remote env %s: %d episode(s) in flight of group %d discarded", self.label, lost, g)
        self._ep_len[rows] = 0

    def _refresh(self, seed: int | None) -> None:
        """Vacate groups whose client died; give vacant groups to standby clients.

        A client taking group ``g`` is reset with ``seed + g * group_size`` (``seed=None``: a seed derived from
        the worker seed and the join count).
        """
        for g, client in enumerate(self._groups):
            if client is not None and not client.alive:
                self._vacate(g, client.drop_reason or "connection lost")
        deadline = time.monotonic() + self.params.rejoin_timeout_s
        while not all(c is not None for c in self._groups):
            self._admit(seed)
            if self.params.vacant_slots != "wait" or all(c is not None for c in self._groups):
                return
            filled = sum(c is not None for c in self._groups)
            self._wait_clients(filled + 1, max(deadline - time.monotonic(), 0.0), "to fill the vacant client groups")

    def _admit(self, seed: int | None) -> None:
        """Give vacant groups to connected clients without one, resetting each (a failing one is dropped)."""
        for client in self._server.live_clients():
            if client.group is not None:
                continue
            free = [g for g, c in enumerate(self._groups) if c is None]
            if not free:
                return
            g = free[0]
            group_seed = seed + g * self.group_size if seed is not None else \
                derive_seed(self.seed, 9, self.worker_index, g, self._joins)
            self._joins += 1
            try:
                obs = self._reset_client(client, group_seed)
            except _IO_ERRORS as exc:
                self._server.drop(client, _describe(exc), code=_code(exc))
                continue
            client.group = g
            self._groups[g] = client
            self._joined[g] = obs
            log.info("remote env %s: %s serves group %d (rows %d..%d)", self.label, client.describe(), g,
                     g * self.group_size, (g + 1) * self.group_size - 1)

    def _reset_client(self, client: ClientConn, seed: int | None) -> np.ndarray:
        if not client.lock.acquire(timeout=self.params.heartbeat_timeout_s + 1):
            raise TimeoutError("client busy")
        try:
            seq = client.send({"t": "reset", "seed": seed})
            reply = client.receive("reset_ok", seq, self.params.request_timeout_s)
            return self._check_obs(reply.get("obs"), "reset_ok.obs")
        finally:
            client.lock.release()

    def _check_obs(self, value: Any, what: str) -> np.ndarray:
        obs = array_from_wire(value, what)
        space = self._server.observation_space
        want = (self.group_size, *space.shape)
        if obs.shape != want or obs.dtype != space.dtype:
            raise ProtocolError("protocol_error", f"{what}: expected {space.dtype} {want}, got {obs.dtype} "
                                                  f"{obs.shape}")
        return obs

    # -- the EnvWorker contract ------------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every connected client; vacant groups show zeros until a client takes them over.

        Group ``g`` is seeded ``seed + g * group_size``, so row ``i`` gets ``seed + i`` (the env contract). Without
        a seed, the first reset uses the worker's seed and later ones leave each client's envs on their own RNG.
        """
        if self._pending is not None:
            raise RuntimeError("reset() while a step is pending")
        if seed is None and not self._has_reset:  # like a local worker: the first reset uses the worker seed
            seed = self.seed
        self._has_reset = True
        self._refresh(seed)
        self._joined.clear()
        for g, client in enumerate(self._groups):
            if client is None:
                continue
            try:
                group_seed = None if seed is None else seed + g * self.group_size
                self._obs[self._rows(g)] = self._reset_client(client, group_seed)
            except _IO_ERRORS as exc:
                self._vacate(g, _describe(exc), _code(exc))
        self._ep_len[:] = 0
        return self._obs.copy()

    def step_async(self, actions: np.ndarray) -> None:
        """Send every connected client its rows' actions (clients step in parallel)."""
        if self._pending is not None:
            raise RuntimeError("step_async() called twice without step_wait()")
        if len(actions) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} actions, got {len(actions)}")
        self._refresh(None)
        pending: list[tuple[int, ClientConn, int]] = []
        for g, client in enumerate(self._groups):
            if client is None or g in self._joined:
                continue
            if not client.lock.acquire(timeout=self.params.heartbeat_timeout_s + 1):
                self._vacate(g, "client busy for too long")
                continue
            try:
                seq = client.send({"t": "step", "actions": array_to_wire(actions[self._rows(g)])})
            except _IO_ERRORS as exc:
                client.lock.release()
                self._vacate(g, _describe(exc), _code(exc))
                continue
            pending.append((g, client, seq))
        self._pending = pending

    def step_wait(self) -> StepBatch:
        """Collect every client's step; vacant and just-joined groups get the placeholder rows (module doc)."""
        pending = self._pending
        if pending is None:
            raise RuntimeError("step_wait() called without step_async()")
        self._pending = None
        n = self.num_envs
        prev = self._obs
        obs = prev.copy()
        reward = np.zeros(n, dtype=np.float32)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.ones(n, dtype=bool)  # rows not stepped by a client are cut placeholders
        stepped = np.zeros(n, dtype=bool)
        final_rows: dict[int, np.ndarray] = {}
        episodes: list[EpisodeStats] = []
        metrics: dict[str, list[float]] = {}
        deadline = time.monotonic() + self.params.request_timeout_s
        for g, client, seq in pending:
            rows = self._rows(g)
            try:
                reply = client.receive("step_ok", seq, max(0.001, deadline - time.monotonic()))
                self._fill(g, reply, obs, reward, terminated, truncated, final_rows, episodes, metrics)
            except _IO_ERRORS as exc:
                client.lock.release()
                self._vacate(g, _describe(exc), _code(exc))
                obs[rows] = prev[rows]
                reward[rows], terminated[rows], truncated[rows] = 0.0, False, True
                final_rows.pop(g, None)
                continue
            client.lock.release()
            stepped[rows] = True
        for g, first in self._joined.items():
            obs[self._rows(g)] = first
        done = terminated | truncated
        final_obs = None
        if done.any():
            final_obs = obs.copy()
            placeholder = ~stepped
            final_obs[placeholder] = prev[placeholder]
            for g, rows_final in final_rows.items():
                rows = self._rows(g)
                sel = done[rows]
                final_obs[rows][sel] = rows_final[sel]
        self._joined.clear()
        self._ep_len[stepped] += 1
        self._ep_len[done] = 0
        self._obs = obs
        connected = sum(c is not None for c in self._groups)
        with self._server.cond:
            refused, disconnects = self._server.refused, self._server.disconnects
        metrics.update({"clients_connected": [float(connected)],
                        "vacant_slots": [float((self.num_groups - connected) * self.group_size)],
                        "client_disconnects": [float(disconnects)],
                        "client_dropped_episodes": [float(self.dropped_episodes)],
                        "refused_connections": [float(refused)],
                        "server_port": [float(self.address[1])]})
        return StepBatch(obs=obs, reward=reward, terminated=terminated, truncated=truncated, final_obs=final_obs,
                         episodes=episodes, metrics=metrics)

    def step(self, actions: np.ndarray) -> StepBatch:
        """``step_async(actions)`` then ``step_wait()``."""
        self.step_async(actions)
        return self.step_wait()

    def _fill(self, g: int, reply: dict[str, Any], obs: np.ndarray, reward: np.ndarray, terminated: np.ndarray,
              truncated: np.ndarray, final_rows: dict[int, np.ndarray], episodes: list[EpisodeStats],
              metrics: dict[str, list[float]]) -> None:
        """Copy one client's ``step_ok`` into the batch rows of group ``g`` (every field checked)."""
        rows, k = self._rows(g), self.group_size
        obs[rows] = self._check_obs(reply.get("obs"), "step_ok.obs")
        r = array_from_wire(reply.get("reward"), "step_ok.reward")
        term = array_from_wire(reply.get("terminated"), "step_ok.terminated")
        trunc = array_from_wire(reply.get("truncated"), "step_ok.truncated")
        if r.shape != (k,) or r.dtype.kind != "f" or term.shape != (k,) or term.dtype != bool \
                or trunc.shape != (k,) or trunc.dtype != bool:
            raise ProtocolError("protocol_error", f"step_ok: reward (float) and terminated/truncated (bool) "
                                                  f"must have shape ({k},)")
        reward[rows], terminated[rows], truncated[rows] = r, term, trunc
        if reply.get("final_obs") is not None:
            final_rows[g] = self._check_obs(reply["final_obs"], "step_ok.final_obs")
        elif (term | trunc).any():
            final_rows[g] = obs[rows]  # a client may omit final_obs; the next obs stands in
        raw_eps = reply.get("episodes", [])
        raw_metrics = reply.get("metrics", {})
        if not isinstance(raw_eps, list):
            raise ProtocolError("protocol_error", "step_ok.episodes must be a list")
        if not isinstance(raw_metrics, dict):
            raise ProtocolError("protocol_error", "step_ok.metrics must be a map of name -> list of numbers")
        for ep in raw_eps:  # everything is checked before anything is kept
            if (not isinstance(ep, list) or len(ep) != 3 or not isinstance(ep[0], int) or not 0 <= ep[0] < k
                    or not isinstance(ep[1], int | float) or not isinstance(ep[2], int)):
                raise ProtocolError("protocol_error", f"step_ok.episodes: bad entry {ep!r} (want [env_index, "
                                                      "return, length])")
        for name, values in raw_metrics.items():
            if not isinstance(name, str) or not isinstance(values, list) \
                    or not all(isinstance(v, int | float) for v in values):
                raise ProtocolError("protocol_error", f"step_ok.metrics[{name!r}] must be a list of numbers")
        for ep in raw_eps:
            episodes.append(EpisodeStats(env_index=g * k + ep[0], episode_return=float(ep[1]), length=ep[2]))
            metrics.setdefault(f"client{g}/episode_return", []).append(float(ep[1]))
        for name, values in raw_metrics.items():
            metrics.setdefault(name, []).extend(float(v) for v in values)

    # -- lifetime --------------------------------------------------------------------------------------------

    @property
    def clients(self) -> list[ClientConn]:
        """Connected clients (group owners and standbys)."""
        return self._server.live_clients()

    @property
    def server(self) -> EnvServer:
        """The network side (counters: ``refused``, ``disconnects``)."""
        return self._server

    def close(self) -> None:
        """Tell every client the run is over and stop the server. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._pending:
            for _g, client, _seq in self._pending:
                client.lock.release()
            self._pending = None
        self._server.close()
        self._remove_address_file()

    def _remove_address_file(self) -> None:
        """Remove the address file if it still names this server (a newer server may have replaced it)."""
        path = self._address_path
        try:
            if path is not None and json.loads(path.read_text()).get("port") == self.port:
                path.unlink()
        except (OSError, ValueError):
            pass

    def __repr__(self) -> str:
        return (f"RemoteEnvWorker({self.address[0]}:{self.address[1]}, num_envs={self.num_envs}, "
                f"groups={self.num_groups}x{self.group_size}, role={self.params.role!r})")


def _code(exc: BaseException) -> str:
    """The ``error`` code a dropped client is sent."""
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, ProtocolError):
        return "protocol_error" if exc.code == "client_error" else exc.code
    return "connection_lost"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "request timed out"
    if isinstance(exc, ProtocolError):
        return exc.message if exc.code == "client_error" else f"{exc.code}: {exc.message}"
    return f"connection lost ({exc})"
