"""Param classes of the builtin engines (light: no torch)."""

from __future__ import annotations

from attrs import define, field

from rlightning_core.config.validators import ge


@define(frozen=True, kw_only=True)
class SyncEngineParams:
    """Options of the ``sync`` engine (stop rules and eval schedule live in ``engine`` itself)."""

    rollout_steps: int = field(default=128, validator=ge(1))
    """Steps collected per env between two learning phases (``T``; PPO's ``n_steps``)."""


@define(frozen=True, kw_only=True)
class AsyncEngineParams:
    """Options of the ``async`` engine (off-policy: collection goes on while the learner trains).

    The update-to-data ratio and the warm-up belong to the algorithm (e.g. ``utd_ratio``, ``learning_starts``
    of ``sac`` / ``dqn``): ``learn()`` is called after every chunk and makes the updates the new data warrants.
    """

    rollout_steps: int = field(default=64, validator=ge(1))
    """Steps each env worker collects per chunk (one process: steps per env between two learn calls)."""
    sync_every: int = field(default=1, validator=ge(1))
    """Learner updates (gradient steps) between weight syncs: the weights are published, and the weight
    version bumps, after the learn call that completes this many updates since the last sync."""
    max_staleness: int | None = field(default=4, validator=ge(0))
    """Largest policy lag a chunk may have when it enters the buffer: the learner's weight version minus the
    version the chunk was collected with. Staler chunks are dropped (``async/dropped_chunks``); ``null``: no
    bound."""
    max_chunks_in_flight: int = field(default=2, validator=ge(1))
    """Ray: chunks per env runner that may be in collection or waiting for the learner at once. A runner whose
    chunks wait pauses (``perf/rollout_idle_frac``); more keeps runners busy but raises the policy lag."""
    max_chunks_per_learn: int | None = field(default=None, validator=ge(1))
    """Ray: most chunks one learn call takes, oldest first (IMPALA's fixed learner batch); the rest wait for the
    next call. ``null``: every chunk that is ready. Below ``num_workers * max_chunks_in_flight`` a learner slower
    than the runners builds a queue, so chunks reach it older: the way to get a policy lag of several versions
    (``async/policy_lag_*``)."""
