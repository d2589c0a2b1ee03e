"""Builders: resolve implementations by name through the plugin registry and assemble a run.

A training script builds a run from the same parts the CLI uses::

    config = load_config("examples/cartpole_ppo.yaml")
    env_group = build_env_group(config.env, seed=config.seed)
    policy_group = build_policy_group(config.policy.type, config.policy, config.cluster)
    buffer = build_data_buffer(config.buffer.type, config.buffer)
    engine = build_engine(config, env_group, policy_group, buffer)
    engine.run()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from rlightning_core.config.loading import resolve_params
from rlightning_core.config.schema import BufferConfig, ClusterConfig, MainConfig, PolicyConfig
from rlightning_core.env.group import build_env_group, define_env_instance_cfgs
from rlightning_core.errors import ConfigError
from rlightning_core.policy.group import PolicyGroup
from rlightning_core.preprocess.base import Preprocessor
from rlightning_core.preprocess.functions import as_preprocessor

__all__ = [
    "BufferHandle",
    "build_data_buffer",
    "build_engine",
    "build_env_group",
    "build_policy_group",
    "define_env_instance_cfgs",
]


def _registry(registry: Any) -> Any:
    if registry is not None:
        return registry
    from rlightning_core.plugins import get_plugins

    return get_plugins().registry


def _params(spec: Any, params: Any, path: str) -> Any:
    problems: list[str] = []
    value = resolve_params(spec, params, path, problems)
    if problems:
        raise ConfigError(problems)
    return value


@attrs.define
class BufferHandle:
    """A buffer chosen and configured, waiting for the env/policy shapes to allocate storage.

    ``build_engine`` calls :meth:`bind` once the env group and policy are known.
    """

    spec: Any
    params: Any
    preprocessors: list[Preprocessor] = attrs.Factory(list)
    preprocess_fn: Callable[[Any], Any] | None = None
    postprocess_fn: Callable[[Any], Any] | None = None
    runner_hooks: dict[str, Any] = attrs.Factory(dict)

    def bind(self, buffer_spec: Any) -> Any:
        """Allocate the buffer for ``buffer_spec``."""
        buffer = self.spec.build(self.params, spec=buffer_spec)
        buffer.preprocess_fn = self.preprocess_fn
        buffer.postprocess_fn = self.postprocess_fn
        return buffer


def build_data_buffer(
    buffer_cls: str,
    buffer_cfg: BufferConfig | Any,
    obs_preprocessor: Preprocessor | Callable[[Any], Any] | None = None,
    reward_preprocessor: Preprocessor | Callable[[Any], Any] | None = None,
    env_ret_preprocess_fn: Callable[[Any], Any] | None = None,
    policy_resp_preprocess_fn: Callable[[Any], Any] | None = None,
    preprocess_fn: Callable[[Any], Any] | None = None,
    postprocess_fn: Callable[[Any], Any] | None = None,
    *,
    registry: Any = None,
) -> BufferHandle:
    """Choose the buffer ``buffer_cls`` and its hook points.

    Args:
        buffer_cls: registered buffer name (``rollout``, ``replay`` or a plugin's).
        buffer_cfg: a ``BufferConfig`` (its ``params`` are used) or the params themselves.
        obs_preprocessor: transforms observations before the policy and the buffer: a
            :class:`~rlightning_core.preprocess.base.Preprocessor`, or a plain function ``obs -> obs`` (a
            stateless preprocessor). Given alone or with ``reward_preprocessor``, these replace the config's
            ``preprocessors``; the checkpoint manifest lists them, and a resume must pass the same ones.
        reward_preprocessor: transforms rewards before they are stored: a ``Preprocessor``, or a plain function
            ``reward -> reward`` on one worker's reward batch.
        env_ret_preprocess_fn: ``StepBatch -> StepBatch`` applied to every env return.
        policy_resp_preprocess_fn: ``PolicyOutput -> PolicyOutput`` applied to every policy response.
        preprocess_fn: ``Chunk -> Chunk`` before a chunk is stored.
        postprocess_fn: ``batch -> batch`` on every batch handed to the learner.
        registry: the registry to resolve against (default: this process's plugins).

    Raises:
        TypeError: a preprocessor that is neither a ``Preprocessor`` nor a function (a class, say).
    """
    pre = [p for p in (as_preprocessor(obs_preprocessor, "obs_preprocessor"),
                       as_preprocessor(reward_preprocessor, "reward_preprocessor")) if p is not None]
    spec = _registry(registry).resolve("buffer", buffer_cls)
    raw = buffer_cfg.params if isinstance(buffer_cfg, BufferConfig) else buffer_cfg
    hooks = {k: v for k, v in (("env_ret_fn", env_ret_preprocess_fn), ("policy_resp_fn", policy_resp_preprocess_fn))
             if v is not None}
    return BufferHandle(spec=spec, params=_params(spec, raw, "buffer"), preprocessors=pre,
                        preprocess_fn=preprocess_fn, postprocess_fn=postprocess_fn, runner_hooks=hooks)


def build_policy_group(
    policy_cls: str,
    policy_cfg: PolicyConfig,
    cluster_cfg: ClusterConfig,
    backend: str = "auto",
    is_colocated: bool = False,
    *,
    registry: Any = None,
) -> PolicyGroup:
    """Learner(s) and rollout copies of the registered policy ``policy_cls``.

    In ``local`` mode they are plain objects in this process; policies are built when the env spaces are
    known (``build_engine``, or :meth:`PolicyGroup.materialize`).

    Args:
        policy_cls: registered policy name.
        policy_cfg: the ``PolicyConfig`` (its ``params`` are structured here).
        cluster_cfg: the ``ClusterConfig`` of the run.
        backend: torch.distributed backend (``auto``: gloo without GPUs, nccl with).
        is_colocated: the learner and the rollout copies share one placement: ``cluster.placement:
            colocate`` (``build_engine`` runs the engine with it). In local mode everything shares one process
            anyway.
        registry: the registry to resolve against (default: this process's plugins).

    Raises:
        ConfigError: ``is_colocated=True`` while ``cluster_cfg.placement`` names another placement.
    """
    spec = _registry(registry).resolve("policy", policy_cls)
    cfg = attrs.evolve(policy_cfg, params=_params(spec, policy_cfg.params, "policy"))
    return PolicyGroup(spec, cfg, cluster_cfg, backend=backend, is_colocated=is_colocated)


def build_engine(config: MainConfig, env_group: Any, policy_group: PolicyGroup, buffer: Any, *,
                 registry: Any = None, plugins: Any = None) -> Any:
    """The engine ``config.engine.type`` driving ``env_group``, ``policy_group`` and ``buffer``.

    ``plugins`` (a ``PluginSet``) supplies the registry and the observers that receive the run's lifecycle
    hooks; default: this process's plugins. A policy group built with ``is_colocated=True`` runs the engine
    with ``cluster.placement: colocate``.

    Raises:
        ConfigError: the policy group is colocated but the config or an already placed Ray env group says
            otherwise.
    """
    reg = plugins.registry if plugins is not None else _registry(registry)
    config = _placement_of(config, policy_group, env_group)
    spec = reg.resolve("engine", config.engine.type)
    params = _params(spec, config.engine.params, "engine")
    extra = {"plugins": plugins} if plugins is not None else {}
    return spec.build(params, config=config, env_group=env_group, policy_group=policy_group, buffer=buffer,
                      **extra)


def _placement_of(config: MainConfig, policy_group: Any, env_group: Any) -> MainConfig:
    """``config`` with the placement a colocated policy group asks for (unchanged otherwise)."""
    if not getattr(policy_group, "is_colocated", False):
        return config
    placement = config.cluster.placement
    if placement not in ("default", "colocate"):
        raise ConfigError([f"cluster.placement: {placement!r}, but the policy group was built with "
                           "is_colocated=True (placement 'colocate'); use one of them"])
    plan = getattr(env_group, "plan", None)  # a Ray env group places its actors when it is built
    if plan is not None and plan.strategy != "colocate":
        raise ConfigError([f"cluster.placement: the env group's actors were placed with {plan.strategy!r}, but "
                           "the policy group was built with is_colocated=True; build the env group from the same "
                           "placement (cluster.placement: colocate), or with build_env_group(config.env) and "
                           "let build_engine place its actors"])
    if placement == "colocate":
        return config
    return attrs.evolve(config, cluster=attrs.evolve(config.cluster, placement="colocate"))
