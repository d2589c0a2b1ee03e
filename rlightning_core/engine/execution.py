"""Where an engine's work runs. Engines call the same methods whether it is this process or a Ray cluster.

:class:`LocalExecution` keeps env runners, learner, rollout copy and buffer as plain objects in this process;
``rlightning_core.distributed.execution.RayExecution`` places them in actors behind the same interface.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

from rlightning_core.buffer.base import BufferSpec, Chunk, DataBuffer
from rlightning_core.config.schema import MainConfig
from rlightning_core.env.runner import EnvRunner, RolloutStats
from rlightning_core.env.seeding import derive_seed

log = logging.getLogger("rlightning")

__all__ = ["LocalExecution", "build_preprocessors"]


def build_preprocessors(config: MainConfig, registry: Any, observation_space: Any, num_envs: int) -> list[Any]:
    """The config's preprocessors, in order."""
    out = []
    for pc in config.preprocessors:
        spec = registry.resolve("preprocessor", pc.type)
        out.append(spec.build(pc.params, observation_space=observation_space, num_envs=num_envs))
    return out


def column_labels(env_group: Any) -> list[str]:
    """The env-config label of every buffer column."""
    return [lbl for lbl, n in zip(env_group.labels, env_group.num_envs_per_worker, strict=True) for _ in range(n)]


