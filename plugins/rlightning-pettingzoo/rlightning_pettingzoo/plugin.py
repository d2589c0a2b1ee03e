"""Registers the ``pettingzoo`` env. Light on purpose: PettingZoo is imported when a worker is built."""

from __future__ import annotations

from typing import Any

from rlightning_core import hookimpl
from rlightning_core.types import RegisterFn
from rlightning_pettingzoo.params import PettingZooParams

RLIGHTNING_PLUGIN_API = ">=2,<3"


def make_pettingzoo_worker(
    params: PettingZooParams,
    *,
    num_envs: int,
    seed: int,
    worker_index: int = 0,
    render_mode: str | None = None,
) -> Any:
    """Build a :class:`~rlightning_pettingzoo.worker.PettingZooWorker`: ``num_envs`` agent slots."""
    from rlightning_pettingzoo.worker import PettingZooWorker

    return PettingZooWorker(params, num_envs=num_envs, seed=seed, worker_index=worker_index,
                            render_mode=render_mode)


@hookimpl
def register_envs(register: RegisterFn) -> None:
    """Register ``pettingzoo``."""
    register("pettingzoo", make_pettingzoo_worker, config=PettingZooParams,
             description="A PettingZoo parallel env; each agent is one env slot, so a policy is shared by agents.")
