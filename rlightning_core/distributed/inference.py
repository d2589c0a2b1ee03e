"""The inference-server topology (``cluster.topology: inference_server``).

Env actors keep their envs, preprocessors and the chunk bookkeeping (an :class:`~rlightning_core.env.runner.
EnvRunner`), but their policy is a :class:`RemotePolicy`: every step's observations go to a rollout actor
(:class:`InferenceServerActor`, ``cluster.num_inference_servers`` of them) that batches the observations of many env
actors into one forward pass. This is the shape for large or GPU policies, where one batched pass beats one
pass per env worker.

Pipelining: the env actors routed to a server form two halves. The server answers a half with one batched
pass as soon as all of its members have asked (or ``max_wait_s`` after the first did), so while it computes
for one half the other half is stepping its envs; the halves fall out of phase by themselves after the first
step and stay so. Routing is sticky (an env worker always talks to the same server), which stateful policies
need; env workers are spread over servers round-robin.

Transport: with ``cluster.local_channel`` (the default) an env actor on its server's node sends its ``act``
calls over a Unix socket the server listens on (the framing, token check and restricted unpickler of
:mod:`rlightning_core.distributed.channel`): ~0.1 ms a round trip instead of a Ray call's 1-5 ms, paid once per
env step. Env actors on other nodes, or with ``local_channel: false``, use Ray calls; the batching is the same.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import secrets
import shutil
import socket
import sys
import tempfile
import time
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlightning_core.distributed.collective_member import CollectiveMember
from rlightning_core.distributed.collective_member import load_plugins as _load_plugins
from rlightning_core.distributed.inference_routes import route
from rlightning_core.policy.base import BasePolicy, PolicyOutput

__all__ = ["InferenceServerActor", "RemotePolicy", "route"]

log = logging.getLogger("rlightning")


class InferenceServerActor(CollectiveMember):
    """A rollout copy of the policy serving batched ``act`` calls from many env actors (an async actor).

    Args:
        policy_cfg: the run's policy config.
        selection: the driver's plugin set.
        seed: the rollout copy's seed.
        observation_space: single-env observation space.
        action_space: single-env action space.
        half_sizes: env actors in each of the two halves routed here.
        max_wait_s: longest a request waits for the rest of its half before the batch runs anyway.
    """

    def __init__(self, policy_cfg: Any, *, selection: Sequence[str], seed: int, observation_space: Any,
                 action_space: Any, half_sizes: Sequence[int], max_wait_s: float = 0.005,
                 num_threads: int = 1) -> None:
        import torch

        from rlightning_core.policy.base import PolicyRole
        from rlightning_core.policy.group import resolve_device

        torch.set_num_threads(num_threads)
        self.plugins = _load_plugins(selection)
        self.policy = self.plugins.registry.resolve("policy", policy_cfg.type).build(
            policy_cfg.params, observation_space=observation_space, action_space=action_space,
            role=PolicyRole.ROLLOUT, device=resolve_device(policy_cfg.rollout_device, "policy.rollout_device"),
            seed=seed)
        self.half_sizes = list(half_sizes)
        self.max_wait_s = max_wait_s
        self._pending: list[list[tuple[np.ndarray, Any]]] = [[], []]
        self._deadline: list[Any] = [None, None]
        self.batches = 0
        self.requests = 0
        self.socket_requests = 0
        self.busy_s = 0.0
        self._endpoint: dict[str, Any] | None = None
        self._opening: Any = None
        self._listener: Any = None

    def _sync_modules(self) -> dict[str, Any]:
        return self.policy.modules()

    def _rollout_policy(self) -> Any:
        return self.policy

    def _weights_holder(self) -> Any:
        return self.policy

    def _after_weights(self, version: int) -> None:
        self.policy.weight_version = version
        self._note_loaded(version)

    def set_weights(self, weights: dict[str, np.ndarray], version: int) -> None:
        """Object-store strategy: copy numpy weights in."""
        self._ensure_on_device()
        self.policy.set_weights(weights, version)
        self._note_loaded(version)

    def get_weights(self) -> dict[str, np.ndarray]:
        """The rollout copy's weights (tests compare them with the learner's)."""
        return self.policy.get_weights()

    def weight_version(self) -> int:
        """Version of the weights this server acts with."""
        return int(self.policy.weight_version)

    def has_value(self) -> bool:
        """Whether the policy estimates state values (then runners bootstrap through :meth:`value`)."""
        return type(self.policy).value is not BasePolicy.value

    def stats(self) -> dict[str, float]:
        """Batches run, requests served (of them over the Unix socket), seconds of inference."""
        return {"batches": float(self.batches), "requests": float(self.requests),
                "socket_requests": float(self.socket_requests), "busy_s": self.busy_s}

    async def open_endpoint(self) -> dict[str, Any] | None:
        """Listen for ``act`` calls on a Unix socket (idempotent); its path, token and this node's id.

        ``None`` if no socket can be made here (the env actors then use Ray calls). A connection must present
        the random token before anything is served: on Linux the socket is abstract (no file; any local
        process could connect, none without the token), elsewhere it lives in a private directory.
        """
        if self._opening is None:  # env actors ask at once: one socket, one token, for all of them
            self._opening = asyncio.ensure_future(self._open_endpoint())
        return await asyncio.shield(self._opening)

    async def _open_endpoint(self) -> dict[str, Any] | None:
        import ray

        from rlightning_core.distributed.channel import TOKEN_BYTES

        if sys.platform == "linux":  # an abstract socket: no file, so nothing is left behind when Ray kills us
            path = f"\0rlightning-inference-{os.getpid()}-{secrets.token_hex(8)}"
        else:  # a private directory (mode 0700); removed at exit, which a killed actor does not reach
            folder = tempfile.mkdtemp(prefix="rl-inf-")
            weakref.finalize(self, shutil.rmtree, folder, True)
            path = os.path.join(folder, "server")
        try:
            self._listener = await asyncio.start_unix_server(self._serve_connection, path=path)
        except OSError as exc:
            log.warning("inference server: no Unix socket (%s); its env actors use Ray calls", exc)
            return None
        self._endpoint = {"path": path, "token": secrets.token_bytes(TOKEN_BYTES),
                          "node": ray.get_runtime_context().get_node_id()}
        return self._endpoint

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One env actor's connection: a hello with the token, then ``act`` requests answered in order."""
        from rlightning_core.distributed.channel import HEADER, error_info, loads

        async def read() -> tuple[bytes, bytes]:
            kind, n = HEADER.unpack(await reader.readexactly(HEADER.size))
            return kind, await reader.readexactly(n) if n else b""

        try:
            kind, payload = await asyncio.wait_for(read(), timeout=30.0)
            if kind != b"H" or self._endpoint is None or not secrets.compare_digest(payload, self._endpoint["token"]):
                return  # not one of this run's env actors
            while True:
                kind, payload = await read()
                try:
                    obs, half = loads(payload)
                    self.socket_requests += 1
                    answer = b"K", pickle.dumps(await self.act(obs, int(half)), protocol=5)
                except Exception as exc:  # the env actor raises it, as a Ray call would
                    answer = b"E", pickle.dumps(error_info(exc))
                writer.write(HEADER.pack(answer[0], len(answer[1])) + answer[1])
                await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            return  # the env actor closed its end (it was replaced, or the run ended)
        finally:
            writer.close()

    async def act(self, obs: np.ndarray, half: int) -> tuple[PolicyOutput, int]:
        """Actions for one env actor's observations, computed in a batch with the rest of its half."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        queue = self._pending[half]
        queue.append((obs, fut))
        self.requests += 1
        if len(queue) >= max(self.half_sizes[half], 1):
            self._flush(half)
        elif len(queue) == 1:
            self._deadline[half] = loop.call_later(self.max_wait_s, self._flush, half)
        return await fut

    def _flush(self, half: int) -> None:
        queue, self._pending[half] = self._pending[half], []
        if self._deadline[half] is not None:
            self._deadline[half].cancel()
            self._deadline[half] = None
        if not queue:
            return
        self._ensure_on_device()
        t0 = time.perf_counter()
        sizes = [len(o) for o, _ in queue]
        try:
            out = self.policy.act(np.concatenate([o for o, _ in queue]))
        except Exception as exc:  # every waiting env actor sees the server's own error
            for _, fut in queue:
                if not fut.done():
                    fut.set_exception(exc)
            return
        version = int(self.policy.weight_version)
        start = 0
        for (_, fut), n in zip(queue, sizes, strict=True):
            sl = slice(start, start + n)
            part = PolicyOutput(actions=out.actions[sl], extras={k: v[sl] for k, v in out.extras.items()},
                                env_actions=None if out.env_actions is None else out.env_actions[sl])
            if not fut.done():
                fut.set_result((part, version))
            start += n
        self.batches += 1
        self.busy_s += time.perf_counter() - t0

    async def value(self, obs: np.ndarray) -> np.ndarray:
        """State values (bootstrapping); rare, so answered at once, not batched."""
        self._ensure_on_device()
        return self.policy.value(obs)


class RemotePolicy(BasePolicy):
    """The env actor's stand-in for the policy: each ``act`` is one round trip to its inference server."""

    def __init__(self, server: Any, half: int, *, observation_space: Any, action_space: Any,
                 timeout_s: float = 600.0, endpoint: dict[str, Any] | None = None) -> None:
        from rlightning_core.policy.base import PolicyRole

        super().__init__(None, observation_space=observation_space, action_space=action_space,
                         role=PolicyRole.ROLLOUT)
        self.server, self.half, self.timeout_s = server, half, timeout_s
        self.sock: socket.socket | None = self._connect(endpoint) if endpoint is not None else None
        """The Unix socket to the server (same node, ``cluster.local_channel``), else ``None``: Ray calls."""

    @staticmethod
    def _connect(endpoint: dict[str, Any]) -> socket.socket | None:
        import ray

        from rlightning_core.distributed.channel import send

        if endpoint["node"] != ray.get_runtime_context().get_node_id():
            return None  # another node's server: its socket is not reachable from here
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(30.0)
            sock.connect(endpoint["path"])
            send(sock, b"H", endpoint["token"], 30.0)
        except Exception as exc:  # a socket we cannot reach: Ray calls work everywhere
            sock.close()
            log.warning("inference server socket %s unreachable (%s); using Ray calls", endpoint["path"], exc)
            return None
        return sock

    def act(self, obs: np.ndarray, *, deterministic: bool = False) -> PolicyOutput:
        """Ask the server (batched with the other env actors of this half)."""
        import ray

        obs = np.ascontiguousarray(obs)
        answer = self._socket_act(obs) if self.sock is not None else None
        if answer is None:
            answer = ray.get(self.server.act.remote(obs, self.half), timeout=self.timeout_s)
        out, version = answer
        self.weight_version = int(version)
        return out

    def _socket_act(self, obs: np.ndarray) -> tuple[PolicyOutput, int] | None:
        """One round trip over the socket; ``None`` if the socket broke (the caller asks through Ray instead).

        A dead server then surfaces as Ray's own actor-died error, and a live one keeps serving over Ray calls,
        so the driver sees the same failures on either transport. No answer in time is Ray's timeout error.
        """
        import ray

        from rlightning_core.distributed.channel import ChannelLost, ChannelTimeout, loads, rebuild_error, receive, send

        assert self.sock is not None
        try:
            send(self.sock, b"Q", pickle.dumps((obs, self.half), protocol=5), self.timeout_s)
            kind, payload = receive(self.sock, time.monotonic() + self.timeout_s)
        except ChannelLost as exc:
            log.warning("inference server socket closed (%s); asking through Ray", exc)
            self.close()
            return None
        except ChannelTimeout:
            raise ray.exceptions.GetTimeoutError(
                f"the inference server sent no actions within {self.timeout_s:.0f}s (cluster.call_timeout_s)",
            ) from None
        if kind == b"E":
            raise rebuild_error(loads(payload), "the inference server")
        out, version = loads(payload)
        return out, int(version)

    def close(self) -> None:
        """Close the socket to the server (a replaced runner's stand-in)."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def value(self, obs: np.ndarray) -> np.ndarray:
        """State values from the server."""
        import ray

        return ray.get(self.server.value.remote(np.ascontiguousarray(obs)), timeout=self.timeout_s)

    def learn(self, buffer: Any, *, progress: float = 0.0) -> dict[str, float]:
        """A stand-in never learns."""
        raise RuntimeError("RemotePolicy is a rollout stand-in; the learner learns")

    def modules(self) -> dict[str, Any]:
        """No local modules: the weights live in the server."""
        return {}
