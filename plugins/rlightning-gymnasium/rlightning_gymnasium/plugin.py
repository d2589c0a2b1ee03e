"""Registers the ``gymnasium`` env. Light on purpose: Gymnasium is imported when a worker is built."""

from __future__ import annotations

from typing import Any

from rlightning_core import hookimpl
from rlightning_core.types import RegisterFn
from rlightning_gymnasium.params import GymnasiumParams

RLIGHTNING_PLUGIN_API = ">=2,<3"


def make_gymnasium_worker(
    params: GymnasiumParams,
    *,
    num_envs: int,
    seed: int,
    worker_index: int,
    render_mode: str | None = None,
) -> Any:
    """Build a :class:`~rlightning_gymnasium.worker.GymnasiumWorker` (a vector of ``num_envs`` envs)."""
    from rlightning_gymnasium.deps import check_env_dependencies

    # e.g. pygame, which only rendering needs
    check_env_dependencies(params.id, render_mode=render_mode, atari=params.preset == "atari")
    if params.vectorization == "envpool":
        from rlightning_gymnasium.envpool_worker import EnvpoolWorker

        return EnvpoolWorker(params, num_envs=num_envs, seed=seed, worker_index=worker_index)
    from rlightning_gymnasium.worker import GymnasiumWorker

    return GymnasiumWorker(params, num_envs=num_envs, seed=seed, worker_index=worker_index,
                           render_mode=render_mode)


@hookimpl
def register_envs(register: RegisterFn) -> None:
    """Register ``gymnasium``."""
    register("gymnasium", make_gymnasium_worker, config=GymnasiumParams,
             description="Any registered Gymnasium env as a sync or async vector env, with its wrappers.")
