"""An actor handle whose actor lives in the driver: ``cluster.num_learners: 0`` keeps the learner in-process.

With one CPU learner, an actor of its own costs a process (a Ray worker and a second torch import: ~1 s of CPU
at start-up and ~270 MiB) and, every iteration, a task round trip plus the (de)serialization of its calls.
:class:`InProcessActor` lets :class:`~rlightning_core.distributed.execution.RayExecution` drive a learner in
the driver through the same ``handle.method.remote(...)`` calls it uses for a learner actor: each call runs at
once, with object-reference arguments resolved first (as Ray does for an actor), and returns object
references to its results, so the rest of the execution (env runners fetching weights, ``ray.get`` of
metrics) is unchanged.
"""

from __future__ import annotations

from typing import Any

__all__ = ["InProcessActor"]


class _Method:
    def __init__(self, ray: Any, target: Any, name: str, num_returns: int = 1) -> None:
        self._ray, self._target, self._name, self._num_returns = ray, target, name, num_returns

    def options(self, *, num_returns: int = 1, **_ignored: Any) -> _Method:
        """Ray's per-call options; only ``num_returns`` means anything in-process."""
        return _Method(self._ray, self._target, self._name, num_returns)

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Run the method now; returns a reference to the result (a tuple of them with ``num_returns`` > 1)."""
        ref_type = self._ray.ObjectRef
        refs = [a for a in (*args, *kwargs.values()) if isinstance(a, ref_type)]
        if refs:  # top-level references are resolved, as for an actor task
            values = iter(self._ray.get(refs))
            args = tuple(next(values) if isinstance(a, ref_type) else a for a in args)
            kwargs = {k: next(values) if isinstance(v, ref_type) else v for k, v in kwargs.items()}
        result = getattr(self._target, self._name)(*args, **kwargs)
        if self._num_returns == 1:
            return self._ray.put(result)
        return tuple(self._ray.put(r) for r in result)


class InProcessActor:
    """Wraps ``target`` (an instance of an actor class) so that ``handle.m.remote(...)`` calls ``target.m(...)``.

    Args:
        ray: the ``ray`` module (initialized).
        target: the object the calls go to.
    """

    def __init__(self, ray: Any, target: Any) -> None:
        self._ray = ray
        self.target = target

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Method(self._ray, self.target, name)
