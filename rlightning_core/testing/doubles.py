"""Small test doubles: an env worker for any spaces, a tiny torch policy, a recording logger and hook observer.

Every double is a module-level class or function, so Ray pickles it by reference (``cloudpickle`` stores
``rlightning_core.testing.doubles.SpaceEnv`` by name): use them as stand-ins inside actors too. None of them
imports torch at module level.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from attrs import define, field

from rlightning_core.config.validators import ge, gt
from rlightning_core.env.base import EpisodeStats, StepBatch
from rlightning_core.hookspecs import hookimpl
from rlightning_core.policy.base import BasePolicy, PolicyOutput, PolicyRole

__all__ = [
    "HookRecorder",
    "RecordingLogger",
    "SpaceEnv",
    "SpaceEnvParams",
    "TinyPolicy",
    "TinyPolicyParams",
    "default_spaces",
    "make_space_env",
]


def default_spaces(continuous: bool = False, obs_dim: int = 4, n_actions: int = 2) -> tuple[Any, Any]:
    """``Box(-1, 1, (obs_dim,))`` observations and ``Discrete(n_actions)`` (or ``Box(-1, 1, (n_actions,))``)."""
    from gymnasium import spaces

    obs = spaces.Box(-1.0, 1.0, shape=(obs_dim,), dtype=np.float32)
    act = (spaces.Box(-1.0, 1.0, shape=(n_actions,), dtype=np.float32) if continuous
           else spaces.Discrete(n_actions))
    return obs, act


@define(frozen=True, kw_only=True)
class SpaceEnvParams:
    """Options of the ``testing-env`` double."""

    obs_dim: int = field(default=4, validator=ge(1))
    """Size of the ``Box(-1, 1)`` observation."""
    n_actions: int = field(default=2, validator=ge(1))
    """Discrete actions (or the size of the Box action with ``continuous``)."""
    continuous: bool = False
    """``Box(-1, 1, (n_actions,))`` actions instead of ``Discrete(n_actions)``."""
    max_episode_steps: int = field(default=8, validator=ge(1))
    """Episodes are truncated after this many steps."""
    terminate_prob: float = field(default=0.1, validator=ge(0))
    """Chance per step that an episode terminates."""


class SpaceEnv:
    """An :class:`~rlightning_core.env.base.EnvWorker` of ``num_envs`` envs with arbitrary Box/Discrete spaces.

    Observations are drawn uniformly from the observation space (bounded Box spaces), the reward is ``1`` for
    action ``0`` (or for a negative first action component) and ``0`` otherwise, so a policy can learn
    something. Episodes terminate with ``terminate_prob`` per step and are truncated at ``max_episode_steps``;
    env ``i`` is seeded ``seed + i``. Autoreset follows the contract: ``obs`` holds the next episode's first
    observation, ``final_obs`` the last one.
    """

    def __init__(self, observation_space: Any, action_space: Any, *, num_envs: int = 1, seed: int = 0,
                 max_episode_steps: int = 8, terminate_prob: float = 0.1) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.num_envs = num_envs
        self.seed = seed
        self.max_episode_steps = max_episode_steps
        self.terminate_prob = terminate_prob
        self._rngs = [np.random.default_rng(seed + i) for i in range(num_envs)]
        self._t = np.zeros(num_envs, dtype=np.int64)
        self._returns = np.zeros(num_envs, dtype=np.float64)
        self.closed = False

    def _obs(self, i: int) -> np.ndarray:
        space = self.observation_space
        low = np.broadcast_to(np.asarray(space.low, dtype=np.float64), space.shape)
        high = np.broadcast_to(np.asarray(space.high, dtype=np.float64), space.shape)
        return self._rngs[i].uniform(low, high).astype(space.dtype)

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every env (env ``i`` seeded ``seed + i`` when ``seed`` is given)."""
        if seed is not None:
            self._rngs = [np.random.default_rng(seed + i) for i in range(self.num_envs)]
        self._t[:] = 0
        self._returns[:] = 0.0
        return np.stack([self._obs(i) for i in range(self.num_envs)])

    def step(self, actions: np.ndarray) -> StepBatch:
        """Step every env once."""
        actions = np.asarray(actions)
        first = actions.reshape(self.num_envs, -1)[:, 0]
        reward = (first <= 0).astype(np.float32) if actions.dtype.kind == "f" else (first == 0).astype(np.float32)
        self._t += 1
        self._returns += reward
        terminated = np.array([rng.random() < self.terminate_prob for rng in self._rngs])
        truncated = (self._t >= self.max_episode_steps) & ~terminated
        obs = np.stack([self._obs(i) for i in range(self.num_envs)])
        final_obs = None
        episodes: list[EpisodeStats] = []
        done = terminated | truncated
        if done.any():
            final_obs = obs.copy()
            for i in np.flatnonzero(done).tolist():
                episodes.append(EpisodeStats(env_index=i, episode_return=float(self._returns[i]),
                                             length=int(self._t[i])))
                obs[i] = self._obs(i)
                self._t[i] = 0
                self._returns[i] = 0.0
        return StepBatch(obs=obs, reward=reward, terminated=terminated, truncated=truncated, final_obs=final_obs,
                         episodes=episodes)

    def close(self) -> None:
        """Nothing to release."""
        self.closed = True


