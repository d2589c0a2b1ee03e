"""TD3's options (``policy.params``), with Stable-Baselines3's TD3 defaults (Fujimoto et al., 2018)."""

from __future__ import annotations

from attrs import define, field

from rlightning_core.config.validators import ge, gt, in_range, one_of


@define(frozen=True, kw_only=True)
class TD3Params:
    """Options of the ``td3`` policy.

    Noise scales are in the normalized action space ``[-1, 1]`` (what the actor outputs and the buffer stores),
    so they mean the same fraction of the action box whatever its bounds. The discount is the replay buffer's
    (``buffer.params.gamma``): TD3 reads ``discount`` from every sampled batch.
    """

    hidden_sizes: list[int] = field(factory=lambda: [400, 300])
    """Hidden layer widths of the actor and of each critic."""
    activation: str = field(default="relu", validator=one_of("relu", "tanh", "elu", "gelu", "silu"))
    """Activation between hidden layers."""
    lr: float = field(default=1e-3, validator=gt(0))
    """Adam learning rate of actor and critics."""
    batch_size: int = field(default=256, validator=ge(1))
    """Transitions per gradient update."""
    tau: float = field(default=0.005, validator=in_range(0, 1))
    """Polyak coefficient of the target networks: ``target <- (1 - tau) target + tau online``."""
    policy_delay: int = field(default=2, validator=ge(1))
    """Critic updates per actor update; the target actor and critics move (by ``tau``) with each actor update."""
    target_noise: float = field(default=0.2, validator=ge(0))
    """Standard deviation of the Gaussian noise added to the target actor's actions (target policy smoothing)."""
    target_noise_clip: float = field(default=0.5, validator=ge(0))
    """The smoothing noise is clipped to ``[-target_noise_clip, target_noise_clip]``."""
    action_noise: float = field(default=0.1, validator=ge(0))
    """Standard deviation of the Gaussian exploration noise of rollout copies (``0``: none)."""
    utd_ratio: float = field(default=1.0, validator=gt(0))
    """Update-to-data ratio: gradient (critic) updates per transition added to the buffer (SB3's
    ``gradient_steps / train_freq``)."""
    learning_starts: int = field(default=100, validator=ge(0))
    """Transitions collected before the first update; until rollout copies receive trained weights their
    actions are uniform over the action box."""

    def __attrs_post_init__(self) -> None:
        if not self.hidden_sizes or any(int(h) < 1 for h in self.hidden_sizes):
            raise ValueError(f"hidden_sizes must be a non-empty list of positive widths, got {self.hidden_sizes!r}")
