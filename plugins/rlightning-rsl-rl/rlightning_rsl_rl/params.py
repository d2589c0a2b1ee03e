"""Options of ``rsl_rl_ppo`` (``policy.params``): RSL-RL's PPO hyperparameters, with RSL-RL's defaults.

The names are those of ``rsl_rl.algorithms.PPO`` and of its ``actor`` / ``critic`` model configs, so a
configuration written for RSL-RL's ``OnPolicyRunner`` carries over; the rollout length (RSL-RL's
``num_steps_per_env``) is the engine's ``rollout_steps``.
"""

from __future__ import annotations

from typing import Any

from attrs import define, field

from rlightning_core.config.validators import ge, gt, in_range, one_of
from rlightning_core.dependencies import require

__all__ = ["RslRlPPOParams"]

_ACTIVATIONS = ("elu", "selu", "relu", "crelu", "lrelu", "tanh", "sigmoid", "softplus", "gelu", "swish", "mish")


def _widths(_inst: object, attr: object, value: object) -> None:
    if not isinstance(value, list) or not value or not all(isinstance(v, int) and v > 0 for v in value):
        raise ValueError(f"must be a non-empty list of positive layer widths, got {value!r}")


@define(frozen=True, kw_only=True)
class RslRlPPOParams:
    """Options of the ``rsl_rl_ppo`` policy: RSL-RL's PPO, actor and critic."""

    # -- models (rsl_rl.models.MLPModel) ----------------------------------------------------------------------
    actor_hidden_dims: list[int] = field(factory=lambda: [256, 256, 256], validator=_widths)
    """Hidden layer widths of the actor MLP."""
    critic_hidden_dims: list[int] = field(factory=lambda: [256, 256, 256], validator=_widths)
    """Hidden layer widths of the critic MLP."""
    activation: str = field(default="elu", validator=one_of(*_ACTIVATIONS))
    """Activation of both MLPs (RSL-RL's names)."""
    obs_normalization: bool = False
    """Normalize observations inside the models with RSL-RL's empirical normalization (updated each learn)."""
    init_noise_std: float = field(default=1.0, validator=gt(0))
    """Initial standard deviation of the Gaussian action distribution."""
    noise_std_type: str = field(default="scalar", validator=one_of("scalar", "log"))
    """Parameterization of the learned standard deviation (RSL-RL's ``std_type``)."""
    # -- algorithm (rsl_rl.algorithms.PPO) --------------------------------------------------------------------
    num_learning_epochs: int = field(default=5, validator=ge(1))
    """Passes over each rollout."""
    num_mini_batches: int = field(default=4, validator=ge(1))
    """Minibatches per pass (each holds ``rollout_steps * num_envs / num_mini_batches`` steps)."""
    clip_param: float = field(default=0.2, validator=gt(0))
    """Clip range of the probability ratio, and of the value update when ``use_clipped_value_loss``."""
    gamma: float = field(default=0.99, validator=in_range(0, 1))
    """Discount factor."""
    lam: float = field(default=0.95, validator=in_range(0, 1))
    """GAE lambda."""
    value_loss_coef: float = field(default=1.0, validator=ge(0))
    """Value loss coefficient."""
    entropy_coef: float = field(default=0.01, validator=ge(0))
    """Entropy bonus coefficient."""
    learning_rate: float = field(default=1e-3, validator=gt(0))
    """Initial learning rate (adapted to ``desired_kl`` with ``schedule: adaptive``)."""
    max_grad_norm: float = field(default=1.0, validator=gt(0))
    """Gradient norm clip of actor and critic."""
    optimizer: str = field(default="adam", validator=one_of("adam", "adamw", "sgd", "rmsprop"))
    """Optimizer."""
    use_clipped_value_loss: bool = True
    """Clip the value update around the old values."""
    schedule: str = field(default="adaptive", validator=one_of("adaptive", "fixed"))
    """``adaptive``: scale the learning rate to keep the KL near ``desired_kl``; ``fixed``: keep it."""
    desired_kl: float = field(default=0.01, validator=gt(0))
    """Target KL of the adaptive schedule."""
    normalize_advantage_per_mini_batch: bool = False
    """Normalize advantages per minibatch instead of over the whole rollout."""

    def __attrs_post_init__(self) -> None:
        # Requirements of this plugin, so missing only from a partial install (``pip install --no-deps``):
        # refused when the config is read, with the command that completes the install.
        require("rsl_rl", pip="rsl-rl-lib>=5.0,<6", needed_by="policy 'rsl_rl_ppo'")
        require("tensordict", pip="tensordict>=0.7", needed_by="policy 'rsl_rl_ppo'")

    def run_problems(self, _component: Any, config: Any) -> list[str]:
        """What these options cannot do in ``config``'s run, found when the config is validated."""
        learners = config.cluster.num_learners if config.cluster.mode == "ray" else 1
        problems = []
        if learners > 1 and self.obs_normalization:
            problems.append(f"params.obs_normalization: not supported with data-parallel learners "
                            f"(cluster.num_learners: {learners}; each learner would keep its own normalization "
                            "statistics); set it to false")
        steps = getattr(config.engine.params, "rollout_steps", None)
        envs = sum(e.num_envs * e.num_workers for e in config.env) // max(learners, 1)
        if isinstance(steps, int) and steps * envs < self.num_mini_batches:
            problems.append(f"params.num_mini_batches: {self.num_mini_batches} minibatches of a {steps} x {envs} "
                            "rollout (engine.params.rollout_steps x envs per learner) leave some empty; lower it")
        return problems