class LocalExecution:
    """Everything in this process: deterministic for a seed, debuggable with a plain debugger."""

    mode = "local"

    def __init__(self, config: MainConfig, env_group: Any, policy_group: Any, buffer: Any, plugins: Any, *,
                 rollout_steps: int, preprocessors: list[Any] | None = None) -> None:
        self.config = config
        self.env_group = env_group
        self.policy_group = policy_group
        self.observation_space = env_group.observation_space
        self.action_space = env_group.action_space
        handle_pre = getattr(buffer, "preprocessors", None)
        self.preprocessors_given = preprocessors is not None or bool(handle_pre)
        """Whether the preprocessors came from the builders (``build_data_buffer``), not ``config.preprocessors``."""
        self.preprocessors = (preprocessors if preprocessors is not None else list(handle_pre) if handle_pre
                              else build_preprocessors(config, plugins.registry, self.observation_space,
                                                       env_group.total_envs))
        policy_group.materialize(self.observation_space, self.action_space, seed=config.seed)
        self.buffer: DataBuffer = buffer if isinstance(buffer, DataBuffer) else buffer.bind(
            self.buffer_spec(rollout_steps))
        hooks = getattr(buffer, "runner_hooks", {}) or {}
        self.runners: list[EnvRunner] = []
        column = 0
        for worker, label in zip(env_group.workers, env_group.labels, strict=True):
            self.runners.append(EnvRunner(worker, policy_group.rollout, self.preprocessors, column=column,
                                          label=label, needs_next_obs=self.buffer.needs_next_obs, **hooks))
            column += worker.num_envs
        self._enable_restarts(config, env_group)

    def _enable_restarts(self, config: MainConfig, env_group: Any) -> None:
        """Failed env workers (raised, hung, NaN/inf) are recreated within ``cluster.max_restarts`` per run."""
        from rlightning_core.env.runner import RestartBudget

        if getattr(env_group, "rebuilders", None) is None:
            return  # a hand-made group: failures raise
        budget = RestartBudget(config.cluster.max_restarts)
        for w, runner in enumerate(self.runners):
            c, i = env_group.config_indices[w], env_group.worker_indices[w]
            cfg = config.env[c]
            who = f"env[{c}] ({runner.label}, type {cfg.type!r}) worker {i}"
            runner.enable_restarts(functools.partial(self.env_group.rebuild, w), budget, who, config_path=f"env[{c}]")

    def buffer_spec(self, rollout_steps: int) -> BufferSpec:
        """What the buffer must hold for this group of envs and this policy."""
        learner = self.policy_group.learner
        return BufferSpec(observation_space=self.observation_space, action_space=self.action_space,
                          num_envs=self.env_group.total_envs, num_steps=rollout_steps,
                          extras_spec=dict(type(learner).extras_spec), column_labels=column_labels(self.env_group),
                          device=getattr(learner, "device", "cpu"), seed=self.config.seed)

    def reset(self, seed: int) -> None:
        """Seed and reset every runner: worker ``w`` of config ``c`` gets ``derive_seed(seed, 1, c, w)``."""
        group = self.env_group
        for w, runner in enumerate(self.runners):
            runner.reset(seed=derive_seed(seed, 1, group.config_indices[w], group.worker_indices[w]))

    def collect(self, num_steps: int) -> list[RolloutStats]:
        """Every runner collects ``num_steps`` steps into the buffer."""
        stats = []
        for runner in self.runners:
            chunk, s = runner.collect(num_steps)
            self.buffer.add(chunk)
            stats.append(s)
        return stats

    def collect_chunks(self, num_steps: int) -> list[tuple[Chunk, RolloutStats]]:
        """Every runner collects ``num_steps`` steps; the chunks are returned, not stored (see :meth:`add_chunks`).

        For engines that decide per chunk what enters the buffer (the ``async`` engine's staleness bound).
        """
        return [runner.collect(num_steps) for runner in self.runners]

    def add_chunks(self, chunks: list[Chunk]) -> None:
        """Store chunks in the buffer, in order."""
        for chunk in chunks:
            self.buffer.add(chunk)

    def learn(self, progress: float) -> dict[str, float]:
        """The learner updates from the buffer (an on-policy buffer is then emptied)."""
        metrics = self.policy_group.learn(self.buffer, progress=progress)
        if hasattr(self.buffer, "reset"):
            self.buffer.reset()
        return metrics

    def sync(self) -> tuple[int, dict[str, float]]:
        """Copy the learner's weights into the rollout copy (``local`` strategy)."""
        t0 = time.perf_counter()
        version = self.policy_group.sync_weights()
        return version, {"sync/seconds": time.perf_counter() - t0}

    def eval_policy(self) -> Any:
        """A policy holding the current weights, for evaluation in this process."""
        return self.policy_group.rollout

    def state_dict(self) -> dict[str, Any]:
        """Policy, preprocessors, buffer and runners."""
        return {"policy": self.policy_group.state_dict(),
                "preprocessors": [p.state_dict() for p in self.preprocessors],
                "buffer": self.buffer.state_dict(),
                "runners": [r.state_dict() for r in self.runners]}

    def load_state_dict(self, state: dict[str, Any]) -> list[bool]:
        """Restore; returns, per runner, whether its envs were restored (else they need a reset)."""
        self.policy_group.load_state_dict(state["policy"])
        for p, s in zip(self.preprocessors, state["preprocessors"], strict=True):
            p.load_state_dict(s)
        buffer = state["buffer"]  # a Ray run's: one learner's, {"shards": [...]} of several, {} of a sharded one
        shards = buffer["shards"] if isinstance(buffer, dict) and "shards" in buffer else [buffer]
        if len(shards) > 1:
            log.warning("the checkpoint holds %d learners' buffer shards for one learner: learning resumes with an "
                        "empty buffer", len(shards))
        elif shards[0]:
            self.buffer.load_state_dict(shards[0])
        else:  # nothing was saved (a sharded buffer's contents stay with the env workers)
            log.info("the checkpoint holds no buffer contents: learning resumes with an empty buffer")
        saved = state["runners"]
        if len(saved) != len(self.runners):
            return [False] * len(self.runners)
        return [r.load_state_dict(s) for r, s in zip(self.runners, saved, strict=True)]

    def reseed_runner(self, index: int, seed: int) -> None:
        """Reset one runner's envs with ``seed`` (after a resume that could not restore them)."""
        self.runners[index].reset(seed=seed)

    def close(self) -> None:
        """Nothing to release in one process (the env group is closed by its owner)."""
