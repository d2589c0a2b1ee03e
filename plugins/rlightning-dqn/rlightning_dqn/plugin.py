"""Registers the ``dqn`` policy. Light on purpose: torch is imported when a policy is built."""

from __future__ import annotations

from typing import Any

from rlightning_core import hookimpl
from rlightning_dqn.params import DQNParams

RLIGHTNING_PLUGIN_API = ">=2,<3"


def make_dqn(params: DQNParams, **kwargs: Any) -> Any:
    """Build a :class:`rlightning_dqn.policy.DQNPolicy`."""
    from rlightning_dqn.policy import DQNPolicy

    return DQNPolicy(params, **kwargs)


@hookimpl
def register_policies(register: Any) -> None:
    """Register ``dqn``."""
    register("dqn", make_dqn, config=DQNParams,
             description="Deep Q-Network (target network, double DQN, n-step / prioritized replay); discrete actions.")
