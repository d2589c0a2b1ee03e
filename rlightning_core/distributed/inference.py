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

Transport: every ``act`` is a Ray actor call to the server (an async actor, so the calls of a half wait
together), on one node or across nodes alike.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlightning_core.distributed.collective_member import CollectiveMember
from rlightning_core.distributed.collective_member import load_plugins as _load_plugins
from rlightning_core.distributed.inference_routes import route
from rlightning_core.policy.base import BasePolicy, PolicyOutput, initial_state_of

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
        if initial_state_of(self.policy, 1) is not None:
            from rlightning_core.errors import ConfigError

            raise ConfigError([f"policy.type: {policy_cfg.type!r} is recurrent (it keeps a state per env), which an "
                               "inference server does not carry between requests; use the env_runner topology"])
        self.half_sizes = list(half_sizes)
        self.max_wait_s = max_wait_s
        self._pending: list[list[tuple[np.ndarray, Any]]] = [[], []]
        self._deadline: list[Any] = [None, None]
        self.batches = 0
        self.requests = 0
        self.busy_s = 0.0

    def _sync_modules(self) -> dict[str, Any]:
        return self.policy.rollout_modules()

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
        """Batches run, requests served, seconds of inference."""
        return {"batches": float(self.batches), "requests": float(self.requests), "busy_s": self.busy_s}

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
                 timeout_s: float = 600.0) -> None:
        from rlightning_core.policy.base import PolicyRole

        super().__init__(None, observation_space=observation_space, action_space=action_space,
                         role=PolicyRole.ROLLOUT)
        self.server, self.half, self.timeout_s = server, half, timeout_s

    def act(self, obs: np.ndarray, *, deterministic: bool = False) -> PolicyOutput:
        """Ask the server (batched with the other env actors of this half)."""
        import ray

        out, version = ray.get(self.server.act.remote(np.ascontiguousarray(obs), self.half), timeout=self.timeout_s)
        self.weight_version = int(version)
        return out

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
