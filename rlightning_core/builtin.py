"""Core's own plugin: registers core's components through the same public hooks third parties use.

Param classes live in light modules (no torch); implementations are imported inside the factories, so that
loading plugins (``rlightning list-plugins``) never imports torch.
"""

from __future__ import annotations

from typing import Any

from rlightning_core.hookspecs import hookimpl
from rlightning_core.types import RegisterFn

RLIGHTNING_PLUGIN_API = ">=2,<3"


def _lazy(module: str, attr: str, doc: str) -> Any:
    """A factory that imports ``module.attr`` on first call and forwards to it."""

    def factory(*args: Any, **kwargs: Any) -> Any:
        import importlib

        return getattr(importlib.import_module(module), attr)(*args, **kwargs)

    factory.__doc__ = doc
    factory.__qualname__ = factory.__name__ = attr
    factory.target = f"{module}:{attr}"  # type: ignore[attr-defined]
    return factory


@hookimpl
def register_buffers(register: RegisterFn) -> None:
    """Rollout (on-policy) and replay (off-policy) buffers."""
    from rlightning_core.buffer.params import ReplayBufferParams, RolloutBufferParams

    register("rollout", _lazy("rlightning_core.buffer.rollout", "RolloutBuffer", "On-policy storage with GAE."),
             config=RolloutBufferParams,
             description="On-policy T x N storage: GAE-lambda returns, shuffled minibatches.")
    register("replay", _lazy("rlightning_core.buffer.replay", "ReplayBuffer", "Circular replay buffer."),
             config=ReplayBufferParams,
             description="Circular replay: uniform or prioritized (sum tree) sampling, n-step returns.")


@hookimpl
def register_preprocessors(register: RegisterFn) -> None:
    """Observation normalization, reward scaling, clipping."""
    from rlightning_core.preprocess.params import (
        ClipObsParams,
        ClipRewardParams,
        NormalizeObsParams,
        ScaleRewardParams,
    )

    mod = "rlightning_core.preprocess.builtins"
    register("normalize_obs", _lazy(mod, "NormalizeObs", "Running mean/std observation normalization."),
             config=NormalizeObsParams, description="Running mean/std observation normalization.")
    register("scale_reward", _lazy(mod, "ScaleReward", "Divide rewards by the std of discounted returns."),
             config=ScaleRewardParams, description="Divide rewards by the running std of discounted returns.")
    register("clip_obs", _lazy(mod, "ClipObs", "Clip observations."), config=ClipObsParams,
             description="Clip observations to [low, high].")
    register("clip_reward", _lazy(mod, "ClipReward", "Clip rewards."), config=ClipRewardParams,
             description="Clip rewards to [low, high].")


@hookimpl
def register_engines(register: RegisterFn) -> None:
    """The synchronous on-policy engine and the asynchronous off-policy one."""
    from rlightning_core.engine.params import AsyncEngineParams, SyncEngineParams

    register("sync", _lazy("rlightning_core.engine.sync", "SyncEngine", "Collect, learn, sync, repeat."),
             config=SyncEngineParams,
             description="On-policy loop: collect T steps, learn, sync weights, log, checkpoint, evaluate.")
    register("async", _lazy("rlightning_core.engine.async_engine", "AsyncEngine",
                            "Collection goes on while the learner trains."),
             config=AsyncEngineParams,
             description="Off-policy loop: runners stream chunks into the replay buffer while the learner "
                         "trains; weight sync every K updates, staleness bound.")


@hookimpl
def register_envs(register: RegisterFn) -> None:
    """The env server of remote environments (clients connect with ``rlightning env-client``)."""
    from rlightning_core.env.remote.params import RemoteEnvParams

    register("remote", _lazy("rlightning_core.env.remote.worker", "make_remote_worker",
                             "An env server; remote env clients serve its envs."),
             config=RemoteEnvParams,
             description="An env server in the run: env clients (rlightning env-client) connect over TCP and "
                         "serve the envs; versioned msgpack protocol, token, heartbeats.")


@hookimpl
def register_loggers(register: RegisterFn) -> None:
    """Core loggers."""
    from rlightning_core.logging.jsonl import JsonlLogger, JsonlParams

    register("jsonl", JsonlLogger, config=JsonlParams,
             description="Extra JSON-lines metrics file (metrics.jsonl is always written).")
