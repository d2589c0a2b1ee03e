"""Registers the ``appo`` policy and its ``appo_rollout`` buffer (light: torch is imported on build)."""

from __future__ import annotations

from typing import Any

from rlightning_appo.params import APPOParams
from rlightning_core import hookimpl
from rlightning_core.buffer.params import RolloutBufferParams

RLIGHTNING_PLUGIN_API = ">=2,<3"


def make_appo(params: APPOParams, **kwargs: Any) -> Any:
    """Build a :class:`rlightning_appo.policy.APPOPolicy`."""
    from rlightning_appo.policy import APPOPolicy

    return APPOPolicy(params, **kwargs)


def make_appo_rollout(params: RolloutBufferParams, **kwargs: Any) -> Any:
    """Build a :class:`rlightning_appo.buffer.APPORolloutBuffer`."""
    from rlightning_appo.buffer import APPORolloutBuffer

    return APPORolloutBuffer(params, **kwargs)


@hookimpl
def register_policies(register: Any) -> None:
    """Register ``appo``."""
    register("appo", make_appo, config=APPOParams,
             description="Asynchronous PPO with V-trace off-policy correction (IMPALA / APPO); for the async "
                         "engine; discrete or continuous actions.")


@hookimpl
def register_buffers(register: Any) -> None:
    """Register ``appo_rollout``."""
    register("appo_rollout", make_appo_rollout, config=RolloutBufferParams,
             description="The rollout buffer plus every step's next observation, so appo bootstraps with the "
                         "learner's current values.")