def make_space_env(params: SpaceEnvParams, *, num_envs: int, seed: int, worker_index: int = 0,
                   render_mode: str | None = None) -> SpaceEnv:
    """The ``testing-env`` factory: a :class:`SpaceEnv` with the spaces ``params`` describe."""
    obs, act = default_spaces(params.continuous, params.obs_dim, params.n_actions)
    return SpaceEnv(obs, act, num_envs=num_envs, seed=seed, max_episode_steps=params.max_episode_steps,
                    terminate_prob=params.terminate_prob)


@define(frozen=True, kw_only=True)
class TinyPolicyParams:
    """Options of the ``testing-policy`` double."""

    lr: float = field(default=1e-2, validator=gt(0))
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    minibatch_size: int = field(default=64, validator=ge(1))
    """Samples per gradient step."""


class TinyPolicy(BasePolicy):
    """A linear actor-critic (categorical or Gaussian) trained by one advantage-actor-critic pass per ``learn``.

    With a rollout buffer it computes GAE and takes one gradient step per minibatch; with a buffer that has
    ``sample(batch_size)`` it takes one step on a sampled batch (one-step TD advantages).
    """

    default_buffer = "rollout"
    extras_spec = {"log_prob": ((), np.float32), "value": ((), np.float32)}

    def __init__(self, params: TinyPolicyParams, *, observation_space: Any, action_space: Any,
                 role: PolicyRole = PolicyRole.LEARNER, device: str = "cpu", seed: int = 0) -> None:
        import torch
        from gymnasium import spaces

        super().__init__(params, observation_space=observation_space, action_space=action_space, role=role,
                         device=device, seed=seed)
        self.discrete = isinstance(action_space, spaces.Discrete)
        obs_dim = int(np.prod(observation_space.shape))
        out = int(action_space.n) if self.discrete else int(np.prod(action_space.shape))
        torch.manual_seed(seed)
        self.net = torch.nn.Linear(obs_dim, out + 1)
        self.log_std = torch.nn.Parameter(torch.zeros(out))
        self.std = torch.nn.ParameterDict({"log_std": self.log_std})
        self.generator = torch.Generator().manual_seed(seed)
        self.optimizer = (torch.optim.Adam([*self.net.parameters(), self.log_std], lr=params.lr)
                          if role is PolicyRole.LEARNER else None)

    def _forward(self, obs: Any) -> tuple[Any, Any]:
        import torch

        x = torch.as_tensor(np.asarray(obs), dtype=torch.float32).reshape(len(obs), -1)
        y = self.net(x)
        return y[:, :-1], y[:, -1]

    def _log_prob(self, head: Any, actions: Any) -> tuple[Any, Any]:
        import torch

        if self.discrete:
            logp = torch.log_softmax(head, -1)
            return logp.gather(-1, actions.long().reshape(-1, 1)).squeeze(-1), -(logp.exp() * logp).sum(-1)
        dist = torch.distributions.Normal(head, self.log_std.exp())
        return dist.log_prob(actions.reshape(head.shape)).sum(-1), dist.entropy().sum(-1)

    def act(self, obs: np.ndarray, *, deterministic: bool = False) -> PolicyOutput:
        """Sample (or take the mode of) actions; returns ``log_prob`` and ``value`` extras."""
        import torch

        with torch.no_grad():
            head, value = self._forward(obs)
            if self.discrete:
                probs = torch.softmax(head, -1)
                actions = probs.argmax(-1) if deterministic else torch.multinomial(
                    probs, 1, generator=self.generator).squeeze(-1)
            else:
                noise = torch.randn(head.shape, generator=self.generator)
                actions = head if deterministic else head + noise * self.log_std.exp()
            logp, _ = self._log_prob(head, actions)
        acts = actions.numpy()
        env_actions = None
        if not self.discrete:
            acts = acts.reshape(len(obs), *self.action_space.shape).astype(np.float32)
            env_actions = np.clip(acts, self.action_space.low, self.action_space.high)
        return PolicyOutput(actions=acts, env_actions=env_actions,
                            extras={"log_prob": logp.numpy().astype(np.float32),
                                    "value": value.numpy().astype(np.float32)})

    def value(self, obs: np.ndarray) -> np.ndarray:
        """State values of a batch."""
        import torch

        with torch.no_grad():
            return self._forward(obs)[1].numpy().astype(np.float32)

    def learn(self, buffer: Any, *, progress: float = 0.0) -> dict[str, float]:
        """One actor-critic pass over ``buffer``; returns ``loss/policy`` and ``loss/value``."""
        if self.optimizer is None:
            raise RuntimeError("learn() called on a rollout copy")
        p = self.params
        if hasattr(buffer, "compute_returns_and_advantages"):
            buffer.compute_returns_and_advantages(gamma=p.gamma, gae_lambda=p.gae_lambda)
            batches = list(buffer.minibatches(p.minibatch_size, generator=self.generator))
        else:
            batch = buffer.sample(p.minibatch_size, generator=self.generator)
            _, next_v = self._forward(batch["next_obs"])
            ret = batch["rewards"] + batch["discount"] * (1 - batch["terminated"]) * next_v.detach()
            _, v = self._forward(batch["obs"])
            batch = {**batch, "returns": ret, "advantages": (ret - v).detach()}
            batches = [batch]
        pi_loss = v_loss = 0.0
        for mb in batches:
            head, value = self._forward(mb["obs"])
            logp, _ = self._log_prob(head, mb["actions"])
            loss_pi = -(logp * mb["advantages"]).mean()
            loss_v = 0.5 * ((value - mb["returns"]) ** 2).mean()
            self.optimizer.zero_grad()
            (loss_pi + loss_v).backward()
            self.optimizer.step()
            pi_loss += loss_pi.item()
            v_loss += loss_v.item()
        n = max(len(batches), 1)
        return {"loss/policy": pi_loss / n, "loss/value": v_loss / n}

    def modules(self) -> dict[str, Any]:
        """The linear head, and the Gaussian log-std in a parameter holder."""
        return {"net": self.net, "std": self.std}

    def optimizers(self) -> dict[str, Any]:
        """Adam (learners only)."""
        return {"adam": self.optimizer} if self.optimizer is not None else {}


