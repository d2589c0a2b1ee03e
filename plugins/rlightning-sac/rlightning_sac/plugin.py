"""Registers the ``sac`` policy. Light on purpose: torch is imported when a policy is built."""

from __future__ import annotations

from typing import Any

from rlightning_core import hookimpl
from rlightning_sac.params import SACParams

RLIGHTNING_PLUGIN_API = ">=2,<3"


def make_sac(params: SACParams, **kwargs: Any) -> Any:
    """Build a :class:`rlightning_sac.policy.SACPolicy`."""
    from rlightning_sac.policy import SACPolicy

    return SACPolicy(params, **kwargs)


@hookimpl
def register_policies(register: Any) -> None:
    """Register ``sac``."""
    register("sac", make_sac, config=SACParams,
             description="Soft Actor-Critic (twin Q, tanh Gaussian, auto entropy); continuous actions, replay.")
