"""SAC's options (``policy.params``), with Stable-Baselines3's defaults (Haarnoja et al., 2018)."""

from __future__ import annotations

from attrs import define, field

from rlightning_core.config.validators import ge, gt, in_range, one_of


@define(frozen=True, kw_only=True)
class SACParams:
    """Options of the ``sac`` policy.

    The discount is the replay buffer's (``buffer.params.gamma``, which also forms n-step returns): SAC reads
    ``discount`` from every sampled batch.
    """

    hidden_sizes: list[int] = field(factory=lambda: [256, 256])
    """Hidden layer widths of the actor and of each critic."""
    activation: str = field(default="relu", validator=one_of("relu", "tanh", "elu", "gelu", "silu"))
    """Activation between hidden layers."""
    lr: float = field(default=3e-4, validator=gt(0))
    """Adam learning rate of actor, critics and entropy coefficient."""
    batch_size: int = field(default=256, validator=ge(1))
    """Transitions per gradient update."""
    tau: float = field(default=0.005, validator=in_range(0, 1))
    """Polyak coefficient of the target critics: ``target <- (1 - tau) target + tau critic``."""
    target_update_interval: int = field(default=1, validator=ge(1))
    """Gradient updates between two Polyak updates of the target critics."""
    utd_ratio: float = field(default=1.0, validator=gt(0))
    """Update-to-data ratio: gradient updates per transition added to the buffer (SB3's
    ``gradient_steps / train_freq``). ``learn()`` makes as many updates as the data that arrived warrants."""
    learning_starts: int = field(default=100, validator=ge(0))
    """Transitions collected before the first gradient update (the warm-up)."""
    warmup_actions: str = field(default="random", validator=one_of("random", "policy"))
    """Actions during the warm-up: ``random`` (uniform over the action box, until the rollout copy receives
    weights that have been trained) or ``policy`` (samples of the untrained actor)."""
    ent_coef: float = field(default=1.0, validator=gt(0))
    """Entropy coefficient alpha: its initial value when ``auto_ent_coef``, else fixed."""
    auto_ent_coef: bool = True
    """Tune alpha by gradient descent so that the policy's entropy tracks ``target_entropy``."""
    target_entropy: float | None = None
    """Entropy target of the automatic tuning (``null``: ``-dim(action space)``)."""
    log_std_bounds: list[float] = field(factory=lambda: [-20.0, 2.0])
    """``[min, max]`` clamp of the actor's log standard deviation."""
    max_grad_norm: float | None = field(default=None, validator=gt(0))
    """Clip each network's gradient norm (``null``: no clipping, as in SB3)."""
    precision: str = field(default="fp32", validator=one_of("fp32", "bf16"))
    """Arithmetic of the gradient updates: ``fp32``, or ``bf16`` autocast (CUDA, or CPUs with native bf16
    such as AVX512-BF16 / AMX; elsewhere it is emulated and slower). Parameters stay float32."""

    def __attrs_post_init__(self) -> None:
        if not self.hidden_sizes or any(int(h) < 1 for h in self.hidden_sizes):
            raise ValueError(f"hidden_sizes must be a non-empty list of positive widths, got {self.hidden_sizes!r}")
        if len(self.log_std_bounds) != 2 or not self.log_std_bounds[0] < self.log_std_bounds[1]:
            raise ValueError(f"log_std_bounds must be [min, max] with min < max, got {self.log_std_bounds!r}")
