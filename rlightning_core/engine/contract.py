"""The execution contract: everything an engine may ask of where its work runs.

An engine (``SyncEngine``, ``AsyncEngine``, an engine plugin) drives a run only through its ``self.execution``,
an object honouring :class:`Execution`. Two implementations ship: ``LocalExecution`` (env runners, learner,
rollout copy and buffer as objects in this process) and ``RayExecution`` (env-runner actors, learner actors
or the learner in the driver, weight sync over the object store or a collective). Every method does what its
name says in both: ``collect`` collects, ``learn`` learns, ``sync`` makes the rollout copies hold the learner's
weights. An engine written against this Protocol alone runs on Ray unchanged; it never asks which mode it is
in and never reaches for attributes not listed here (``runners``, ``buffer``, actors).

Two shapes of loop are supported, both in both modes:

- **batch**: ``collect`` (or ``collect_chunks`` + ``add_chunks`` to choose per chunk what is stored), then
  ``learn``, then ``sync`` — the synchronous on-policy loop.
- **streaming**: ``start_collect`` / ``start_learn`` submit work and return handles, ``wait`` returns the
  handles that finished, ``finish_collect`` / ``finish_learn`` take their results, ``publish_weights`` sends
  weights without waiting. Where :attr:`Execution.concurrent` is false the work runs when it is submitted (so
  the results are those of the batch shape in the same order); on Ray it runs in the actors while the driver
  goes on.

Chunks and handles are opaque: a :class:`~rlightning_core.buffer.base.Chunk` in one process, a Ray object
reference on Ray. Pass them back to the execution; read what a chunk holds from its
:class:`~rlightning_core.env.runner.RolloutStats`.

Conformance: :func:`rlightning_core.testing.check_execution` checks each promise below on a built execution.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from rlightning_core.distributed.plan import SyncPlan
    from rlightning_core.env.runner import RolloutStats
    from rlightning_core.policy.base import BasePolicy

__all__ = ["Execution", "LearnResult"]

#: What :meth:`Execution.finish_learn` returns: ``metrics`` (the policy's ``loss/*``, ``stats/*``; with
#: ``stats/updates: 0`` when the call stored data but had not enough to learn from), ``lags`` (policy lag of
#: each chunk stored), ``dropped`` (chunks refused past ``max_staleness``), ``busy_s`` (seconds the learner spent).
LearnResult = dict[str, Any]


@runtime_checkable
class Execution(Protocol):
    """Where an engine's work runs: env runners, a learner side holding the buffer, rollout copies of the policy.

    Implementations need not inherit from this class (it is a :class:`typing.Protocol`).
    """

    # -- what an engine may read -----------------------------------------------------------------------------
    preprocessors: list[Any]
    """The run's observation preprocessors as the learner side holds them (their merged statistics after each
    ``collect``; checkpointed by :meth:`state_dict`; evaluation applies them with ``update=False``)."""

    preprocessors_given: bool
    """Whether the preprocessors were given to the builders (``build_data_buffer(preprocessors=...)``) rather
    than built from ``config.preprocessors`` (the run directory then records their classes)."""

    concurrent: bool
    """Whether submitted work (``start_collect``, ``start_learn``, ``publish_weights``) runs while the driver
    goes on. ``False`` in one process: it runs at submission, so a seed reproduces a run bit for bit. An engine
    may choose the shape of its loop from it; both shapes are correct either way."""

    sync_plan: SyncPlan | None
    """How weights travel learner -> rollout copies (strategy, transport, backend), for the plan the run logs;
    ``None`` where they do not travel between processes (one process)."""

    @property
    def version(self) -> int:
        """The learner's weight version: +1 at every :meth:`sync` and :meth:`publish_weights`.

        This minus a chunk's :attr:`RolloutStats.weight_version` is the chunk's policy lag.
        """
        ...

    @property
    def num_runners(self) -> int:
        """Env runners (env workers over every env config), indexed ``0..num_runners-1`` in config order."""
        ...

    def steps_per_collect(self, num_steps: int) -> int:
        """Env steps one :meth:`collect` of ``num_steps`` adds: ``num_steps`` per env of every runner."""
        ...

    # -- lifecycle -------------------------------------------------------------------------------------------
    def reset(self, seed: int) -> None:
        """Seed and reset every env runner: worker ``w`` of env config ``c`` gets ``derive_seed(seed, 1, c, w)``.

        Called once at the start of a fresh run (not on resume). A runner whose reset fails is recreated within
        ``cluster.max_restarts``.
        """
        ...

    def attach_run_dir(self, run_dir: Path) -> None:
        """The run directory exists: write there what the execution records.

        Ray: the seed ledger ``seeds.jsonl``. Called once, before :meth:`reset` or the resume. In one process
        every seed derives from the run seed and nothing is recorded: a no-op.
        """
        ...

    def close(self) -> None:
        """Release what the execution started (actors, the Ray cluster it started, shared memory, sync groups).

        Called once when the run ends, however it ends; calling it again does nothing. The env group passed in
        by the caller is closed by its owner.
        """
        ...

    # -- the batch shape -------------------------------------------------------------------------------------
    def collect(self, num_steps: int) -> list[RolloutStats]:
        """Every runner steps each env ``num_steps`` times; the chunks go to the learner side.

        Each runner uses its rollout copy; the chunks are for the next :meth:`learn`. Returns one
        :class:`RolloutStats` per runner, in runner order (``steps`` counts env steps; finished episodes,
        timings, the weight version collected with). A runner that fails is recreated within
        ``cluster.max_restarts`` and collects again (its stats count ``restarts`` and ``dropped_episodes``).
        """
        ...

    def collect_chunks(self, num_steps: int) -> list[tuple[Any, RolloutStats]]:
        """As :meth:`collect`, but the chunks are returned, not stored: ``(chunk, stats)`` per runner.

        For engines that decide per chunk what enters the buffer (the async engine's staleness bound); hand the
        chosen chunks to :meth:`add_chunks`. A runner that failed (and was recreated) has no entry.
        """
        ...

    def add_chunks(self, chunks: Sequence[Any]) -> None:
        """Store chunks from :meth:`collect_chunks` in the learner side's buffer, in order.

        At the latest when the next :meth:`learn` starts (Ray hands them to that call).
        """
        ...

    def learn(self, progress: float) -> dict[str, float]:
        """The learner updates from its buffer; an on-policy buffer is then emptied.

        It learns from everything collected or added since the last ``learn``. ``progress`` is the fraction
        of ``engine.total_steps`` done, for schedules. Returns the policy's metrics (``loss/*``, ``stats/*``).
        The rollout copies keep their weights until :meth:`sync`.
        """
        ...

    def sync(self) -> tuple[int, dict[str, float]]:
        """Make every rollout copy hold the learner's weights (and the merged preprocessor statistics).

        Bumps :attr:`version`; returns it and ``sync/*`` metrics. Every chunk collected after ``sync`` returns
        is collected with exactly these weights (bit for bit; Ray checks each copy's fingerprint).
        """
        ...

    def buffer_size(self) -> int:
        """Transitions the learner side's buffer holds now (``async/buffer_size``)."""
        ...

    # -- the streaming shape ---------------------------------------------------------------------------------
    def start_collect(self, index: int, num_steps: int) -> tuple[Any, Hashable]:
        """Submit one chunk of ``num_steps`` steps on runner ``index``; returns ``(chunk, stats_handle)``.

        ``chunk`` goes to :meth:`start_learn`; ``stats_handle`` to :meth:`wait` and :meth:`finish_collect`.
        Chunks submitted to one runner are collected in submission order.
        """
        ...

    def finish_collect(self, index: int, stats_handle: Hashable) -> RolloutStats | None:
        """The stats of a finished chunk of runner ``index`` (preprocessor statistics merged).

        ``None`` when the runner failed: it is recreated (within ``cluster.max_restarts``) and every chunk
        submitted to it and not finished is lost.
        """
        ...

    def start_learn(self, progress: float, chunks: Sequence[Any], *, version: int,
                    max_staleness: int | None) -> Hashable:
        """Submit one learner step: store the chunks within the staleness bound, then learn once.

        A chunk is stored when its policy lag (``version`` minus the chunk's weight version) is at most
        ``max_staleness`` (``None``: all). An on-policy buffer learns only from whole rollouts: chunks wait until
        every column holds one. Returns a handle for :meth:`wait` and :meth:`finish_learn`; learner steps run in
        submission order.
        """
        ...

    def finish_learn(self, handle: Hashable) -> LearnResult:
        """The :data:`LearnResult` of a finished :meth:`start_learn`."""
        ...

    def publish_weights(self) -> tuple[int, dict[str, float]]:
        """Send the learner's current weights (and preprocessor statistics) to every rollout copy, not waiting.

        Each runner's next submitted chunk is collected with them. Bumps :attr:`version`; returns it and
        ``sync/*`` metrics.
        """
        ...

    def wait(self, handles: Sequence[Hashable], timeout: float) -> list[Hashable]:
        """Block until at least one of ``handles`` finished; returns every handle of ``handles`` that has.

        Raises the execution's worker-failure error when none finished within ``timeout`` seconds.
        """
        ...

    # -- evaluation and checkpoints --------------------------------------------------------------------------
    def eval_policy(self) -> BasePolicy:
        """A policy in this process holding the weights of the last sync (for evaluation and videos).

        Those of the learner right after :meth:`sync`, when evaluation runs.
        """
        ...

    def state_dict(self) -> dict[str, Any]:
        """Sections ``policy``, ``preprocessors``, ``buffer`` and ``runners`` of a checkpoint.

        Numpy and torch values only. A checkpoint of one mode resumes in the other.
        """
        ...

    def load_state_dict(self, state: dict[str, Any]) -> list[bool]:
        """Restore :meth:`state_dict` (of either mode); the rollout copies then hold the restored weights.

        Returns, per runner, whether its envs were restored; the engine reseeds the others with
        :meth:`reseed_runner`.
        """
        ...

    def reseed_runner(self, index: int, seed: int) -> None:
        """Reset runner ``index``'s envs with ``seed`` (after a resume that could not restore them)."""
        ...
