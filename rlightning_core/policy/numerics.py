"""Numeric faults: NaN / inf in a loss or a gradient, caught before the optimizer step applies it.

A policy's update step calls :meth:`NumericGuard.check` between ``backward()`` and ``optimizer.step()``::

    loss.backward()
    grad_norm = guard.grad_norm(params, max_grad_norm)      # clips like clip_grad_norm_ when a max is given
    if guard.check({"loss/policy": pg_loss, "loss/value": v_loss}, grad_norm, where="ppo update"):
        optimizer.step()

The whole check costs one host sync per update (the norm already covers every gradient element: a NaN or inf
anywhere makes it non-finite). What happens on a fault is the config's ``policy.nan_policy``:

- ``raise`` (default): stop with :class:`NonFiniteError`, naming the update, the learn call and the offending
  values; the last checkpoint is untouched (the bad step was never applied). The CLI exits with code 1.
- ``skip``: drop this update (gradients zeroed, parameters and optimizer state unchanged) and count it; the
  policy reports the count so far (since the learner was built: a resumed run counts afresh) as
  ``train/skipped_nonfinite_steps``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from rlightning_core.errors import RlightningError

__all__ = ["NAN_POLICIES", "NonFiniteError", "NumericGuard", "at_iteration", "guard_of"]

#: The values of ``policy.nan_policy``.
NAN_POLICIES = ("raise", "skip")

#: Metric of the updates skipped in one learn call (``nan_policy: skip``).
SKIPPED_METRIC = "train/skipped_nonfinite_steps"


class NonFiniteError(RlightningError):
    """A loss or gradient became NaN or infinite (``policy.nan_policy: raise``).

    Not a user error in the config's syntax, but not a bug either: the run diverged. The CLI prints the
    message without a traceback and exits with code 1.

    Attributes:
        offending: ``{metric: value}`` of the non-finite values.
        learn_call: the learn call (1-based) of the learner; the engine adds the iteration to the message.
    """

    def __init__(self, message: str, *, offending: Mapping[str, float] | None = None,
                 learn_call: int = 0) -> None:
        super().__init__(message)
        self.offending = dict(offending or {})
        self.learn_call = learn_call


class NumericGuard:
    """Checks losses and gradients before an optimizer step; ``raise`` or ``skip`` on NaN/inf.

    Args:
        policy: ``raise`` or ``skip`` (``policy.nan_policy``).
    """

    def __init__(self, policy: str = "raise") -> None:
        if policy not in NAN_POLICIES:
            raise ValueError(f"nan_policy must be one of {', '.join(NAN_POLICIES)}; got {policy!r}")
        self.policy = policy
        self.learn_calls = 0
        self.updates = 0
        self.skipped = 0
        """Updates skipped in the current learn call."""
        self.skipped_total = 0
        """Updates skipped since this guard was made."""

    def begin_learn(self) -> None:
        """Call at the start of every learn call (restarts the per-call skip count)."""
        self.learn_calls += 1
        self.updates = 0
        self.skipped = 0

    def metrics(self) -> dict[str, float]:
        """``{train/skipped_nonfinite_steps: updates skipped so far}``.

        A running total: engines that learn several times per logged iteration lose nothing.
        """
        return {SKIPPED_METRIC: float(self.skipped_total)}

    @staticmethod
    def grad_norm(params: Iterable[Any], max_norm: float | None = None) -> Any:
        """The global L2 norm of the gradients (a tensor; ``None`` without any), clipped to ``max_norm`` if given.

        ``torch.nn.utils.clip_grad_norm_`` (or ``get_total_norm`` when nothing is clipped). Dense float CPU
        gradients of one dtype take the same operations one tensor at a time, which is what torch's CPU path
        runs, with the same bits (tests/unit/test_grad_norm.py), without its per-call grouping of tensors by
        device and dtype: for a small network that grouping costs more than the arithmetic. A non-finite norm
        leaves the gradients non-finite (the step is then never taken).
        """
        import torch

        with_grad = [p for p in params if p.grad is not None]
        if not with_grad:
            return None
        grads = [p.grad for p in with_grad]
        first = grads[0]
        if any(g.is_sparse or g.device.type != "cpu" or g.dtype != first.dtype for g in grads):
            if max_norm is not None:
                return torch.nn.utils.clip_grad_norm_(with_grad, max_norm)
            return torch.nn.utils.get_total_norm(grads)
        with torch.no_grad():
            total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
            if max_norm is not None:
                coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
                for g in grads:
                    g.mul_(coef)
        return total

    def check(self, values: Mapping[str, Any], grad_norm: Any = None, *, where: str = "update",
              optimizers: Iterable[Any] = ()) -> bool:
        """``True`` when every value (loss tensors, the gradient norm) is finite: take the optimizer step.

        On a non-finite value, ``raise`` raises :class:`NonFiniteError`; ``skip`` zeroes the gradients of
        ``optimizers``, counts the update and returns ``False`` (the caller must not step).

        Args:
            values: ``{metric name: scalar tensor or float}``, e.g. ``{"loss/policy": pg_loss}``.
            grad_norm: the global gradient norm (:meth:`grad_norm`), checked as ``grad/norm``.
            where: what the update was, for the message (``"ppo update"``, ``"sac critic update"``).
            optimizers: whose gradients to clear when skipping.
        """
        import torch

        self.updates += 1
        items = dict(values)
        if grad_norm is not None:
            items["grad/norm"] = grad_norm
        scalars = list(items.values())
        if all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in scalars):
            # fast path: a sum of scalars is finite only if every term is (one op per term, one sync); a
            # non-finite sum (NaN, inf, or an overflow of large finite terms) is re-checked term by term below
            with torch.no_grad():
                total = scalars[0]
                for v in scalars[1:]:
                    total = total + v
                if bool(torch.isfinite(total)):
                    return True
        device = next((v.device for v in items.values() if isinstance(v, torch.Tensor)), None)
        tensors = [torch.as_tensor(v, dtype=torch.float32, device=device).detach().reshape(-1)
                   for v in items.values()]  # one device, so one cat and one sync
        if not tensors or bool(torch.isfinite(torch.cat(tensors)).all()):  # the one host sync
            return True
        offending = {k: float(t.float().sum()) for k, t in zip(items, tensors, strict=True)
                     if not bool(torch.isfinite(t).all())}
        shown = ", ".join(f"{k}={_fmt(v)}" for k, v in offending.items())
        if self.policy == "raise":
            raise NonFiniteError(
                f"non-finite values in {where} (optimizer step {self.updates} of learn call {self.learn_calls}): "
                f"{shown}; the "
                "step was not applied. Lower the learning rate, clip gradients (max_grad_norm), check the "
                "env's rewards and observations, or set policy.nan_policy: skip to drop such updates",
                offending=offending, learn_call=self.learn_calls)
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        self.skipped += 1
        self.skipped_total += 1
        return False


def guard_of(policy: Any) -> NumericGuard:
    """The policy's guard, set by core from ``policy.nan_policy`` when it builds a learner.

    A policy built some other way (tests, the conformance kit) gets a ``raise`` guard.
    """
    guard = getattr(policy, "numerics", None)
    if guard is None:
        guard = NumericGuard()
        policy.numerics = guard
    return guard


def _fmt(value: float) -> str:
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else f"{value:.4g}"


def at_iteration(exc: BaseException, iteration: int, env_steps: int) -> BaseException | None:
    """A :class:`NonFiniteError` (raised here or in a Ray actor) restated with the training iteration.

    Returns ``None`` for any other exception (the caller re-raises it unchanged).
    """
    cause = exc if isinstance(exc, NonFiniteError) else getattr(exc, "cause", None)
    if not isinstance(cause, NonFiniteError):
        return None
    message = str(cause.args[0]) if cause.args else str(cause)
    return NonFiniteError(f"iteration {iteration} ({env_steps} env steps so far): {message}",
                          offending=cause.offending, learn_call=cause.learn_call)
