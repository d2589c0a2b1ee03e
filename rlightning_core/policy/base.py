"""The policy contract: one class serves as learner (``LEARNER``) and as rollout copy (``ROLLOUT``).

A policy component is registered with ``register(name, PolicyClass, config=Params)``; the builder calls
``PolicyClass(params, observation_space=..., action_space=..., role=..., device=..., seed=...)``. Rollout copies
receive weights from the learner through :meth:`BasePolicy.get_weights` / :meth:`BasePolicy.set_weights` (numpy
arrays, so they cross process boundaries without pickling tensors): the modules of
:meth:`BasePolicy.rollout_modules`, by default all of :meth:`BasePolicy.modules`.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from typing import Any

import attrs
import numpy as np

__all__ = ["BasePolicy", "PolicyOutput", "PolicyRole", "initial_state_of"]


class PolicyRole(enum.Enum):
    """What a policy instance is for."""

    LEARNER = "learner"
    """A learner: owns the optimizer, runs :meth:`BasePolicy.learn`."""
    ROLLOUT = "rollout"
    """A rollout copy (in an env runner or an inference server): runs :meth:`BasePolicy.act`, receives weights."""


@attrs.define(slots=True)
class PolicyOutput:
    """What :meth:`BasePolicy.act` returns for a batch of observations."""

    actions: np.ndarray
    """One action per observation, in the env's action format."""
    extras: dict[str, np.ndarray] = attrs.Factory(dict)
    """Per-step values the learner needs and the buffer stores (e.g. ``log_prob``, ``value``)."""
    env_actions: np.ndarray | None = None
    """What to send to the envs when it differs from ``actions`` (e.g. clipped to the action bounds while
    the unclipped sample is stored for the log-probability)."""
    state: np.ndarray | None = None
    """Recurrent policies: the per-env state after this step (``[B, ...]`` float32), which the caller passes back
    as ``act(..., state=)`` on the next step; ``None`` for stateless policies."""


