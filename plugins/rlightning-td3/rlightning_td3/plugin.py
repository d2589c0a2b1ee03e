"""Registers the ``td3`` policy. Light on purpose: torch is imported when a policy is built."""

from __future__ import annotations

from typing import Any

from rlightning_core import hookimpl
from rlightning_td3.params import TD3Params

RLIGHTNING_PLUGIN_API = ">=2,<3"


def make_td3(params: TD3Params, **kwargs: Any) -> Any:
    """Build a :class:`rlightning_td3.policy.TD3Policy`."""
    from rlightning_td3.policy import TD3Policy

    return TD3Policy(params, **kwargs)


@hookimpl
def register_policies(register: Any) -> None:
    """Register ``td3``."""
    register("td3", make_td3, config=TD3Params,
             description="TD3 (twin Q, target smoothing, delayed deterministic actor); continuous actions, replay.")
