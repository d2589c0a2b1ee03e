"""PPO's options (``policy.params``), with the defaults of Schulman et al. (2017) / CleanRL."""

from __future__ import annotations

from attrs import define, field

from rlightning_core.config.validators import ge, gt, in_range, one_of


@define(frozen=True, kw_only=True)
class PPOParams:
    """Options of the ``ppo`` policy.

    Action spaces: ``Discrete`` (categorical), ``MultiDiscrete`` (one categorical per dimension, log-probs
    summed), ``MultiBinary`` (independent Bernoulli bits) and 1-D ``Box``: a diagonal Gaussian, not squashed; the
    buffer stores the raw sample (its log-prob is exact) and the env gets it clipped to ``[low, high]``, so keep the
    bounds well outside the policy's spread (``log_std_init``) or normalize the env's actions to ``[-1, 1]``.
    """

    encoder: str = field(default="auto", validator=one_of("auto", "mlp", "cnn"))
    """Observation encoder: ``auto`` takes the Nature-DQN CNN for channels-first ``uint8`` image spaces
    ``(C, H, W)`` and the MLP for everything else; ``cnn`` / ``mlp`` force one. The CNN (32-64-64 conv,
    ``cnn_features`` ReLU units; images scaled by 1/255 on the policy's device) is shared by actor and critic,
    which are one linear layer each on its features (as in CleanRL's Atari PPO); ``hidden_sizes``,
    ``activation`` and ``shared_network`` describe the MLP only."""
    cnn_features: int = field(default=512, validator=ge(1))
    """Width of the CNN's last (fully connected) layer."""
    hidden_sizes: list[int] = field(factory=lambda: [64, 64])
    """Hidden layer widths of the actor and critic MLPs."""
    activation: str = field(default="tanh", validator=one_of("tanh", "relu", "elu", "gelu", "silu"))
    """Activation between hidden layers."""
    shared_network: bool = False
    """Share the hidden layers between actor and critic (separate networks are the default)."""
    numpy_act: bool = True
    """Act (rollouts, evaluation, ``predict``) through numpy on views of the parameters where the policy can: an
    MLP with separate actor and critic bodies and hidden layers, on a CPU, activation other than ``gelu``.
    A few observations per call run about 3x faster than through torch; results equal torch's to float32
    rounding. ``false`` acts through torch."""
    lr: float = field(default=3e-4, validator=gt(0))
    """Adam learning rate."""
    anneal_lr: bool = False
    """Decay the learning rate linearly to 0 over ``engine.total_steps``."""
    adam_eps: float = field(default=1e-5, validator=gt(0))
    """Adam epsilon."""
    gamma: float = field(default=0.99, validator=in_range(0, 1))
    """Discount factor."""
    gae_lambda: float = field(default=0.95, validator=in_range(0, 1))
    """GAE lambda (bias/variance trade-off of advantages)."""
    clip_ratio: float = field(default=0.2, validator=gt(0))
    """Clip range of the probability ratio in the surrogate objective."""
    clip_value: float | None = field(default=None, validator=gt(0))
    """Clip the value update around the old value by this much (``null``: no value clipping)."""
    ent_coef: float = field(default=0.0, validator=ge(0))
    """Entropy bonus coefficient."""
    vf_coef: float = field(default=0.5, validator=ge(0))
    """Value loss coefficient."""
    max_grad_norm: float | None = field(default=0.5, validator=gt(0))
    """Clip the global gradient norm (``null``: no clipping)."""
    epochs: int = field(default=10, validator=ge(1))
    """Passes over each rollout."""
    minibatch_size: int = field(default=64, validator=ge(1))
    """Samples per gradient step."""
    target_kl: float | None = field(default=None, validator=gt(0))
    """Stop the epochs of an update early once the approximate KL exceeds this (``null``: never)."""
    normalize_advantages: bool = True
    """Normalize advantages per minibatch."""
    log_std_init: float = 0.0
    """Initial log standard deviation of the Gaussian policy (Box actions; samples beyond the box's bounds reach
    the env clipped to them)."""
    ortho_init: bool = True
    """Orthogonal initialization (gain sqrt(2) hidden, 0.01 policy head, 1 value head)."""