class BasePolicy(ABC):
    """Base class of policies / algorithms.

    Subclasses implement :meth:`act` (rollout), :meth:`learn` (training), and expose their torch modules
    through :meth:`modules` so that weights, state and device handling work generically.

    Args:
        params: the structured params instance (the config class registered with the policy).
        observation_space: single-env observation space.
        action_space: single-env action space.
        role: ``LEARNER`` or ``ROLLOUT``.
        device: torch device string (``auto`` resolved by the builder).
        seed: seed of this instance's RNGs.
    """

    #: Buffer type this algorithm is written for; used when the config leaves ``buffer.type`` at its default.
    default_buffer: str = "rollout"
    #: Extras (name -> (shape, numpy dtype)) that :meth:`act` returns and the buffer must store. Read from the
    #: instance, so a policy whose extras' shapes depend on its params may set its own in ``__init__``.
    extras_spec: dict[str, tuple[tuple[int, ...], Any]] = {}

    def __init__(
        self,
        params: Any,
        *,
        observation_space: Any,
        action_space: Any,
        role: PolicyRole,
        device: str = "cpu",
        seed: int = 0,
    ) -> None:
        self.params = params
        self.observation_space = observation_space
        self.action_space = action_space
        self.role = role
        self.device = device
        self.seed = seed
        self.weight_version = 0
        #: The data-parallel group of learners this instance belongs to (``None``: it learns alone). Set by
        #: Ray mode when ``cluster.num_learners`` > 1; gradients are then averaged across learners after
        #: every backward pass without the policy doing anything.
        self.data_parallel: Any = None

    # -- rollout ---------------------------------------------------------------------------------------------
    @abstractmethod
    def act(self, obs: np.ndarray, *, deterministic: bool = False) -> PolicyOutput:
        """Choose actions for a batch of observations (numpy in, numpy out)."""

    def initial_state(self, num_envs: int) -> np.ndarray | None:
        """Recurrent policies: the state of ``num_envs`` envs at an episode start; ``None`` (the default): stateless.

        When it is not ``None``, whoever steps envs with the policy (env runners, evaluation) keeps one state row
        per env, calls ``act(obs, state=rows)`` and ``value(obs, state=rows)``, takes ``PolicyOutput.state`` as
        the next rows, and puts back this initial row for every env whose episode ended (terminated or
        truncated). The rows belong to the caller, so one rollout copy may serve several runners.
        """
        return None

    def export_module(self) -> Any:
        """A torch module mapping a float32 observation batch to the deterministic env actions.

        What ``act(obs, deterministic=True)`` sends to the envs (``env_actions``, else ``actions``), as one
        ``nn.Module`` that ``rlightning export`` traces to TorchScript and ONNX. Optional: a policy without it
        cannot be exported.

        Raises:
            UserError: the policy does not provide one (the base class).
        """
        from rlightning_core.errors import UserError

        cls = type(self)
        raise UserError(f"policy {cls.__qualname__} (from the plugin module {cls.__module__.split('.')[0]}) does "
                        "not provide export_module(), so it cannot be exported; acting from Python with "
                        "rlightning_core.load_policy(RUN_DIR).predict(obs) works for every policy")

    def value(self, obs: np.ndarray) -> np.ndarray:
        """State values of a batch of observations, for bootstrapping truncated episodes (actor-critics)."""
        raise NotImplementedError(f"{type(self).__name__} does not estimate state values")

    # -- training --------------------------------------------------------------------------------------------
    @abstractmethod
    def learn(self, buffer: Any, *, progress: float = 0.0) -> dict[str, float]:
        """Update parameters from ``buffer``; returns metrics (``loss/policy``, ...).

        Args:
            buffer: the run's data buffer (a ``RolloutBuffer`` for on-policy algorithms).
            progress: fraction of the training budget already used, in ``[0, 1]`` (for schedules).
        """

    def on_device(self, batch: Any) -> Any:
        """``batch`` (a mapping of tensors) with its tensors on this policy's device; itself on CPU.

        Buffers keep their data on ``buffer.params.storage_device`` (host memory by default), so a learner on
        a GPU moves each sampled batch or minibatch across; a batch already there is not copied.
        """
        if str(self.device) == "cpu":
            return batch
        import torch

        return {k: v.to(self.device, non_blocking=True) if isinstance(v, torch.Tensor) else v
                for k, v in batch.items()}

    def all_reduce_mean(self, value: Any) -> float:
        """The mean of a scalar over the data-parallel learners (itself when learning alone).

        For decisions every learner must take alike, e.g. stopping epochs early on the approximate KL:
        learners that disagree on how many updates to make would wait for each other forever.
        """
        if self.data_parallel is None:
            return float(value)
        return self.data_parallel.mean(value)

    # -- state -----------------------------------------------------------------------------------------------
    @abstractmethod
    def modules(self) -> dict[str, Any]:
        """The torch modules whose parameters make up the policy's weights, by name."""

    def rollout_modules(self) -> dict[str, Any]:
        """The modules a rollout copy needs to act: what a weight sync sends (a subset of :meth:`modules`).

        All of :meth:`modules` by default. Off-policy learners override it to leave out critics and target
        networks that only :meth:`learn` reads, so each sync moves only the acting weights (for SAC about a
        fifth of the bytes). Checkpoints always hold every module.
        """
        return self.modules()

    def optimizers(self) -> dict[str, Any]:
        """The torch optimizers, by name (learners only)."""
        return {}

    def get_weights(self) -> dict[str, np.ndarray]:
        """Parameters and buffers of :meth:`rollout_modules` as numpy arrays (``module.name`` keys)."""
        out: dict[str, np.ndarray] = {}
        for mname, module in self.rollout_modules().items():
            for key, tensor in module.state_dict().items():
                out[f"{mname}.{key}"] = tensor.detach().cpu().numpy().copy()
        return out

    def set_weights(self, weights: dict[str, Any], version: int | None = None) -> None:
        """Copy ``weights`` (numpy arrays or tensors, as from :meth:`get_weights`) into :meth:`rollout_modules`."""
        import torch

        from rlightning_core.buffer.storage import as_tensor  # read-only arrays from Ray are fine

        with torch.no_grad():
            for mname, module in self.rollout_modules().items():
                state = module.state_dict()
                for key, tensor in state.items():
                    tensor.copy_(as_tensor(weights[f"{mname}.{key}"]))
        if version is not None:
            self.weight_version = version

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: module and optimizer states, and subclass extras."""
        return {
            "modules": {n: m.state_dict() for n, m in self.modules().items()},
            "optimizers": {n: o.state_dict() for n, o in self.optimizers().items()},
            "weight_version": self.weight_version,
            "extra": self.extra_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        for name, module in self.modules().items():
            module.load_state_dict(state["modules"][name])
        for name, opt in self.optimizers().items():
            if name in state.get("optimizers", {}):
                opt.load_state_dict(state["optimizers"][name])
        self.weight_version = int(state.get("weight_version", 0))
        self.load_extra_state(state.get("extra", {}))

    def extra_state(self) -> dict[str, Any]:
        """Subclass state beyond modules and optimizers (schedules, counters); tensors and plain types only."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`extra_state`."""


def initial_state_of(policy: Any, num_envs: int) -> np.ndarray | None:
    """``policy.initial_state(num_envs)``, or ``None`` for an object that only has ``act``.

    Env runners and evaluation accept any object with ``act`` (not only :class:`BasePolicy` subclasses), so
    the recurrent state is asked for only where the policy defines it.
    """
    method = getattr(policy, "initial_state", None)
    return None if method is None else method(num_envs)
