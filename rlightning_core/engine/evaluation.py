"""Evaluation on separate env instances with deterministic actions (no statistics updates)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from rlightning_core.config.schema import EnvConfig
from rlightning_core.errors import PreprocessFnError
from rlightning_core.policy.base import BasePolicy, initial_state_of
from rlightning_core.preprocess.base import Preprocessor
from rlightning_core.video import iter_env_frames

__all__ = ["Evaluator"]

log = logging.getLogger("rlightning")


class _EvalEnvFailed(Exception):
    """An eval env worker raised (or hung past ``env.step_timeout_s``) in ``phase``; the cause is chained."""

    def __init__(self, phase: str) -> None:
        super().__init__(phase)
        self.phase = phase


class Evaluator:
    """Runs ``episodes`` episodes per env config: one per env of a vector of ``episodes`` envs.

    Taking the first episode of every env (rather than the first ``episodes`` episodes to finish) avoids
    biasing the mean towards short episodes.

    Args:
        env_cfgs: the run's env configs (new instances are built; training envs are untouched).
        policy: the policy to evaluate (its deterministic action is used).
        preprocessors: observation preprocessors, applied with ``update=False``.
        preprocess_fn: the training envs' ``build_env_group(preprocess_fn=...)`` (one fn, or one per env
            config): evaluation envs pass their observations through the same functions.
        episodes: episodes per env config.
        seed: run seed; evaluation ``k`` seeds its envs with ``derive_seed(seed, 2, config, k)``.
        max_steps: safety bound on steps per evaluation.
        max_restarts: eval env workers recreated over the run when they raise or hang (``cluster.max_restarts``,
            a budget of their own); the failed config's evaluation then runs again from its seed, so the
            result is the one without the failure. Past it the run stops
            (:class:`~rlightning_core.errors.RestartsUsedUpError`).
            ``None``: no restarts, the env's error propagates.
    """

    def __init__(self, env_cfgs: Sequence[EnvConfig], policy: BasePolicy,
                 preprocessors: Sequence[Preprocessor] = (), *, episodes: int = 10, seed: int = 0,
                 registry: Any = None, max_steps: int = 1_000_000, render_mode: str | None = None,
                 max_restarts: int | None = None, preprocess_fn: Any = None) -> None:
        from rlightning_core.env.group import build_env_group
        from rlightning_core.env.runner import RestartBudget

        self.policy = policy
        self.preprocessors = list(preprocessors)
        self.episodes = episodes
        self.seed = seed
        self.max_steps = max_steps
        self.count = 0
        self.budget = RestartBudget(max_restarts) if max_restarts is not None else None
        self.restarts = 0
        """Eval env workers recreated so far."""
        self.last_lengths: list[int] = []
        """Episode length of every env in the last evaluation."""
        self.frame_sink: Callable[[int, Any], None] | None = None
        """When set, called as ``frame_sink(env_index, frame)`` with the rendered frame of every step of each
        env's evaluated episode (its first), the last step included (for videos; needs ``render_mode``)."""
        cfgs = [attrs.evolve(_evaluated_as(c), num_workers=1, num_envs=episodes) for c in env_cfgs]
        self.group = build_env_group(cfgs, preprocess_fn, seed=seed, registry=registry, render_mode=render_mode,
                                     seed_offset_key=2)

    def evaluate(self) -> dict[str, float]:
        """Run one evaluation; returns ``eval/episode_return_mean`` and friends (per config when several)."""
        from rlightning_core.env.seeding import derive_seed

        self.count += 1
        metrics: dict[str, float] = {}
        all_returns: list[float] = []
        all_lengths: list[int] = []
        restarts_before = self.restarts
        for c, label in enumerate(self.group.labels):
            returns, lengths = self._evaluate_worker(c, label, derive_seed(self.seed, 2, c, self.count))
            all_returns += returns
            all_lengths += lengths
            if len(self.group.workers) > 1:
                metrics[f"eval/{label}/episode_return_mean"] = float(np.mean(returns))
        metrics["eval/episode_return_mean"] = float(np.mean(all_returns))
        metrics["eval/episode_return_std"] = float(np.std(all_returns))
        metrics["eval/episode_length_mean"] = float(np.mean(all_lengths))
        if self.restarts > restarts_before:
            metrics["eval/env_restarts"] = float(self.restarts - restarts_before)
        return metrics

    def _evaluate_worker(self, index: int, label: str, seed: int) -> tuple[list[float], list[int]]:
        """:meth:`_run_worker` on worker ``index``, recreating it (within the budget) when its env fails."""
        while True:
            worker = self.group.workers[index]
            try:
                return self._run_worker(worker, seed)
            except _EvalEnvFailed as failed:
                exc = failed.__cause__ or failed
                if self.group.rebuilders is None or self.budget is None:
                    raise exc from None
                who = f"eval env worker {label!r} (env[{index}])"
                self.budget.take(who, RuntimeError(f"{failed.phase}(): {type(exc).__name__}: {exc}"))
                self.restarts += 1
                log.warning("%s failed in %s(): %s: %s; recreating it and evaluating again (restart %d of %d)",
                            who, failed.phase, type(exc).__name__, exc, self.budget.used, self.budget.max_restarts)
                kill = getattr(worker, "kill", None)
                with contextlib.suppress(Exception):  # it failed already; closing may fail too
                    (kill if callable(kill) else worker.close)()
                self.group.rebuild(index, self.restarts)

    def _run_worker(self, worker: Any, seed: int) -> tuple[list[float], list[int]]:
        n = worker.num_envs
        try:
            obs = worker.reset(seed=seed)
        except PreprocessFnError:
            raise  # the user's preprocess fn, not the env: recreating the worker would not help
        except Exception as exc:
            raise _EvalEnvFailed("reset") from exc
        returns: dict[int, float] = {}
        lengths: dict[int, int] = {}
        steps = 0
        state = initial_state_of(self.policy, n)  # recurrent policies: per-env state, reset at episode ends
        state0 = state
        while len(returns) < n:
            for p in self.preprocessors:
                obs = p.obs(obs, update=False)
            out = (self.policy.act(obs, deterministic=True) if state is None
                   else self.policy.act(obs, deterministic=True, state=state))
            try:
                step = worker.step(out.env_actions if out.env_actions is not None else out.actions)
            except PreprocessFnError:
                raise
            except Exception as exc:
                raise _EvalEnvFailed("step") from exc
            finished_before = set(returns)
            for ep in step.episodes:
                if ep.env_index not in returns:
                    returns[ep.env_index] = ep.episode_return
                    lengths[ep.env_index] = ep.length
            if self.frame_sink is not None and hasattr(worker, "render"):
                for i, frame in iter_env_frames(worker.render()):
                    if i not in finished_before:
                        self.frame_sink(i, frame)
            obs = step.obs
            if state is not None:
                ended = (step.terminated | step.truncated).reshape(n, *([1] * (out.state.ndim - 1)))
                state = np.where(ended, state0, out.state)
            steps += 1
            if steps > self.max_steps:
                raise RuntimeError(f"evaluation did not finish {n} episodes within {self.max_steps} steps")
        self.last_lengths = [lengths[i] for i in range(n)]
        return [returns[i] for i in range(n)], self.last_lengths

    def close(self) -> None:
        """Release the eval envs."""
        self.group.close()


def _evaluated_as(cfg: EnvConfig) -> EnvConfig:
    """The env config evaluation builds for ``cfg`` (``cfg`` itself unless its params name a stand-in).

    An env's params may provide ``eval_env_config(cfg)``: a ``remote`` env is evaluated on its ``local_env``, or
    on a server of its own.
    """
    stand_in = getattr(cfg.params, "eval_env_config", None)
    return stand_in(cfg) if callable(stand_in) else cfg
