"""BaseEngine: what every training loop shares.

Setup, stop rules, logging, checkpoints, evaluation, timing profile and the run lifecycle. Subclasses implement
:meth:`BaseEngine.iteration`.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from rlightning_core.config.schema import MainConfig
from rlightning_core.engine.contract import Execution
from rlightning_core.engine.execution import build_execution
from rlightning_core.engine.progress import ProgressBar
from rlightning_core.env.runner import RolloutStats

__all__ = ["BaseEngine", "EngineResult"]

log = logging.getLogger("rlightning")

#: Checkpoint sections whose arrays are numpy (converted to tensors on disk and back on load).
NUMPY_SECTIONS = ("preprocessors", "runners")
#: Sections of :meth:`BaseEngine.state_dict` a checkpoint must hold to resume a run; a newer file without them
#: is refused and the resume goes on from an older one.
STATE_SECTIONS = ("policy", "preprocessors", "buffer", "runners", "engine", "rng")

PHASES = ("env", "inference", "learn", "sync", "eval", "checkpoint")


@attrs.define
class EngineResult:
    """How a run ended."""

    run_dir: Path
    iterations: int
    env_steps: int
    train_s: float
    stop_reason: str
    """``total_steps``, ``target_eval_return``, ``time_limit``, ``interrupted`` (a signal) or ``callback``."""
    last_eval_return: float | None
    best_eval_return: float | None
    profile: dict[str, float]
    stop_signal: str | None = None
    """``SIGINT`` / ``SIGTERM`` when a signal stopped the run (``stop_reason`` is then ``interrupted``)."""
    stop_message: str | None = None
    """Why a callback or plugin stopped the run (``stop_reason`` ``callback``): the ``StopTraining`` message."""


class BaseEngine(ABC):
    """Owns the run loop; engines differ in what one iteration does.

    Subclasses drive the run through :attr:`execution` only (the
    :class:`~rlightning_core.engine.contract.Execution` contract), so they run in one process and on Ray alike.

    Args:
        params: the engine's structured params.
        config: the resolved run config.
        env_group: the training envs.
        policy_group: learner and rollout policies (materialized here if needed).
        buffer: a bound :class:`DataBuffer` or the handle ``build_data_buffer`` returns.
    """

    #: The ``state`` sections a checkpoint needs for :meth:`load_state_dict` (an engine that overrides
    #: :meth:`state_dict` without calling ``super()`` sets its own).
    checkpoint_sections: tuple[str, ...] = STATE_SECTIONS

    def __init__(self, params: Any, *, config: MainConfig, env_group: Any, policy_group: Any, buffer: Any,
                 preprocessors: list[Any] | None = None, plugins: Any = None) -> None:
        from rlightning_core.callbacks import RunEvents
        from rlightning_core.plugins import get_plugins

        self.params = params
        self.config = config
        self.env_group = env_group
        self.policy_group = policy_group
        self.plugins = plugins or get_plugins()
        self.events = RunEvents(self.plugins)
        """Where lifecycle events go: the plugins' hooks, then the run's callbacks (see :meth:`run`)."""
        self._stop = self.events.stop
        self.iteration_count = 0
        self.env_steps = 0
        self.train_s = 0.0
        self.best_eval: float | None = None
        self.last_eval: float | None = None
        self.profile = dict.fromkeys(PHASES, 0.0)
        self._episode_window: dict[str, deque[tuple[float, int]]] = {}
        self._pending_env_metrics: dict[str, list[float]] = {}
        self._lags: list[int] = []
        self.fault_counts: dict[str, list[int]] = {}
        """Per env label, ``[workers recreated, episodes dropped]`` so far (checkpointed)."""
        self.run_ctx: Any = None
        self.checkpoints: Any = None
        self.evaluator: Any = None
        self.video: Any = None
        """The :class:`~rlightning_core.video.EpisodeVideoRecorder` when ``logging.video_every`` is set."""
        self.execution: Execution = build_execution(config, env_group, policy_group, buffer, self.plugins,
                                                    rollout_steps=self.rollout_steps(), preprocessors=preprocessors)
        """Where the work runs: the engine's only way to collect, learn, sync, evaluate and checkpoint."""
        self.preprocessors = self.execution.preprocessors

    def execution_version(self) -> int:
        """The learner's current weight version (what rollout data is compared with for policy lag)."""
        return self.execution.version

    def rollout_steps(self) -> int:
        """Steps per env per iteration (``T``)."""
        return int(getattr(self.params, "rollout_steps", 1))

    def preprocess_fns(self) -> list[Any]:
        """Per env config, the env group's ``build_env_group(preprocess_fn=...)`` (``None`` where none)."""
        fns = getattr(self.env_group, "config_preprocess_fns", None)
        return list(fns) if fns is not None else [None] * len(self.config.env)

    # -- the loop ----------------------------------------------------------------------------------------
    @abstractmethod
    def iteration(self) -> dict[str, float]:
        """One iteration (collect / learn / sync); returns its metrics."""

    def run(self, run_dir: str | Path | None = None, *, resume_from: str | Path | None = None,
            callbacks: Iterable[Any] = ()) -> EngineResult:
        """Train until a stop rule fires; writes metrics, checkpoints and evaluations into the run dir.

        ``callbacks``: :class:`~rlightning_core.callbacks.Callback` objects, called in the driver after the
        plugins' hooks for each event; one may stop the run (then ``stop_reason`` is ``callback``).
        """
        from rlightning_core.callbacks import RunEvents
        from rlightning_core.checkpoint.manager import CheckpointManager
        from rlightning_core.engine.evaluation import Evaluator
        from rlightning_core.errors import StorageError
        from rlightning_core.run import graceful_stop, prepare_run

        cfg = self.config
        resume = None
        if resume_from is not None:  # refuse before touching the run directory; the newest that fully loads
            from rlightning_core.checkpoint.manager import load_newest

            resume = load_newest(resume_from, required_state=self.checkpoint_sections)
        if cfg.logging.video_every:
            from rlightning_core.video import require_moviepy

            require_moviepy("logging.video_every")
        given = self.preprocessors if self.execution.preprocessors_given else None
        self.events = events = RunEvents(self.plugins, callbacks)
        self.run_ctx = ctx = prepare_run(cfg, run_dir, plugins=self.plugins, resume=resume_from is not None,
                                         preprocessors=given, preprocess_fns=self.preprocess_fns(), events=events)
        self._log_plan(ctx.run_dir)
        self.execution.attach_run_dir(ctx.run_dir)  # e.g. Ray mode's seed ledger (seeds.jsonl)
        self.checkpoints = CheckpointManager(ctx.run_dir / "checkpoints", keep_last=cfg.checkpoint.keep_last,
                                             keep_best=cfg.checkpoint.keep_best)
        status, reason, started = "completed", "total_steps", False
        error: BaseException | None = None
        ended: BaseException | None = None  # a callback failed in on_run_end: raised after the cleanup
        late: StorageError | None = None  # the profile row could not be written: raised after the cleanup
        progress = ProgressBar(cfg.engine.total_steps, enabled=cfg.logging.progress)
        signals = graceful_stop(events.stop)  # SIGINT/SIGTERM (or a callback): stop after this iteration
        self._stop = signals.__enter__()
        try:
            self.checkpoints.prepare()  # a checkpoint directory that cannot be written fails before training
            if resume is not None:
                self._resume(resume)
            else:
                seed_everything(cfg.seed)
                self.execution.reset(cfg.seed)
            fns = self.preprocess_fns()  # evaluation sees what training sees
            self.evaluator = Evaluator(cfg.env, self.execution.eval_policy(), self.preprocessors,
                                       episodes=cfg.engine.eval_episodes, seed=cfg.seed,
                                       registry=self.plugins.registry, max_restarts=cfg.cluster.max_restarts,
                                       preprocess_fn=fns)
            if cfg.logging.video_every:
                from rlightning_core.env.seeding import derive_seed
                from rlightning_core.video import EpisodeVideoRecorder

                self.video = EpisodeVideoRecorder(cfg.env, self.preprocessors, ctx.run_dir / "videos",
                                                  seed=derive_seed(cfg.seed, 6), registry=self.plugins.registry,
                                                  preprocess_fn=fns)
            started = True  # from here on_run_end follows, whatever happens
            events.call_each("on_run_start", config=cfg, run_dir=ctx.run_dir)
            reason = self._loop(progress)
        except KeyboardInterrupt as exc:
            status, error, reason = "interrupted", exc, "interrupted"
            if started:
                try:
                    self._save_checkpoint()
                except StorageError as full:
                    status, error = "failed", full
                    raise self._storage_failure(full) from full
        except StorageError as exc:  # a full disk: say which checkpoint is intact and how to go on
            status, error = "failed", exc
            raise self._storage_failure(exc) from exc
        except BaseException as exc:
            status, error = "failed", exc
            raise
        finally:
            progress.close()
            if started:
                if status != "failed":
                    try:
                        self._print_profile()
                    except StorageError as exc:
                        status, error, late = "failed", exc, exc
                try:
                    events.call_each("on_run_end", run_dir=ctx.run_dir, status=status, error=error)
                except Exception as exc:
                    ended = exc
            ctx.close()
            if self.evaluator is not None:
                self.evaluator.close()
            if self.video is not None:
                self.video.close()
            self.execution.close()
            signals.__exit__(None, None, None)
        if late is not None:
            raise self._storage_failure(late) from late
        if ended is not None:
            raise ended
        return EngineResult(run_dir=ctx.run_dir, iterations=self.iteration_count, env_steps=self.env_steps,
                            train_s=self.train_s, stop_reason=reason, last_eval_return=self.last_eval,
                            best_eval_return=self.best_eval, profile=dict(self.profile),
                            stop_signal=self._stop.name or None, stop_message=self._stop.message)

    def _log_plan(self, run_dir: Path) -> None:
        """The plan ``train --dry-run`` prints, from the same function, with the choices this run made."""
        from rlightning_core.plan import describe_plan

        lines = describe_plan(self.config, run_dir=str(run_dir), sync=self.execution.sync_plan,
                              plugins=self.plugins)
        log.info("%s", "\n".join(lines))

    def _budget_spent(self) -> str | None:
        """``total_steps`` or ``time_limit`` when that budget is used up, else ``None``."""
        cfg = self.config.engine
        if self.env_steps >= cfg.total_steps:
            return "total_steps"
        if cfg.time_limit_s is not None and self.train_s >= cfg.time_limit_s:
            return "time_limit"
        return None

    def _finished_before(self) -> str | None:
        """The stop rule a resumed run had already met when its checkpoint was written (``None``: go on).

        A run killed after its last checkpoint, or resumed again once it finished, must not train an extra
        iteration past ``total_steps``.
        """
        cfg = self.config.engine
        if self.iteration_count == 0:
            return None
        spent = self._budget_spent()
        if spent is not None:
            return spent
        target = cfg.target_eval_return
        if target is not None and self.last_eval is not None and self.last_eval >= target:
            return "target_eval_return"
        return None

    def _loop(self, progress: ProgressBar) -> str:
        cfg = self.config.engine
        ccfg = self.config.checkpoint
        done = self._finished_before()
        if done is not None:
            log.warning("the checkpoint already meets the stop rule engine.%s (iteration %d, %d env steps): nothing "
                        "to train; change that setting to train on", done, self.iteration_count, self.env_steps)
            return done
        while True:
            t0 = time.perf_counter()
            try:
                metrics = self.iteration()
            except Exception as exc:  # a NaN/inf update is restated with the iteration it happened in
                from rlightning_core.policy.numerics import at_iteration

                restated = at_iteration(exc, self.iteration_count + 1, self.env_steps)
                if restated is None:
                    raise
                raise restated from None
            self.train_s += time.perf_counter() - t0
            self.iteration_count += 1
            it = self.iteration_count
            metrics.update(self._episode_metrics())
            metrics["time/train_s"] = self.train_s
            metrics["perf/sps"] = self.env_steps / self.train_s if self.train_s > 0 else 0.0
            metrics["iteration"] = it
            evaluated = False
            stopping = self._stop.requested  # a signal or callback: no final evaluation, but always a checkpoint
            reason = self._stop.reason if stopping else self._budget_spent()
            if (cfg.eval_every and it % cfg.eval_every == 0 and not stopping) or (reason is not None and not stopping):
                metrics.update(self._evaluate())
                evaluated = True
                if (cfg.target_eval_return is not None and self.last_eval is not None
                        and self.last_eval >= cfg.target_eval_return):
                    reason = reason or "target_eval_return"
            logged = it % self.config.logging.log_every == 0 or reason is not None
            if logged:
                self.run_ctx.hub.log(self.env_steps, metrics)
            video_every = self.config.logging.video_every
            if self.video is not None and video_every and it % video_every == 0:
                self._record_video(it)
            if reason is None and self._stop.requested:  # a callback asked in this iteration's eval/metrics/video
                reason, stopping = self._stop.reason, True
                if not logged:
                    self.run_ctx.hub.log(self.env_steps, metrics)
            saved = (ccfg.every and it % ccfg.every == 0) or (reason is not None and (ccfg.at_end or stopping))
            if saved:
                self._save_checkpoint(self.last_eval if evaluated else None)
            if reason is None and self._stop.requested:  # asked in on_checkpoint: that checkpoint is the last
                reason = self._stop.reason
            progress.update(self.env_steps, sps=metrics["perf/sps"], train_s=self.train_s,
                            eval_return=self.last_eval)
            if reason is not None:
                return reason

    # -- pieces ------------------------------------------------------------------------------------------
    def record_rollout(self, stats: RolloutStats) -> None:
        """Account one runner's chunk: steps, timings, finished episodes, env metrics."""
        self.env_steps += stats.steps
        self._lags.append(self.execution_version() - stats.weight_version)
        self.profile["env"] += stats.env_s
        self.profile["inference"] += stats.inference_s
        window = self._episode_window.setdefault(stats.label, deque(maxlen=100))
        for ep in stats.episodes:
            window.append((ep.episode_return, ep.length))
        for key, values in stats.metrics.items():
            self._pending_env_metrics.setdefault(f"env/{stats.label}/{key}", []).extend(values)
        restarts, dropped = stats.restarts, stats.dropped_episodes
        if restarts or dropped:  # failed workers recreated: running totals per env config
            counts = self.fault_counts.setdefault(stats.label, [0, 0])
            counts[0] += restarts
            counts[1] += dropped

    def _episode_metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for label, (restarts, dropped) in self.fault_counts.items():
            out[f"env/{label}/restarts"] = float(restarts)
            out[f"env/{label}/dropped_episodes"] = float(dropped)
        everything: list[tuple[float, int]] = []
        for label, window in self._episode_window.items():
            if window:
                rets = [r for r, _ in window]
                out[f"env/{label}/episode_return_mean"] = float(np.mean(rets))
                everything.extend(window)
        if everything:
            out["rollout/episode_return_mean"] = float(np.mean([r for r, _ in everything]))
            out["rollout/episode_length_mean"] = float(np.mean([n for _, n in everything]))
        if self._lags:
            out["perf/policy_lag_mean"] = float(np.mean(self._lags))
            out["perf/policy_lag_max"] = float(max(self._lags))
            self._lags = []
        for key, values in self._pending_env_metrics.items():
            if values:
                out[key] = float(np.mean(values))
        self._pending_env_metrics = {}
        return out

    def _evaluate(self) -> dict[str, float]:
        t0 = time.perf_counter()
        self.evaluator.policy = self.execution.eval_policy()
        metrics = self.evaluator.evaluate()
        self.profile["eval"] += time.perf_counter() - t0
        self.last_eval = metrics["eval/episode_return_mean"]
        if self.best_eval is None or self.last_eval > self.best_eval:
            self.best_eval = self.last_eval
        self.events.call_each("on_eval", step=self.env_steps, metrics=dict(metrics))
        return metrics

    def _record_video(self, iteration: int) -> None:
        """One deterministic episode per env config to ``RUN_DIR/videos/iter_<n>.mp4``, handed to the loggers."""
        t0 = time.perf_counter()
        videos = self.video.record(self.execution.eval_policy(), f"iter_{iteration}")
        self.profile["eval"] += time.perf_counter() - t0
        for tag, path, fps in videos:
            self.run_ctx.hub.log_video(self.env_steps, path, tag=tag, fps=fps)

    # -- checkpoints -------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue: policy, preprocessors, buffer, envs, counters, RNGs."""
        from rlightning_core.checkpoint.rng import capture_rng_state

        return {
            **self.execution.state_dict(),
            "engine": {"iteration": self.iteration_count, "env_steps": self.env_steps, "train_s": self.train_s,
                       "best_eval": self.best_eval, "last_eval": self.last_eval,
                       "episode_window": {k: [list(x) for x in v] for k, v in self._episode_window.items()},
                       "fault_counts": {k: list(v) for k, v in self.fault_counts.items()}},
            "rng": capture_rng_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; envs that cannot restore their state are reset (logged)."""
        from rlightning_core.checkpoint.rng import restore_rng_state
        from rlightning_core.env.seeding import derive_seed

        restored = self.execution.load_state_dict(state)
        eng = state["engine"]
        self.iteration_count, self.env_steps = int(eng["iteration"]), int(eng["env_steps"])
        self.train_s, self.best_eval, self.last_eval = float(eng["train_s"]), eng["best_eval"], eng["last_eval"]
        self._episode_window = {k: deque([tuple(x) for x in v], maxlen=100)
                                for k, v in eng["episode_window"].items()}
        self.fault_counts = {k: [int(x) for x in v] for k, v in eng.get("fault_counts", {}).items()}
        if not all(restored):
            log.warning("the envs cannot save their state (or the worker count changed): resuming with freshly "
                        "reset envs (episodes in flight at the checkpoint are dropped)")
            for w, ok in enumerate(restored):
                if not ok:
                    self.execution.reseed_runner(w, derive_seed(self.config.seed, 5, w, self.iteration_count))
        restore_rng_state(state["rng"])

    def _save_checkpoint(self, eval_return: float | None = None) -> None:
        from rlightning_core.checkpoint.manager import to_tensor_tree

        t0 = time.perf_counter()
        state = self.state_dict()
        for key in NUMPY_SECTIONS:  # numpy parts travel as tensors (weights_only-loadable), dtypes kept
            state[key] = to_tensor_tree(state[key])
        path = self.checkpoints.save(state, step=self.env_steps,
                                     iteration=self.iteration_count, eval_return=eval_return,
                                     manifest=self.run_ctx.manifest)
        self.profile["checkpoint"] += time.perf_counter() - t0
        self.events.call_each("on_checkpoint", path=path, step=self.env_steps)

    def load_checkpoint(self, path: str | Path) -> None:
        """Resume from a checkpoint file, checkpoints dir or run dir (manifest checked first).

        A directory resumes from its newest checkpoint that fully loads (every CRC, the payload's structure);
        newer files that do not are reported, one warning each, and moved aside as ``*.rejected``.
        """
        from rlightning_core.checkpoint.manager import load_newest

        self._resume(load_newest(path, required_state=self.checkpoint_sections))

    def _resume(self, loaded: Any) -> None:
        """Restore a :class:`~rlightning_core.checkpoint.reading.LoadedCheckpoint` into this run."""
        from rlightning_core.checkpoint.manager import check_manifest, to_numpy_tree
        from rlightning_core.errors import UserError

        file, state = loaded.path, loaded.state
        problems = check_manifest(loaded.manifest, expected=self._expected_manifest())
        if problems:
            raise UserError(f"cannot resume from {file}:\n  " + "\n  ".join(problems))
        loaded.report_refused("resuming from", move_aside=True)  # before this run writes over any of them
        for key in NUMPY_SECTIONS:
            state[key] = to_numpy_tree(state[key])
        self.load_state_dict(state)
        log.info("resumed from %s at iteration %d (%d env steps)", file, self.iteration_count, self.env_steps)

    def _expected_manifest(self) -> dict[str, Any]:
        """This run's manifest: the run directory's, or (``load_checkpoint`` before ``run``) built from the config."""
        if self.run_ctx is not None:
            return self.run_ctx.manifest
        from rlightning_core.run import build_manifest

        given = self.preprocessors if self.execution.preprocessors_given else None
        return build_manifest(self.config, self.plugins, preprocessors=given, preprocess_fns=self.preprocess_fns())

    def _storage_failure(self, exc: BaseException) -> BaseException:
        """``exc`` (a :class:`StorageError`) restated with the newest intact checkpoint and how to go on."""
        from rlightning_core.errors import StorageError

        latest = self.checkpoints.latest() if self.checkpoints is not None else None
        run_dir = self.run_ctx.run_dir if self.run_ctx is not None else None
        if latest is None:
            tail = "no checkpoint of this run was written yet"
        else:
            tail = f"the last good checkpoint is {latest}; free space, then resume with --resume {run_dir}"
        return StorageError(f"{exc}\n  {tail}")

    def _print_profile(self) -> None:
        total = sum(self.profile.values()) or 1.0
        parts = ", ".join(f"{k} {v:.2f}s ({v / total:.0%})" for k, v in self.profile.items() if v > 0)
        if not parts:  # nothing ran (a resumed run that had already finished)
            return
        log.info("time by phase: %s", parts)
        if self.run_ctx is not None:
            self.run_ctx.hub.log(self.env_steps, {f"profile/{k}_s": v for k, v in self.profile.items()})


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's global RNGs from the run seed."""
    import random

    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
