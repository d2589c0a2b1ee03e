"""How long the Ray execution waits for an env runner, and how it names one that did not answer.

One rule, from what the wait covers (docs/ray.md, "Faults"):

- **env work** (a collect of ``n`` steps, a reset, capturing the envs' state for a checkpoint) ends within
  ``env.step_timeout_s x (n + 1)`` (a reset and a state capture count as one step; the extra step covers the
  call itself), never later than ``cluster.call_timeout_s`` (an env config without a step timeout: that);
  work already queued on the runner ahead of the call adds its own steps;
- a **recreated runner** gets ``cluster.actor_start_timeout_s`` to start, plus its reset's env-work deadline;
- **weight transfers and the weight-sync group's rendezvous** only ever involve runners whose env work is done
  (hung ones are recreated first), so they are bounded by ``cluster.call_timeout_s`` (they scale with the
  weights' size and the network, not with env steps);
- **closing** an env gets ``cluster.close_timeout_s``.

Whichever deadline fires, the message names the runners that missed it and the setting the deadline came from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

__all__ = ["Deadline", "RunnerTimeout", "env_work_deadline", "name_runner", "name_runners"]


@attrs.frozen
class Deadline:
    """Seconds a wait may last, and the settings they come from (for messages)."""

    seconds: float
    source: str
    """E.g. ``env.step_timeout_s=2 x 9 steps`` or ``cluster.call_timeout_s=600``."""

    def describe(self) -> str:
        """``18s (env.step_timeout_s=2 x 9 steps)``."""
        return f"{self.seconds:g}s ({self.source})"


def env_work_deadline(step_timeout_s: float | None, call_timeout_s: float, steps: int) -> Deadline:
    """The deadline of env work of ``steps`` env steps on one runner (``0``: a state capture, counted as one).

    Args:
        step_timeout_s: the runner's ``env.step_timeout_s`` (``None``: no step limit).
        call_timeout_s: ``cluster.call_timeout_s``, the ceiling of every wait.
        steps: env steps the wait covers (a reset counts as one).
    """
    counted = max(int(steps), 0) + 1
    if step_timeout_s is None or step_timeout_s * counted >= call_timeout_s:
        return Deadline(float(call_timeout_s), f"cluster.call_timeout_s={call_timeout_s:g}")
    return Deadline(step_timeout_s * counted, f"env.step_timeout_s={step_timeout_s:g} x {counted} steps")


class RunnerTimeout(RuntimeError):
    """An env runner did not finish a call within its :class:`Deadline`; it counts as hung and is recreated."""

    def __init__(self, what: str, deadline: Deadline) -> None:
        super().__init__(f"{what} did not finish within {deadline.describe()}")
        self.deadline = deadline


def name_runner(slot: Any, *, with_type: bool = False) -> str:
    """``env[0] (CartPole-v1) worker 1``: how messages name the runner of a ``WorkerSlot``.

    ``with_type``: ``env[0] (CartPole-v1, type 'gymnasium') worker 1``, as the message that stops a run says.
    """
    kind = f", type {slot.cfg.type!r}" if with_type else ""
    return f"env[{slot.config_index}] ({slot.label}{kind}) worker {slot.worker_index}"


def name_runners(slots: Sequence[Any], *, with_type: bool = False) -> str:
    """Several runners, by :func:`name_runner`, joined with ``and``."""
    names = [name_runner(s, with_type=with_type) for s in slots]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
