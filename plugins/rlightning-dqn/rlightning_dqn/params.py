"""DQN's options (``policy.params``); defaults follow Stable-Baselines3's DQN except ``double_dqn``."""

from __future__ import annotations

from attrs import define, field

from rlightning_core.config.validators import ge, gt, in_range, one_of


@define(frozen=True, kw_only=True)
class DQNParams:
    """Options of the ``dqn`` policy.

    The discount and the n-step returns are the replay buffer's (``buffer.params.gamma`` / ``n_step``): DQN
    bootstraps with the ``discount`` of every sampled batch. ``buffer.params.prioritized: true`` makes DQN
    feed ``|TD error|`` back as priorities and weight its loss by the importance weights.
    """

    encoder: str = field(default="auto", validator=one_of("auto", "mlp", "cnn"))
    """Observation encoder: ``auto`` takes the Nature-DQN CNN (Mnih et al. 2015: 32-64-64 conv,
    ``cnn_features`` ReLU units, one linear Q layer; images scaled by 1/255 on the policy's device) for
    channels-first ``uint8`` image spaces ``(C, H, W)`` and the MLP for everything else; ``cnn`` / ``mlp``
    force one. ``hidden_sizes`` and ``activation`` describe the MLP only."""
    cnn_features: int = field(default=512, validator=ge(1))
    """Width of the CNN's last (fully connected) layer."""
    hidden_sizes: list[int] = field(factory=lambda: [64, 64])
    """Hidden layer widths of the Q network (MLP encoder)."""
    activation: str = field(default="relu", validator=one_of("relu", "tanh", "elu", "gelu", "silu"))
    """Activation between hidden layers."""
    lr: float = field(default=1e-4, validator=gt(0))
    """Adam learning rate."""
    batch_size: int = field(default=32, validator=ge(1))
    """Transitions per gradient update."""
    utd_ratio: float = field(default=0.25, validator=gt(0))
    """Update-to-data ratio: gradient updates per transition added to the buffer (SB3's
    ``gradient_steps / train_freq`` = 1 / 4)."""
    learning_starts: int = field(default=100, validator=ge(0))
    """Transitions collected before the first gradient update."""
    target_update_interval: int = field(default=1000, validator=ge(1))
    """Gradient updates between two target-network updates."""
    tau: float = field(default=1.0, validator=in_range(0, 1))
    """Target update coefficient: 1 copies the Q network (hard update), less is a Polyak average."""
    double_dqn: bool = True
    """Double DQN (van Hasselt et al. 2016): the online network picks the next action, the target network
    values it. ``false``: the target network's max (the original DQN)."""
    exploration_fraction: float = field(default=0.1, validator=in_range(0, 1))
    """Fraction of ``engine.total_steps`` over which epsilon decays linearly."""
    exploration_initial_eps: float = field(default=1.0, validator=in_range(0, 1))
    """Epsilon of epsilon-greedy exploration at the start."""
    exploration_final_eps: float = field(default=0.05, validator=in_range(0, 1))
    """Epsilon once the decay is over."""
    loss: str = field(default="huber", validator=one_of("huber", "mse"))
    """TD loss: ``huber`` (smooth L1, as SB3) or ``mse``."""
    max_grad_norm: float | None = field(default=10.0, validator=gt(0))
    """Clip the gradient norm (``null``: no clipping)."""

    def __attrs_post_init__(self) -> None:
        if not self.hidden_sizes or any(int(h) < 1 for h in self.hidden_sizes):
            raise ValueError(f"hidden_sizes must be a non-empty list of positive widths, got {self.hidden_sizes!r}")
