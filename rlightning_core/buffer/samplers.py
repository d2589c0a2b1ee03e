"""Replay samplers: which stored indices a batch reads, and with what importance weights.

A sampler is the second swappable piece of a :class:`~rlightning_core.buffer.replay.ReplayBuffer` (the storage
is the first). Any object with the :class:`Sampler` methods works; the builtin ones are
:class:`UniformSampler` and :class:`PrioritizedSampler`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from rlightning_core.buffer.sumtree import SumTree

__all__ = ["PrioritizedSampler", "Sampler", "UniformSampler"]


@runtime_checkable
class Sampler(Protocol):
    """What a replay buffer needs from its sampler. Indices and weights are CPU tensors."""

    def on_write(self, indices: np.ndarray) -> None:
        """Called after the storage wrote items at ``indices`` (new or overwritten)."""
        ...

    def sample(
        self, batch_size: int, size: int, generator: torch.Generator, beta: float | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw ``batch_size`` of the ``size`` stored items: (int64 indices, float32 importance weights)."""
        ...

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        """New priorities from the learner's TD errors (no-op for non-prioritized samplers)."""
        ...

    def set_progress(self, progress: float) -> None:
        """Fraction of training done, in ``[0, 1]``, for schedules such as beta annealing."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """State for checkpoints (tensors and plain types)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        ...


class UniformSampler:
    """Indices uniformly at random with replacement; all weights 1."""

    def on_write(self, indices: np.ndarray) -> None:
        """Nothing to track."""

    def sample(
        self, batch_size: int, size: int, generator: torch.Generator, beta: float | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``batch_size`` indices from ``U{0, size-1}``; ``beta`` is ignored."""
        if size < 1:
            raise ValueError("cannot sample from an empty replay buffer")
        indices = torch.randint(0, size, (batch_size,), generator=generator)
        return indices, torch.ones(batch_size, dtype=torch.float32)

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        """Uniform sampling has no priorities."""

    def set_progress(self, progress: float) -> None:
        """No schedule."""

    def state_dict(self) -> dict[str, Any]:
        """Stateless."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Stateless."""


class PrioritizedSampler:
    r"""Proportional prioritized sampling (Schaul et al. 2016, "Prioritized Experience Replay").

    Item ``i`` has priority :math:`p_i = (|\delta_i| + \epsilon)^\alpha` and is drawn with probability
    :math:`P(i) = p_i / \sum_k p_k`. A batch of ``B`` is stratified: the total is cut into ``B`` equal
    segments and one index is drawn from each (lower variance than ``B`` independent draws).
    Importance-sampling weights :math:`w_i = (N P(i))^{-\beta}` correct the bias and are divided by the
    largest possible weight, :math:`(N \min_k P(k))^{-\beta}`, so they lie in ``(0, 1]``. ``beta`` is
    annealed linearly from its initial value to 1 by :meth:`set_progress`. New items get the largest
    priority seen so far, so every transition is likely replayed at least once.

    Args:
        capacity: size of the storage (leaves of the sum tree).
        alpha: priority exponent (0 gives uniform sampling).
        beta: initial importance-sampling exponent.
        eps: added to ``|td_error|`` so that no item has zero probability.
    """

    def __init__(self, capacity: int, *, alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6) -> None:
        self.tree = SumTree(capacity)
        self.alpha = float(alpha)
        self.beta0 = float(beta)
        self.beta = float(beta)
        self.eps = float(eps)
        self.max_priority = 1.0

    def on_write(self, indices: np.ndarray) -> None:
        """New (or overwritten) items get the maximum priority seen so far."""
        self.tree.update(indices, self.max_priority**self.alpha)

    def sample(
        self, batch_size: int, size: int, generator: torch.Generator, beta: float | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Stratified proportional draw of ``batch_size`` indices and their normalized importance weights."""
        if size < 1:
            raise ValueError("cannot sample from an empty replay buffer")
        beta = self.beta if beta is None else float(beta)
        uniforms = torch.rand(batch_size, generator=generator, dtype=torch.float64).numpy()
        indices = np.minimum(self.tree.sample_stratified(batch_size, uniforms), size - 1)
        # w_i / max_k w_k = (N P(i))^-beta / (N min_k P(k))^-beta = (p_i / p_min)^-beta
        weights = (self.tree[indices] / self.tree.min) ** (-beta)
        return torch.from_numpy(indices), torch.from_numpy(weights.astype(np.float32))

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        """Set priorities ``(|td_error| + eps) ** alpha`` for the sampled ``indices``."""
        priorities = np.abs(np.asarray(td_errors, dtype=np.float64).reshape(-1)) + self.eps
        if priorities.size == 0:
            return
        if not np.all(np.isfinite(priorities)):
            raise ValueError("update_priorities() got non-finite TD errors (NaN or inf); check the loss")
        self.max_priority = max(self.max_priority, float(priorities.max()))
        self.tree.update(np.asarray(indices, dtype=np.int64).reshape(-1), priorities**self.alpha)

    def priorities(self, indices: np.ndarray) -> np.ndarray:
        """Current (alpha-exponentiated) priorities of ``indices``."""
        return self.tree[indices]

    def set_progress(self, progress: float) -> None:
        """Anneal ``beta`` linearly: ``beta0`` at progress 0, 1 at progress 1."""
        p = min(max(float(progress), 0.0), 1.0)
        self.beta = self.beta0 + p * (1.0 - self.beta0)

    def state_dict(self) -> dict[str, Any]:
        """Sum tree, maximum priority and current beta."""
        return {"tree": self.tree.state_dict(), "max_priority": self.max_priority, "beta": self.beta}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.tree.load_state_dict(state["tree"])
        self.max_priority = float(state["max_priority"])
        self.beta = float(state["beta"])
