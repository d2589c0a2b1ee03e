"""The env-runner actor: an env worker and its rollout policy copy (the learner actor: :mod:`.learner`).

They are plain classes (``ray.remote`` is applied by :mod:`rlightning_core.distributed.execution`), so they can
be unit-tested in-process. Every actor loads exactly the driver's plugin set before resolving any name, and
returns numpy arrays (zero-copy through the object store), never tensors.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlightning_core.distributed.collective_member import CollectiveMember
from rlightning_core.distributed.collective_member import load_plugins as _load_plugins
from rlightning_core.env.faults import CONFIG_SHAPED
from rlightning_core.errors import UserError

__all__ = ["CollectiveMember", "EnvRunnerActor"]


class EnvRunnerActor(CollectiveMember):
    """An env worker plus a rollout copy of the policy: returns whole trajectory chunks.

    Built in two steps so the driver can learn the spaces before any policy exists: ``__init__`` builds the
    env; :meth:`setup_rollout` builds the policy copy and preprocessors.
    """

    def __init__(self, env_cfg: Any, *, selection: Sequence[str], num_envs: int, seed: int, worker_index: int,
                 label: str, column: int, num_threads: int = 1, preprocess_fn: Any = None,
                 config_index: int = 0, restart: int = 0) -> None:
        # torch is imported by the first call that needs it (:meth:`build_rollout_policy`), not here: the driver
        # learns the spaces sooner and the learner builds while this process imports torch
        self.num_threads = num_threads
        self._threads_set = False
        self._limit_torch_threads(only_if_imported=True)  # an env plugin may have brought torch in already
        self.plugins = _load_plugins(selection)
        spec = self.plugins.registry.resolve("env", env_cfg.type)
        # an error building the worker is raised by the calls that need it (:meth:`spaces` first): raised here,
        # it would kill the actor, and Ray's ActorDiedError keeps only the remote traceback as text
        self._build_error: Exception | None = None
        self.worker: Any = None
        kwargs = {"num_envs": num_envs, "seed": seed, "worker_index": worker_index}
        try:
            self.worker = spec.build(env_cfg.params, **kwargs)
        except UserError as exc:  # the env said what is wrong (its params, a package missing on this node)
            self._build_error = exc
        except CONFIG_SHAPED as exc:  # the config's fault when the first build fails: spaces() reports it
            from rlightning_core.env.faults import env_config_error, factory_takes

            if restart or not factory_takes(spec, env_cfg.params, kwargs):
                raise
            self._build_error = env_config_error(
                f"env[{config_index}]", f"env {spec.name!r} from {spec.distribution} {spec.version} raised "
                f"{type(exc).__name__} while being built: {exc}")
        if self.worker is not None:
            from rlightning_core.env.dict_obs import flatten_dict_observations

            self.worker = flatten_dict_observations(self.worker)  # Dict observations travel flat
        if preprocess_fn is not None and self.worker is not None:
            from rlightning_core.env.preprocess_fn import with_preprocess_fn

            self.worker = with_preprocess_fn(self.worker, preprocess_fn,
                                             f"env[{config_index}] ({label}) worker {worker_index}")
        self._limit_torch_threads(only_if_imported=True)
        self.label, self.column = label, column
        self.runner: Any = None
        self._prebuilt: tuple[Any, Any] | None = None

    def _limit_torch_threads(self, only_if_imported: bool = False) -> None:
        """Apply ``torch.set_num_threads`` once torch is here (importing it unless ``only_if_imported``)."""
        import sys

        if self._threads_set or (only_if_imported and "torch" not in sys.modules):
            return
        import torch

        torch.set_num_threads(self.num_threads)
        self._threads_set = True

    def pid(self) -> int:
        """The actor's process id (tests kill it)."""
        return os.getpid()

    def spaces(self) -> tuple[Any, Any, int]:
        """Single-env observation and action spaces, and ``num_envs`` (the driver's first call).

        Raises:
            UserError: the env refused its params while this actor built it (an ``EnvConfigError`` for a
                ``TypeError``/``ValueError``, else the env's own ``UserError``, e.g. a package missing on this node).
        """
        self._check_built()
        return self.worker.observation_space, self.worker.action_space, int(self.worker.num_envs)

    def _check_built(self) -> None:
        """Raise the error the env plugin raised while building the worker, if it did (see ``__init__``)."""
        if self._build_error is not None:
            raise self._build_error

    def build_rollout_policy(self, policy_cfg: Any, *, policy_seed: int) -> None:
        """Build the rollout policy copy ahead of :meth:`setup_rollout` (which then uses it).

        The driver calls this as soon as the spaces are known, so this process builds its copy while the
        learner builds its own, instead of after it.
        """
        self._prebuilt = ((policy_cfg, int(policy_seed)), self._build_policy(policy_cfg, policy_seed))

    def _build_policy(self, policy_cfg: Any, policy_seed: int) -> Any:
        """The rollout (EVAL) copy of the policy."""
        from rlightning_core.policy.base import PolicyRole
        from rlightning_core.policy.group import resolve_device

        self._check_built()
        spec = self.plugins.registry.resolve("policy", policy_cfg.type)
        self._limit_torch_threads()
        return spec.build(policy_cfg.params, observation_space=self.worker.observation_space,
                          action_space=self.worker.action_space, role=PolicyRole.ROLLOUT,
                          device=resolve_device(policy_cfg.rollout_device, "policy.rollout_device"), seed=policy_seed)

    def setup_rollout(self, policy_cfg: Any, preprocessor_cfgs: Sequence[Any], *, policy_seed: int,
                      needs_next_obs: bool) -> None:
        """Wrap the rollout policy copy and the preprocessors in an EnvRunner.

        The copy :meth:`build_rollout_policy` built for the same config and seed is used; else one is built.
        """
        from rlightning_core.env.runner import EnvRunner

        self._check_built()
        prebuilt, self._prebuilt = self._prebuilt, None
        if prebuilt is not None and prebuilt[0] == (policy_cfg, int(policy_seed)):
            policy = prebuilt[1]
        else:
            policy = self._build_policy(policy_cfg, policy_seed)
        self.runner = EnvRunner(self.worker, policy, self._preprocessors(preprocessor_cfgs), column=self.column,
                                label=self.label, needs_next_obs=needs_next_obs)

    def _preprocessors(self, sources: Sequence[Any]) -> list[Any]:
        """This runner's own preprocessors, one per source, in order.

        A source is a ``PreprocessorConfig`` (resolved through the registry) or ``(class, params)`` of one given
        to ``build_data_buffer`` (built by the constructor contract ``class(params, observation_space=...,
        num_envs=...)``: a fresh instance, whose statistics the driver merges like a configured one's).
        """
        space, n = self.worker.observation_space, self.worker.num_envs
        reg = self.plugins.registry
        return [src[0](src[1], observation_space=space, num_envs=n) if isinstance(src, tuple)
                else reg.resolve("preprocessor", src.type).build(src.params, observation_space=space, num_envs=n)
                for src in sources]

    def setup_remote_rollout(self, server: Any, half: int, preprocessor_cfgs: Sequence[Any], *,
                             needs_next_obs: bool, has_value: bool, timeout_s: float = 600.0) -> None:
        """Inference-server topology: the runner's policy is a stand-in asking ``server`` every step (Ray calls)."""
        from rlightning_core.distributed.inference import RemotePolicy
        from rlightning_core.env.runner import EnvRunner

        self._check_built()
        self._limit_torch_threads()
        policy = RemotePolicy(server, half, observation_space=self.worker.observation_space,
                              action_space=self.worker.action_space, timeout_s=timeout_s)
        self.runner = EnvRunner(self.worker, policy, self._preprocessors(preprocessor_cfgs), column=self.column,
                                label=self.label, needs_next_obs=needs_next_obs)
        self.runner._has_value = has_value  # the stand-in can always ask; only value-estimating policies do

    def _sync_modules(self) -> dict[str, Any]:
        return self.runner.policy.rollout_modules()

    def _rollout_policy(self) -> Any:
        return self.runner.policy if self.runner is not None and self.runner.policy.modules() else None

    def _weights_holder(self) -> Any:
        return self.runner.policy

    def _after_weights(self, version: int) -> None:
        self.runner.policy.weight_version = version
        self._note_loaded(version)

    def enable_double_buffer(self, bucket_bytes: int) -> None:
        """Stage weights while acting; every ``act`` (one per env step) first swaps in a completed set."""
        super().enable_double_buffer(bucket_bytes)
        policy = self.runner.policy
        act = type(policy).act.__get__(policy)

        def act_after_swap(obs: Any, **kwargs: Any) -> Any:
            if self._pending_version is not None:
                self.apply_staged()
            return act(obs, **kwargs)

        policy.act = act_after_swap

    def reset(self, seed: int | None) -> None:
        """Reset the envs (seeded)."""
        self.runner.reset(seed=seed)

    def collect(self, num_steps: int, weights: Any = None, version: int | None = None) -> tuple[Any, Any]:
        """Step ``num_steps`` times; returns ``(chunk, stats)`` (two object refs with ``num_returns=2``).

        ``weights`` (:func:`~rlightning_core.distributed.ray_common.pack_weights`, with their ``version``) are
        adopted first: a driver that holds the learner sends them with the collect instead of in a call of their
        own. With a buffer shard (``cluster.sharded_buffer``) the chunk stays here and a receipt is returned.
        """
        if weights is not None:
            from rlightning_core.distributed.ray_common import unpack_weights

            self.set_weights(unpack_weights(weights), int(version if version is not None else 0))
        self._ensure_on_device()
        chunk, stats = self.runner.collect(num_steps)
        stats.weight_fingerprint = self._report_for(stats.weight_version)  # the first chunk after a sync tells
        stats.preprocessor_states = [p.state_dict() for p in self.runner.preprocessors] or None
        if getattr(self, "sharded", False):
            chunk = self._keep_in_shard(chunk)
        return chunk, stats

    # -- buffer shard (cluster.sharded_buffer) ---------------------------------------------------------------
    def bind_shard(self, buffer_type: str, buffer_params: Any, spec: Any, on_policy: bool,
                   world_size: int = 1) -> None:
        """Keep collected transitions here: a chunk list (on-policy) or a replay shard of this worker's envs.

        ``world_size`` data-parallel learners read the shard; on-policy, each gathers its slice of every chunk.
        """
        self._limit_torch_threads()  # the shard's storage is torch
        self.sharded, self.shard_on_policy = True, on_policy
        self.shard_chunks: list[Any] = []
        self.shard_taken = [0] * max(int(world_size), 1)  # chunks of shard_chunks each learner rank has gathered
        self.shard_added = 0
        self.shard: Any = None if on_policy else self.plugins.registry.resolve("buffer", buffer_type).build(
            buffer_params, spec=spec)

    def _keep_in_shard(self, chunk: Any) -> Any:
        import attrs

        from rlightning_core.buffer.sharded import ShardReceipt

        if self.shard_on_policy:
            self.shard_chunks.append(chunk)
        else:
            self.shard.add(attrs.evolve(chunk, column=0))  # the shard's columns are this worker's envs
        self.shard_added += chunk.num_steps * chunk.num_envs
        return ShardReceipt(weight_version=chunk.weight_version, num_steps=chunk.num_steps,
                            num_envs=chunk.num_envs, column=chunk.column, env_label=chunk.env_label)

    def shard_gather(self, rank: int = 0, receipts: dict[int, int] | None = None) -> list[Any]:
        """On-policy: hand learner ``rank`` its slice of the chunks kept since its last gather.

        ``receipts`` (column -> receipts the learner holds, the async engine's): only as many chunks as this
        worker's receipts name, so data-parallel ranks gathering at different moments get the same chunks. A
        chunk is forgotten once every data-parallel rank has gathered it; with one learner, at once.
        """
        world = len(self.shard_taken)
        start = self.shard_taken[rank]
        end = len(self.shard_chunks) if receipts is None else min(len(self.shard_chunks),
                                                                   start + int(receipts.get(self.column, 0)))
        chunks = self.shard_chunks[start:end]
        self.shard_taken[rank] = end
        done = min(self.shard_taken)
        if done:
            del self.shard_chunks[:done]
            self.shard_taken = [t - done for t in self.shard_taken]
        if world == 1:
            return chunks
        from rlightning_core.distributed.data_parallel import shard_chunk

        return [shard_chunk(c, rank, world) for c in chunks]

    def shard_stats(self) -> tuple[int, int]:
        """``(transitions held, transitions written so far)``."""
        held = len(self.shard) if self.shard is not None else sum(c.num_steps * c.num_envs for c in self.shard_chunks)
        return int(held), int(self.shard_added)

    def shard_sample(self, n: int, seed: int, beta: float | None = None) -> tuple[dict[str, np.ndarray], int, int]:
        """Off-policy: ``n`` transitions from this shard (numpy), with the shard's stats."""
        import torch

        from rlightning_core.buffer.sharded import batch_to_numpy

        gen = torch.Generator().manual_seed(int(seed))
        batch = self.shard.sample(n, gen, **({"beta": beta} if beta is not None else {}))
        return (batch_to_numpy(batch), *self.shard_stats())

    def shard_update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        """New priorities for transitions this shard contributed."""
        if hasattr(self.shard, "update_priorities"):
            self.shard.update_priorities(indices, td_errors)

    def shard_set_progress(self, progress: float) -> None:
        """Training progress, for the shard's prioritized sampler."""
        if hasattr(self.shard, "set_progress"):
            self.shard.set_progress(progress)

    def set_weights(self, weights: dict[str, np.ndarray], version: int) -> None:
        """Object-store strategy: copy numpy weights in."""
        self._ensure_on_device()
        self.runner.policy.set_weights(weights, version)
        self._note_loaded(version)

    def get_weights(self) -> dict[str, np.ndarray]:
        """The rollout copy's weights (tests compare them with the learner's)."""
        return self.runner.policy.get_weights()

    def weight_version(self) -> int:
        """Version of the weights this copy acts with."""
        return int(self.runner.policy.weight_version)

    def load_preprocessor_states(self, states: Sequence[dict[str, Any]]) -> None:
        """Adopt the merged statistics."""
        for p, s in zip(self.runner.preprocessors, states, strict=True):
            p.load_state_dict(s)

    def state_dict(self) -> dict[str, Any]:
        """Runner state (current obs, env state when the worker can save it)."""
        return self.runner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> bool:
        """Restore :meth:`state_dict`; ``False`` when the envs could not be restored."""
        return bool(self.runner.load_state_dict(state))

    def step(self, actions: np.ndarray) -> Any:
        """Step the envs once (the EnvGroup ``step_async``/``step_wait`` path through the driver)."""
        return self.worker.step(actions)

    def reset_env(self, seed: int | None = None) -> np.ndarray:
        """Reset the envs without a policy (EnvGroup API)."""
        return self.worker.reset(seed=seed)

    def close(self) -> None:
        """Release the envs, the process group and the shared weight slots."""
        self.leave_collective()
        self.shm_detach()
        if self.worker is not None:  # None: the env refused to build it (spaces() reported it)
            self.worker.close()
