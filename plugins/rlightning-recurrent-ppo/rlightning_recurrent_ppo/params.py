"""Recurrent PPO's options (``policy.params``): PPO's, plus the recurrent core and its sequence length."""

from __future__ import annotations

from attrs import define, field
from rlightning_ppo.params import PPOParams

from rlightning_core.config.validators import ge, one_of


@define(frozen=True, kw_only=True)
class RecurrentPPOParams(PPOParams):
    """Options of the ``recurrent_ppo`` policy (every ``ppo`` option means what it means there).

    The network is: the MLP encoder (``hidden_sizes``, ``activation``; may be ``[]``), the recurrent ``core``
    (``hidden_size`` units), then per head an MLP of ``head_sizes`` and one linear layer (policy logits or
    means; value). ``minibatch_size`` counts steps, as in ``ppo``: each minibatch holds
    ``minibatch_size / seq_len`` whole sequences.
    """

    hidden_sizes: list[int] = field(factory=lambda: [64])
    """Hidden layer widths of the MLP encoder before the core (``[]``: the core reads the observations)."""
    core: str = field(default="lstm", validator=one_of("lstm", "gru"))
    """The recurrent core after the encoder: ``lstm`` (hidden and cell state) or ``gru`` (hidden state)."""
    hidden_size: int = field(default=64, validator=ge(1))
    """Units of the recurrent core."""
    seq_len: int = field(default=16, validator=ge(1))
    """Truncated-BPTT length: each env's rollout is cut into sequences of this many steps, replayed from the
    core state stored at their first step. Must divide ``engine.params.rollout_steps``."""
    head_sizes: list[int] = field(factory=list)
    """Hidden layer widths between the core and each head (policy, value); ``[]``: linear heads."""
    shared_core: bool = True
    """One encoder and core for actor and critic; ``false`` gives the critic its own (twice the state)."""
