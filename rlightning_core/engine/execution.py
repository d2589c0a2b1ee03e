"""Where an engine's work runs. Engines call the same methods whether it is this process or a Ray cluster.

:class:`LocalExecution` keeps env runners, learner, rollout copy and buffer as plain objects in this process;
``rlightning_core.distributed.execution.RayExecution`` places them in actors. Both honour
:class:`~rlightning_core.engine.contract.Execution`; :func:`build_execution` picks one from ``cluster.mode``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

from rlightning_core.buffer.base import BufferSpec, Chunk, DataBuffer
from rlightning_core.config.schema import MainConfig
from rlightning_core.engine.assembly import RolloutAssembly
from rlightning_core.env.runner import EnvRunner, RolloutStats
from rlightning_core.env.seeding import derive_seed

log = logging.getLogger("rlightning")

__all__ = ["LocalExecution", "build_execution", "build_preprocessors"]


def build_preprocessors(config: MainConfig, registry: Any, observation_space: Any, num_envs: int) -> list[Any]:
    """The config's preprocessors, in order."""
    out = []
    for pc in config.preprocessors:
        spec = registry.resolve("preprocessor", pc.type)
        out.append(spec.build(pc.params, observation_space=observation_space, num_envs=num_envs))
    return out


def build_execution(config: MainConfig, env_group: Any, policy_group: Any, buffer: Any, plugins: Any, *,
                    rollout_steps: int, preprocessors: list[Any] | None = None) -> Any:
    """The execution of ``config.cluster.mode``: :class:`LocalExecution`, or ``RayExecution`` on a Ray cluster.

    The one place that asks which mode a run is in; engines receive the result and use only its
    :class:`~rlightning_core.engine.contract.Execution` methods.
    """
    if config.cluster.mode == "ray":
        from rlightning_core.distributed.execution import RayExecution

        return RayExecution(config, env_group, policy_group, buffer, plugins, rollout_steps=rollout_steps)
    return LocalExecution(config, env_group, policy_group, buffer, plugins, rollout_steps=rollout_steps,
                          preprocessors=preprocessors)


