"""RSL-RL's PPO behind rlightning's policy contract.

The actor and critic are RSL-RL's own ``MLPModel`` (with its Gaussian distribution and optional empirical
observation normalization) and :meth:`RslRlPPOPolicy.learn` runs ``rsl_rl.algorithms.PPO``: rlightning's engine
collects the rollout (any env plugin, env groups, Ray runners), then ``learn`` replays it into the library's
``RolloutStorage`` through ``PPO.process_env_step`` (so RSL-RL's time-out bootstrapping applies), computes
returns with ``PPO.compute_returns`` and updates with ``PPO.update`` (clipped surrogate, clipped value loss,
adaptive KL learning rate, normalizer updates). No engine of its own is needed: RSL-RL's runner loop is
"act, step, ``process_env_step``; ``compute_returns``; ``update``", and replaying stored steps in order feeds
the same calls the same data.

Only the sampling of actions happens outside the library: it draws the Gaussian noise from this policy's own
generator (seeded), so rollouts are reproducible whatever else uses torch's global RNG. Log-probabilities and
distribution parameters still come from RSL-RL's distribution module. The old distribution parameters (mean and
std, which RSL-RL's adaptive learning-rate schedule compares against) are recomputed by the learner before the
update rather than stored per step: in the synchronous engines the learner's weights are the ones the rollout
used, so they are exact; the log-probabilities of the surrogate objective are stored per step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rlightning_core.errors import UserError
from rlightning_core.policy.base import BasePolicy, PolicyOutput, PolicyRole
from rlightning_rsl_rl.params import RslRlPPOParams

__all__ = ["RslRlPPOPolicy"]

#: RSL-RL observation group holding the (flattened) observation; both the actor and the critic read it.
OBS_GROUP = "policy"


def _check_spaces(observation_space: Any, action_space: Any) -> tuple[int, int]:
    from gymnasium import spaces

    from rlightning_core.errors import unsupported_space
    from rlightning_core.spaces import refuse_flat_dict

    refuse_flat_dict(observation_space, "rsl_rl_ppo")
    if not isinstance(observation_space, spaces.Box):
        raise unsupported_space("policy 'rsl_rl_ppo'", "observation", observation_space, "Box")
    if not (isinstance(action_space, spaces.Box) and len(action_space.shape) == 1):
        raise unsupported_space("policy 'rsl_rl_ppo'", "action", action_space, "1-D Box",
                                "RSL-RL's PPO acts with a Gaussian distribution; use the ppo policy for discrete "
                                "actions")
    return int(np.prod(observation_space.shape)), int(action_space.shape[0])


class _LastValues(torch.nn.Module):
    """Stands in for the critic while ``PPO.compute_returns`` bootstraps the rollout's last step.

    ``compute_returns(obs)`` evaluates the critic on the observation after the last step; rlightning's buffer
    holds that value already (``last_values``, computed by the rollout copy), not the observation.
    """

    def __init__(self, values: torch.Tensor) -> None:
        super().__init__()
        self.values = values

    def forward(self, obs: Any, **_: Any) -> torch.Tensor:
        return self.values

    def get_hidden_state(self) -> None:
        return None

    def reset(self, dones: Any = None, hidden_state: Any = None) -> None:
        return None


@contextlib.contextmanager
def _no_default_group() -> Iterator[None]:
    """Hide torch.distributed's default process group from RSL-RL while it updates.

    RSL-RL's ``EmpiricalNormalization.update`` all-reduces its statistics whenever ``torch.distributed`` is
    initialized (its multi-GPU mode). On Ray, rlightning's default process group is the weight-sync group of
    the learner and the rollout workers, which do not take part in ``learn``: the all-reduce would wait for
    them forever. So the statistics are updated from this learner's batch alone. RSL-RL's own multi-GPU code
    paths are off (no ``multi_gpu_cfg``); only its ``torch.distributed.is_initialized()`` checks see this.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        yield
        return
    original = dist.is_initialized
    dist.is_initialized = lambda: False  # type: ignore[assignment]
    try:
        yield
    finally:
        dist.is_initialized = original  # type: ignore[assignment]


@contextlib.contextmanager
def _buffers_in_place(*modules: torch.nn.Module) -> Iterator[None]:
    """Keep every module buffer the same tensor object across the block, copying new values into it.

    RSL-RL's ``EmpiricalNormalization.update`` rebinds its ``_std`` buffer to a new tensor. rlightning's Ray
    weight sync broadcasts flat buckets that the modules' tensors are views of, so a rebound buffer would no
    longer be sent: rollout workers would act with stale normalization statistics.
    """
    before = [(m, name, buf) for mod in modules for m in mod.modules()
              for name, buf in m.named_buffers(recurse=False)]
    try:
        yield
    finally:
        with torch.no_grad():
            for m, name, old in before:
                new = getattr(m, name)
                if new is not old:
                    old.copy_(new)
                    setattr(m, name, old)


