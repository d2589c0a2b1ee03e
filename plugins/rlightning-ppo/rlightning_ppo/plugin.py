"""Registers the ``ppo`` policy. Light on purpose: torch is imported when a policy is built."""

from __future__ import annotations

from typing import Any

from rlightning_core import hookimpl
from rlightning_ppo.params import PPOParams

RLIGHTNING_PLUGIN_API = ">=2,<3"


def make_ppo(params: PPOParams, **kwargs: Any) -> Any:
    """Build a :class:`rlightning_ppo.policy.PPOPolicy`."""
    from rlightning_ppo.policy import PPOPolicy

    return PPOPolicy(params, **kwargs)


@hookimpl
def register_policies(register: Any) -> None:
    """Register ``ppo``."""
    register("ppo", make_ppo, config=PPOParams,
             description="Proximal Policy Optimization (clipped surrogate, GAE); Discrete, MultiDiscrete, "
                         "MultiBinary or Box actions.")