def make_tiny_policy(params: TinyPolicyParams, **kwargs: Any) -> TinyPolicy:
    """The ``testing-policy`` factory."""
    return TinyPolicy(params, **kwargs)


class RecordingLogger:
    """A logger that keeps every row it receives in :attr:`rows` (and notes whether it was closed)."""

    def __init__(self, params: Any = None, *, run_dir: str | Path | None = None) -> None:
        self.params = params
        self.run_dir = run_dir
        self.rows: list[tuple[int, dict[str, float]]] = []
        self.closed = False

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        """Keep one row."""
        self.rows.append((int(step), dict(metrics)))

    def close(self) -> None:
        """Mark closed."""
        self.closed = True


class HookRecorder:
    """A plugin object recording the run-lifecycle hooks it receives, in order, in :attr:`calls`.

    Register it with ``load_plugins(extra=[("recorder", HookRecorder())])``.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def names(self) -> list[str]:
        """The hook names received, in order."""
        return [name for name, _ in self.calls]

    @hookimpl
    def on_run_start(self, config: Any, run_dir: Path) -> None:
        """Record."""
        self.calls.append(("on_run_start", {"config": config, "run_dir": run_dir}))

    @hookimpl
    def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        """Record."""
        self.calls.append(("on_metrics", {"step": step, "metrics": dict(metrics)}))

    @hookimpl
    def on_eval(self, step: int, metrics: dict[str, float]) -> None:
        """Record."""
        self.calls.append(("on_eval", {"step": step, "metrics": dict(metrics)}))

    @hookimpl
    def on_checkpoint(self, path: Path, step: int) -> None:
        """Record."""
        self.calls.append(("on_checkpoint", {"path": path, "step": step}))

    @hookimpl
    def on_run_end(self, run_dir: Path, status: str, error: BaseException | None) -> None:
        """Record."""
        self.calls.append(("on_run_end", {"run_dir": run_dir, "status": status, "error": error}))
