"""Registers the ``appo`` policy. Light on purpose: torch is imported when a policy is built."""

from __future__ import annotations

from typing import Any

from rlightning_appo.params import APPOParams
from rlightning_core import hookimpl

RLIGHTNING_PLUGIN_API = ">=2,<3"


def make_appo(params: APPOParams, **kwargs: Any) -> Any:
    """Build a :class:`rlightning_appo.policy.APPOPolicy`."""
    from rlightning_appo.policy import APPOPolicy

    return APPOPolicy(params, **kwargs)


@hookimpl
def register_policies(register: Any) -> None:
    """Register ``appo``."""
    register("appo", make_appo, config=APPOParams,
             description="Asynchronous PPO with V-trace off-policy correction (IMPALA / APPO); for the async "
                         "engine; discrete or continuous actions.")
