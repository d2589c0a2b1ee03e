"""Registers the ``rsl_rl_ppo`` policy. Light on purpose: torch and rsl_rl are imported when a policy is built."""

from __future__ import annotations

from typing import Any

from rlightning_core import hookimpl
from rlightning_core.types import RegisterFn
from rlightning_rsl_rl.params import RslRlPPOParams

RLIGHTNING_PLUGIN_API = ">=2,<3"


def make_rsl_rl_ppo(params: RslRlPPOParams, **kwargs: Any) -> Any:
    """Build a :class:`rlightning_rsl_rl.policy.RslRlPPOPolicy`."""
    from rlightning_rsl_rl.policy import RslRlPPOPolicy

    return RslRlPPOPolicy(params, **kwargs)


@hookimpl
def register_policies(register: RegisterFn) -> None:
    """Register ``rsl_rl_ppo``."""
    register("rsl_rl_ppo", make_rsl_rl_ppo, config=RslRlPPOParams,
             description="RSL-RL's PPO (rsl-rl-lib): its models, storage and update; continuous actions.")
