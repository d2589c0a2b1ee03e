"""A torch-free rollout copy of PPO: the same actor-critic forward pass in numpy, for env runners on CPU.

An env runner only acts, so it does not need torch. Without it a Ray env-runner process starts sooner and
holds less memory (it never runs ``import torch``), and a small batch acts faster (a few tiny matrix products,
where torch's per-operation overhead dominates; docs/benchmarks.md has the numbers).

The copy has no weights of its own: it acts once the learner's weights arrive through
:meth:`NumpyPPORollout.set_weights` (the keys and shapes of ``PPOPolicy.get_weights``, copied bit for bit).
Sampling draws from a numpy generator seeded like the torch copy's, so rollouts stay reproducible from the
seed, though they are not the same numbers a torch copy would draw.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from rlightning_core.policy.base import BasePolicy, PolicyOutput, PolicyRole
from rlightning_ppo.params import PPOParams
from rlightning_ppo.spaces import space_info

__all__ = ["NumpyPPORollout", "make_ppo_rollout"]


def _elu(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0)))


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0)


#: The activations numpy computes like torch (``gelu`` needs ``erf``, which numpy lacks: torch copy then).
ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh, "relu": _relu, "elu": _elu, "silu": _silu,
}
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def layout(params: PPOParams, obs_dim: int, act_dim: int, discrete: bool) -> dict[str, tuple[int, ...]]:
    """Names and shapes of ``PPOPolicy.get_weights`` for these params (``ActorCritic``'s state dict)."""
    sizes = list(params.hidden_sizes)
    width = sizes[-1] if sizes else obs_dim
    out: dict[str, tuple[int, ...]] = {"net.pi_head.weight": (act_dim, width), "net.pi_head.bias": (act_dim,),
                                       "net.v_head.weight": (1, width), "net.v_head.bias": (1,)}
    if sizes and not params.shared_network:  # the fused layout: stacked actor and critic bodies
        out["net.w_in"], out["net.b_in"] = (obs_dim, 2 * sizes[0]), (2 * sizes[0],)
        for i, (a, b) in enumerate(itertools.pairwise(sizes)):
            out[f"net.w_hidden.{i}"], out[f"net.b_hidden.{i}"] = (2, a, b), (2, 1, b)
    elif sizes:  # shared: one body, registered under both names
        for body in ("pi_body", "v_body"):
            prev = obs_dim
            for i, size in enumerate(sizes):
                out[f"net.{body}.{2 * i}.weight"], out[f"net.{body}.{2 * i}.bias"] = (size, prev), (size,)
                prev = size
    if not discrete:
        out["net.log_std"] = (act_dim,)
    return out


class NumpyPPORollout(BasePolicy):
    """PPO's ``ROLLOUT`` role in numpy: :meth:`act` and :meth:`value`, weights from the learner."""

    default_buffer = "rollout"
    extras_spec = {"log_prob": ((), np.float32), "value": ((), np.float32)}

    def __init__(self, params: PPOParams, *, observation_space: Any, action_space: Any, seed: int = 0) -> None:
        super().__init__(params, observation_space=observation_space, action_space=action_space,
                         role=PolicyRole.ROLLOUT, device="cpu", seed=seed)
        obs_dim, act_dim, self.discrete = space_info(observation_space, action_space)
        self.act_fn = ACTIVATIONS[params.activation]
        self.layout = layout(params, obs_dim, act_dim, self.discrete)
        self.fused = "net.w_in" in self.layout
        self.rng = np.random.Generator(np.random.PCG64(seed + 1))
        if not self.discrete:
            self.low = np.asarray(action_space.low, dtype=np.float32)
            self.high = np.asarray(action_space.high, dtype=np.float32)
        self._w: dict[str, np.ndarray] | None = None

    # -- weights ---------------------------------------------------------------------------------------------
    def modules(self) -> dict[str, Any]:
        """No torch modules: the weights are numpy arrays (so no collective weight sync joins this copy)."""
        return {}

    def get_weights(self) -> dict[str, np.ndarray]:
        """Copies of the weights, keyed as ``PPOPolicy.get_weights``."""
        if self._w is None:
            return {}
        return {k: v.copy() for k, v in self._w.items()}

    def set_weights(self, weights: dict[str, Any], version: int | None = None) -> None:
        """Adopt the learner's weights (float32, bit for bit); names and shapes must match this policy's."""
        missing = sorted(set(self.layout) - set(weights))
        extra = sorted(set(weights) - set(self.layout))
        if missing or extra:
            raise ValueError(f"ppo rollout copy: the weights do not fit this policy (missing {missing}, "
                             f"unexpected {extra}); the learner must use the same policy.params and spaces")
        new: dict[str, np.ndarray] = {}
        for key, shape in self.layout.items():
            arr = np.array(weights[key], dtype=np.float32, copy=True)  # tensors too; never a view of a message
            if arr.shape != shape:
                raise ValueError(f"ppo rollout copy: weight {key!r} has shape {arr.shape}, expected {shape}")
            new[key] = arr
        self._w = new  # the heads transposed once here, not at every step
        self._pi_wt = new["net.pi_head.weight"].T.copy()
        self._v_wt = new["net.v_head.weight"].T.copy()
        if version is not None:
            self.weight_version = int(version)

    # -- forward ---------------------------------------------------------------------------------------------
    def _weights(self) -> dict[str, Any]:
        if self._w is None:
            raise RuntimeError("ppo rollout copy: act() before the learner's weights arrived (set_weights)")
        return self._w

    def _bodies(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        w, act = self._weights(), self.act_fn
        sizes = self.params.hidden_sizes
        if not sizes:
            return x, x
        if self.fused:
            h = act(x @ w["net.w_in"] + w["net.b_in"])
            h = h.reshape(x.shape[0], 2, -1).transpose(1, 0, 2)  # (2, B, hidden): actor, critic
            for i in range(len(sizes) - 1):
                h = act(np.matmul(h, w[f"net.w_hidden.{i}"]) + w[f"net.b_hidden.{i}"])
            return h[0], h[1]
        h = x
        for i in range(len(sizes)):
            h = act(h @ w[f"net.pi_body.{2 * i}.weight"].T + w[f"net.pi_body.{2 * i}.bias"])
        return h, h

    def _forward(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = np.asarray(obs, dtype=np.float32)
        x = x.reshape(x.shape[0], -1)
        h_pi, h_v = self._bodies(x)
        w = self._weights()
        out = h_pi @ self._pi_wt + w["net.pi_head.bias"]
        value = (h_v @ self._v_wt + w["net.v_head.bias"])[:, 0]
        return out, value.astype(np.float32, copy=False)

    def act(self, obs: np.ndarray, *, deterministic: bool = False) -> PolicyOutput:
        """Sample (or take the mode of) actions for a batch; returns log-probs and values, as ``PPOPolicy``."""
        out, value = self._forward(obs)
        if self.discrete:
            z = out - out.max(-1, keepdims=True)
            cdf = np.exp(z).cumsum(-1)
            total = cdf[:, -1:]  # the last bin always catches u * total
            if deterministic:
                actions = z.argmax(-1)
            else:
                u = self.rng.random((z.shape[0], 1), dtype=np.float32) * total
                actions = (cdf > u).argmax(-1)
            logp = z[np.arange(len(actions)), actions] - np.log(total[:, 0])
            return PolicyOutput(actions=actions.astype(np.int64, copy=False),
                                extras={"log_prob": logp.astype(np.float32, copy=False), "value": value})
        log_std = self._weights()["net.log_std"]
        if deterministic:
            actions = out
        else:
            actions = out + self.rng.standard_normal(out.shape, dtype=np.float32) * np.exp(log_std)
        z = (actions - out) * np.exp(-log_std)
        logp = (-0.5 * z * z - log_std - np.float32(_LOG_SQRT_2PI)).sum(-1)
        return PolicyOutput(actions=actions.astype(np.float32, copy=False),
                            extras={"log_prob": logp.astype(np.float32, copy=False), "value": value},
                            env_actions=np.clip(actions, self.low, self.high))

    def value(self, obs: np.ndarray) -> np.ndarray:
        """State values (bootstrapping truncated episodes and the end of a chunk)."""
        return self._forward(obs)[1]

    def learn(self, buffer: Any, *, progress: float = 0.0) -> dict[str, float]:
        """A rollout copy does not learn."""
        raise RuntimeError("learn() called on ppo's numpy rollout copy; the learner is a PPOPolicy")


def make_ppo_rollout(params: PPOParams, *, observation_space: Any, action_space: Any,
                     seed: int = 0) -> NumpyPPORollout | None:
    """A torch-free rollout copy of ``ppo``, or ``None`` when these params need torch (the ``gelu`` activation)."""
    if params.activation not in ACTIVATIONS:
        return None
    return NumpyPPORollout(params, observation_space=observation_space, action_space=action_space, seed=seed)
