"""Registers the ``recurrent_ppo`` policy. Light on purpose: torch is imported when a policy is built."""

from __future__ import annotations

from typing import Any

from rlightning_core import hookimpl
from rlightning_recurrent_ppo.params import RecurrentPPOParams

RLIGHTNING_PLUGIN_API = ">=2,<3"


def make_recurrent_ppo(params: RecurrentPPOParams, **kwargs: Any) -> Any:
    """Build a :class:`rlightning_recurrent_ppo.policy.RecurrentPPOPolicy`."""
    from rlightning_recurrent_ppo.policy import RecurrentPPOPolicy

    return RecurrentPPOPolicy(params, **kwargs)


@hookimpl
def register_policies(register: Any) -> None:
    """Register ``recurrent_ppo``."""
    register("recurrent_ppo", make_recurrent_ppo, config=RecurrentPPOParams,
             description="Recurrent PPO: an LSTM/GRU after the MLP encoder, per-env hidden state, truncated BPTT "
                         "over seq_len; discrete or continuous actions.")