class RslRlPPOPolicy(BasePolicy):
    """RSL-RL's PPO. Extras stored per step: ``log_prob`` and ``value``."""

    default_buffer = "rollout"
    extras_spec = {"log_prob": ((), np.float32), "value": ((), np.float32)}

    def __init__(self, params: RslRlPPOParams, *, observation_space: Any, action_space: Any,
                 role: PolicyRole = PolicyRole.LEARNER, device: str = "cpu", seed: int = 0) -> None:
        super().__init__(params, observation_space=observation_space, action_space=action_space, role=role,
                         device=device, seed=seed)
        from rsl_rl.algorithms import PPO
        from rsl_rl.models import MLPModel

        self.obs_dim, self.act_dim = _check_spaces(observation_space, action_space)
        p = params
        groups = {"actor": [OBS_GROUP], "critic": [OBS_GROUP]}
        sample = self._td(torch.zeros(1, self.obs_dim))
        torch.manual_seed(seed)  # parameter initialization is a function of the seed alone
        distribution = {"class_name": "GaussianDistribution", "init_std": p.init_noise_std,
                        "std_type": p.noise_std_type}
        self.actor = MLPModel(sample, groups, "actor", self.act_dim, hidden_dims=list(p.actor_hidden_dims),
                              activation=p.activation, obs_normalization=p.obs_normalization,
                              distribution_cfg=distribution).to(device)
        self.critic = MLPModel(sample, groups, "critic", 1, hidden_dims=list(p.critic_hidden_dims),
                               activation=p.activation, obs_normalization=p.obs_normalization).to(device)
        self.generator = torch.Generator(device="cpu").manual_seed(seed + 1)
        self.low = torch.tensor(np.array(action_space.low, dtype=np.float32))
        self.high = torch.tensor(np.array(action_space.high, dtype=np.float32))
        self.alg: Any = None
        if role is PolicyRole.LEARNER:
            self.alg = PPO(self.actor, self.critic, storage=None, num_learning_epochs=p.num_learning_epochs,
                           num_mini_batches=p.num_mini_batches, clip_param=p.clip_param, gamma=p.gamma, lam=p.lam,
                           value_loss_coef=p.value_loss_coef, entropy_coef=p.entropy_coef,
                           learning_rate=p.learning_rate, max_grad_norm=p.max_grad_norm, optimizer=p.optimizer,
                           use_clipped_value_loss=p.use_clipped_value_loss, schedule=p.schedule,
                           desired_kl=p.desired_kl,
                           normalize_advantage_per_mini_batch=p.normalize_advantage_per_mini_batch,
                           device=device)
        else:
            self.actor.eval()
            self.critic.eval()
            for param in [*self.actor.parameters(), *self.critic.parameters()]:
                param.requires_grad_(False)

    # -- rollout ---------------------------------------------------------------------------------------------
    def _td(self, x: torch.Tensor) -> TensorDict:
        return TensorDict({OBS_GROUP: x.reshape(x.shape[0], -1)}, batch_size=[x.shape[0]], device=self.device)

    def _obs(self, obs: np.ndarray) -> TensorDict:
        return self._td(torch.as_tensor(obs, dtype=torch.float32, device=self.device))

    def act(self, obs: np.ndarray, *, deterministic: bool = False) -> PolicyOutput:
        """Sample (or, deterministic, take the mean of) Gaussian actions; clipped to the bounds for the env."""
        with torch.inference_mode():
            td = self._obs(obs)
            mean = self.actor(td)  # the Gaussian's mean (RSL-RL's deterministic output)
            self.actor.distribution.update(mean)
            std = self.actor.output_std.expand_as(mean)
            if deterministic:
                actions = mean
            else:
                noise = torch.randn(mean.shape, generator=self.generator).to(self.device)
                actions = mean + std * noise
            log_prob = self.actor.get_output_log_prob(actions)
            value = self.critic(td).squeeze(-1)
            actions, log_prob, value = (t.float().cpu() for t in (actions, log_prob, value))
        return PolicyOutput(actions=actions.numpy(), extras={"log_prob": log_prob.numpy(), "value": value.numpy()},
                            env_actions=torch.clamp(actions, self.low, self.high).numpy())

    def value(self, obs: np.ndarray) -> np.ndarray:
        """Critic values, for bootstrapping truncated episodes and the end of a rollout."""
        with torch.inference_mode():
            return self.critic(self._obs(obs)).squeeze(-1).float().cpu().numpy()

    # -- training --------------------------------------------------------------------------------------------
    def _storage(self, num_steps: int, num_envs: int) -> Any:
        from rsl_rl.storage import RolloutStorage

        st = self.alg.storage
        if st is None or st.num_transitions_per_env != num_steps or st.num_envs != num_envs:
            sample = self._td(torch.zeros(num_envs, self.obs_dim))
            st = RolloutStorage("rl", num_envs, num_steps, sample, [self.act_dim], self.device)
            self.alg.storage = st
        st.clear()
        return st

    @contextlib.contextmanager
    def _critic_answers(self, values: torch.Tensor) -> Iterator[None]:
        critic = self.alg.critic
        self.alg.critic = _LastValues(values)
        try:
            yield
        finally:
            self.alg.critic = critic

    def learn(self, buffer: Any, *, progress: float = 0.0) -> dict[str, float]:
        """Replay the rollout into RSL-RL's storage, then ``PPO.compute_returns`` and ``PPO.update``."""
        if self.alg is None:
            raise RuntimeError("learn() called on a rollout copy of rsl_rl_ppo")
        if self.data_parallel is not None and self.params.obs_normalization:
            raise UserError("policy.params.obs_normalization: not supported with data-parallel learners (each "
                            "learner would keep its own normalization statistics); set it to false")
        num_steps, num_envs = int(buffer.num_steps), int(buffer.num_envs)
        if (num_steps * num_envs) // self.params.num_mini_batches < 1:
            raise UserError(f"policy.params.num_mini_batches: {self.params.num_mini_batches} minibatches of a "
                            f"{num_steps} x {num_envs} rollout leave them empty")
        self._storage(num_steps, num_envs)
        dev = self.device
        obs = buffer["obs"].to(dev, torch.float32)
        actions = buffer["actions"].to(dev, torch.float32)
        rewards = buffer["rewards"].to(dev, torch.float32)
        time_outs = (buffer["truncated"] & ~buffer["terminated"]).to(dev)
        dones = (buffer["terminated"] | buffer["truncated"]).to(dev)
        values = buffer["value"].to(dev, torch.float32)
        log_probs = buffer["log_prob"].to(dev, torch.float32)
        with torch.inference_mode():
            self.actor.distribution.update(self.actor(self._td(obs.reshape(num_steps * num_envs, -1))))
            means, stds = (p.reshape(num_steps, num_envs, -1) for p in self.actor.output_distribution_params)
            for t in range(num_steps):  # RSL-RL's runner loop, with the steps rlightning collected
                tr = self.alg.transition
                tr.observations = self._td(obs[t])
                tr.actions = actions[t]
                tr.values = values[t].unsqueeze(-1)
                tr.actions_log_prob = log_probs[t]
                tr.distribution_params = (means[t], stds[t].expand_as(means[t]))
                tr.hidden_states = (None, None)
                self.alg.process_env_step(tr.observations, rewards[t], dones[t], {"time_outs": time_outs[t]})
            with self._critic_answers(buffer.last_values.to(dev, torch.float32).unsqueeze(-1)):
                self.alg.compute_returns(None)
        self.alg.train_mode()
        with _no_default_group(), _buffers_in_place(self.actor, self.critic):
            losses = self.alg.update()
        self.weight_version += 1
        metrics = {"loss/policy": float(losses["surrogate"]), "loss/value": float(losses["value"]),
                   "loss/entropy": float(losses["entropy"]), "stats/lr": float(self.alg.learning_rate),
                   "stats/action_std": float(stds.mean())}
        return metrics

    # -- state -----------------------------------------------------------------------------------------------
    def modules(self) -> dict[str, Any]:
        """RSL-RL's actor and critic (with their normalizers and the learned action std)."""
        return {"actor": self.actor, "critic": self.critic}

    def optimizers(self) -> dict[str, Any]:
        """RSL-RL's optimizer (learners only)."""
        return {"optimizer": self.alg.optimizer} if self.alg is not None else {}

    def extra_state(self) -> dict[str, Any]:
        """The adaptive learning rate and the sampling generator, so a resumed run continues identically."""
        state: dict[str, Any] = {"generator": self.generator.get_state()}
        if self.alg is not None:
            state["learning_rate"] = float(self.alg.learning_rate)
        return state

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`extra_state`."""
        if "generator" in state:
            self.generator.set_state(state["generator"])
        if self.alg is not None and "learning_rate" in state:
            self.alg.learning_rate = float(state["learning_rate"])
            for group in self.alg.optimizer.param_groups:
                group["lr"] = self.alg.learning_rate