class _Done:
    """A handle of work that ran when it was submitted (one process): it holds the result."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _result(handle: Hashable) -> Any:
    if not isinstance(handle, _Done):
        raise TypeError(f"not a handle this execution returned: {handle!r}")
    return handle.value


def column_labels(env_group: Any) -> list[str]:
    """The env-config label of every buffer column."""
    return [lbl for lbl, n in zip(env_group.labels, env_group.num_envs_per_worker, strict=True) for _ in range(n)]


class LocalExecution:
    """Everything in this process: deterministic for a seed, debuggable with a plain debugger.

    Honours :class:`~rlightning_core.engine.contract.Execution`. Submitted work (``start_collect``,
    ``start_learn``) runs at submission, in order. Besides the contract, ``runners``, ``buffer`` and
    ``policy_group`` are the in-process objects, for tests and debugging (engines must not use them: they do
    not exist on Ray).
    """

    mode = "local"
    concurrent = False
    sync_plan = None

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
        self.runner_copies: list[list[tuple[Any, Any]]] = []
        """Per runner, ``(shared, own)`` pairs of stateful preprocessors it holds its own copy of (several runners)."""
        column = 0
        several = len(env_group.workers) > 1
        for worker, label in zip(env_group.workers, env_group.labels, strict=True):
            pre = [self._runner_copy(p, worker) if several and p.state_dict() else p for p in self.preprocessors]
            self.runner_copies.append([(p, q) for p, q in zip(self.preprocessors, pre, strict=True) if q is not p])
            self.runners.append(EnvRunner(worker, policy_group.rollout, pre, column=column,
                                          label=label, needs_next_obs=self.buffer.needs_next_obs, **hooks))
            column += worker.num_envs
        self._assembly = RolloutAssembly()  # start_learn with an on-policy buffer: rollouts from chunks
        self._enable_restarts(config, env_group)

    @staticmethod
    def _runner_copy(pre: Any, worker: Any) -> Any:
        """A runner's own instance of a stateful preprocessor, sized for its worker's envs.

        Per-env state (e.g. ``scale_reward``'s running returns) belongs to one worker's envs; statistics stay
        shared through :meth:`_collect_one` (the same constructor contract as a Ray runner's copy).
        """
        try:
            return type(pre)(pre.params, observation_space=worker.observation_space, num_envs=worker.num_envs)
        except TypeError as exc:
            from rlightning_core.errors import ConfigError

            raise ConfigError(f"preprocessor {type(pre).__name__}: several env workers need one instance each, "
                              "built as cls(params, observation_space=..., num_envs=...), which failed: "
                              f"{exc}") from None

    def _on_runner(self, index: int, call: Callable[[EnvRunner], Any]) -> Any:
        """``call(runner)``; its own preprocessor copies start from, and fold back into, the shared statistics.

        The shared instances thus see every worker's data in runner order, as one instance for all envs would.
        """
        pairs = self.runner_copies[index]
        for shared, own in pairs:  # per-env running values (``returns``) stay with the runner
            own.load_state_dict({k: v for k, v in shared.state_dict().items() if k != "returns"})
        out = call(self.runners[index])
        for shared, own in pairs:
            shared.merge([own.state_dict()])
        return out

    def _collect_one(self, index: int, num_steps: int) -> tuple[Chunk, RolloutStats]:
        return self._on_runner(index, lambda runner: runner.collect(num_steps))

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
                          extras_spec=dict(learner.extras_spec), column_labels=column_labels(self.env_group),
                          device=getattr(learner, "device", "cpu"), seed=self.config.seed)

    @property
    def version(self) -> int:
        """The learner's weight version (bumped by every :meth:`sync`)."""
        return int(self.policy_group.version)

    @property
    def num_runners(self) -> int:
        """Env runners, one per env worker."""
        return len(self.runners)

    def steps_per_collect(self, num_steps: int) -> int:
        """Env steps one :meth:`collect` of ``num_steps`` adds."""
        return num_steps * self.env_group.total_envs

    def attach_run_dir(self, run_dir: Path) -> None:
        """Nothing to record: in one process every seed derives from the run seed (no seed ledger)."""

    def buffer_size(self) -> int:
        """Transitions in the buffer."""
        return len(self.buffer)

    def reset(self, seed: int) -> None:
        """Seed and reset every runner: worker ``w`` of config ``c`` gets ``derive_seed(seed, 1, c, w)``."""
        group = self.env_group
        for w in range(len(self.runners)):
            worker_seed = derive_seed(seed, 1, group.config_indices[w], group.worker_indices[w])
            self._on_runner(w, functools.partial(_reset_runner, seed=worker_seed))

    def collect(self, num_steps: int) -> list[RolloutStats]:
        """Every runner collects ``num_steps`` steps into the buffer."""
        stats = []
        for index in range(len(self.runners)):
            chunk, s = self._collect_one(index, num_steps)
            self.buffer.add(chunk)
            stats.append(s)
        return stats

    def collect_chunks(self, num_steps: int) -> list[tuple[Chunk, RolloutStats]]:
        """Every runner collects ``num_steps`` steps; the chunks are returned, not stored (see :meth:`add_chunks`).

        For engines that decide per chunk what enters the buffer (the ``async`` engine's staleness bound).
        """
        return [self._collect_one(index, num_steps) for index in range(len(self.runners))]

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

    # -- the streaming shape: each call runs at submission -------------------------------------------------
    def start_collect(self, index: int, num_steps: int) -> tuple[Chunk, Hashable]:
        """Runner ``index`` collects ``num_steps`` steps now; returns the chunk and a handle of its stats."""
        chunk, stats = self._collect_one(index, num_steps)
        return chunk, _Done(stats)

    def finish_collect(self, index: int, stats_handle: Hashable) -> RolloutStats | None:
        """The stats of a chunk :meth:`start_collect` collected (a failed runner was recreated inside it)."""
        return _result(stats_handle)

    def start_learn(self, progress: float, chunks: Sequence[Chunk], *, version: int,
                    max_staleness: int | None) -> Hashable:
        """Store the chunks within the staleness bound, learn once now; returns a handle of the result.

        An on-policy buffer learns from whole rollouts (:class:`~rlightning_core.engine.assembly.RolloutAssembly`:
        chunks wait for a free column, a chunk's lag is reported when its rollout is learned from);
        ``stats/updates`` is 0 when no rollout was complete.
        """
        t0 = time.perf_counter()
        buffer: Any = self.buffer
        if hasattr(buffer, "is_free"):  # on-policy: whole rollouts
            out = self._assembly.feed(buffer, chunks, version=version, max_staleness=max_staleness,
                                      learn=lambda b: self.policy_group.learn(b, progress=progress))
            return _Done({**out, "busy_s": time.perf_counter() - t0})
        lags: list[int] = []
        dropped = 0
        for chunk in chunks:  # off-policy: store what is within the bound, one learn call
            lag = int(version) - int(chunk.weight_version)
            if max_staleness is not None and lag > max_staleness:
                dropped += 1
                continue
            buffer.add(chunk)
            lags.append(lag)
        metrics = self.policy_group.learn(buffer, progress=progress)
        return _Done({"metrics": metrics, "lags": lags, "dropped": dropped, "busy_s": time.perf_counter() - t0})

    def finish_learn(self, handle: Hashable) -> dict[str, Any]:
        """The result of a :meth:`start_learn` (it already ran)."""
        return dict(_result(handle))

    def publish_weights(self) -> tuple[int, dict[str, float]]:
        """:meth:`sync`: in one process the copy is immediate, and the next chunk uses it."""
        return self.sync()

    def wait(self, handles: Sequence[Hashable], timeout: float) -> list[Hashable]:
        """Every handle: work submitted here has already run."""
        return list(handles)

    def eval_policy(self) -> Any:
        """A policy holding the current weights, for evaluation in this process."""
        return self.policy_group.rollout

    def state_dict(self) -> dict[str, Any]:
        """Policy, preprocessors, buffer and runners."""
        return {"policy": self.policy_group.state_dict(),
                "preprocessors": [p.state_dict() for p in self.preprocessors],
                "buffer": self.buffer.state_dict(),
                "runners": [self._runner_state(i) for i in range(len(self.runners))]}

    def _runner_state(self, index: int) -> dict[str, Any]:
        state = self.runners[index].state_dict()
        if self.runner_copies[index]:  # its own preprocessors' per-env values (e.g. running returns)
            state["own_preprocessors"] = [own.state_dict() for _, own in self.runner_copies[index]]
        return state

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
        saved = [dict(s) for s in state["runners"]]
        for index, s in enumerate(saved):
            own_states = s.pop("own_preprocessors", None)
            if own_states is not None and index < len(self.runner_copies):
                for (_, own), own_state in zip(self.runner_copies[index], own_states, strict=False):
                    own.load_state_dict(own_state)
        if len(saved) != len(self.runners):
            return [False] * len(self.runners)
        return [r.load_state_dict(s) for r, s in zip(self.runners, saved, strict=True)]

    def reseed_runner(self, index: int, seed: int) -> None:
        """Reset one runner's envs with ``seed`` (after a resume that could not restore them)."""
        self._on_runner(index, functools.partial(_reset_runner, seed=seed))

    def close(self) -> None:
        """Nothing to release in one process (the env group is closed by its owner): a no-op."""


def _reset_runner(runner: EnvRunner, *, seed: int) -> None:
    runner.reset(seed=seed)
