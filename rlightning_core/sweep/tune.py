"""Sweeps on Ray Tune (``rlightning sweep --ray``): the same search space, searched by Optuna inside Tune.

Each Tune trial trains one normal run directory ``SWEEP_DIR/trial_NNNN/`` in its Tune actor (1 CPU) with
:func:`rlightning_core.training.train`, the run itself in local mode (``cluster.mode=local``: one process per
trial). An ``on_eval`` callback reports the metric to Tune each time the run evaluates; with the median pruner
Tune's median stopping rule ends trials that fall behind. The summary is the one local sweeps write.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlightning_core.config.schema import ClusterConfig
from rlightning_core.errors import UserError
from rlightning_core.sweep.local import MetricReporter, distribution, import_optuna, trial_overrides
from rlightning_core.sweep.space import SweepSpace
from rlightning_core.sweep.summary import TrialRow

__all__ = ["TRIAL_RESULT", "run_tune_sweep"]

log = logging.getLogger("rlightning")

#: Written by a trial that ran to its end (a trial Tune stopped has none): ``{"status", "value", "wall_s"}``.
TRIAL_RESULT = "sweep_trial.json"
_SCORE = "sweep_score"


def _trainable(config: dict[str, Any], *, config_file: str, sweep_dir: str, space: SweepSpace,
               overrides: Sequence[str], metric: str) -> None:
    """One Tune trial: train a run with the trial's values, reporting ``metric`` on every evaluation."""
    import time

    from ray import tune

    from rlightning_core.callbacks import Callback
    from rlightning_core.training import train

    number, run_dir = _claim_trial_dir(Path(sweep_dir))

    def report(value: float, step: int) -> bool:
        tune.report({_SCORE: value, "env_step": step, "sweep_trial": number})
        return False

    reporter = MetricReporter(metric, report)

    class _Reporter(Callback):
        def on_eval(self, step: int, metrics: dict[str, Any]) -> bool | None:
            return reporter.on_eval(step, metrics)

        def on_metrics(self, step: int, metrics: dict[str, Any]) -> bool | None:
            return reporter.on_metrics(step, metrics)

    t0 = time.perf_counter()
    train(config_file, run_dir, overrides=[*overrides, *trial_overrides(space, config), "cluster.mode=local"],
          callbacks=[_Reporter()])
    status = "COMPLETE" if reporter.last is not None else "FAIL"
    (run_dir / TRIAL_RESULT).write_text(json.dumps({"number": number, "status": status, "value": reporter.last,
                                                    "wall_s": time.perf_counter() - t0}), encoding="utf-8")


def _claim_trial_dir(sweep_dir: Path) -> tuple[int, Path]:
    """The next free ``trial_NNNN`` (created here, so trials starting together get distinct numbers)."""
    number = 0
    while True:
        path = sweep_dir / f"trial_{number:04d}"
        try:
            path.mkdir(parents=True)
        except FileExistsError:
            number += 1
            continue
        return number, path


def import_tune() -> Any:
    """``ray.tune``, or a clear error telling how to install it."""
    from rlightning_core.dependencies import import_module

    import_module("ray", pip="rlightning[tune]", needed_by="rlightning sweep --ray")
    return import_module("ray.tune", pip="rlightning[tune]", needed_by="rlightning sweep --ray")


def run_tune_sweep(config_file: Path, space: SweepSpace, sweep_dir: Path, *, trials: int,
                   overrides: Sequence[str] = (), metric: str = "eval/episode_return_mean",
                   direction: str = "maximize", seed: int = 0, cluster: ClusterConfig | None = None) -> list[TrialRow]:
    """Run ``trials`` Tune trials on the cluster (started like a run's, or the one already connected)."""
    import functools

    from rlightning_core.dependencies import require
    from rlightning_core.distributed.cluster import RayCluster

    require(["ray", "optuna"], pip="rlightning[tune]", needed_by="rlightning sweep --ray")
    optuna = import_optuna()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = sweep_dir / "tune"
    if storage.exists():
        raise UserError(f"{sweep_dir}: holds a finished --ray sweep (tune/); --ray sweeps do not resume, give "
                        "another --sweep-dir")
    ray_cluster = RayCluster(cluster or ClusterConfig()).start()
    try:
        tune = import_tune()
        from ray.tune.search.optuna import OptunaSearch

        sweep_dir.mkdir(parents=True, exist_ok=True)
        mode = "max" if direction == "maximize" else "min"
        search = OptunaSearch(space={p.key: distribution(optuna, p) for p in space.params}, metric=_SCORE,
                              mode=mode, sampler=optuna.samplers.TPESampler(
                                  seed=seed, n_startup_trials=space.sampler_startup_trials))
        scheduler = None
        if space.pruner == "median":
            scheduler = tune.schedulers.MedianStoppingRule(
                time_attr="env_step", metric=_SCORE, mode=mode, grace_period=float(space.pruner_warmup_steps),
                min_samples_required=max(1, space.pruner_startup_trials),
                min_time_slice=float("inf"))  # never pause a trial to yield: a paused trial would start over
        trainable = functools.partial(_trainable, config_file=str(config_file), sweep_dir=str(sweep_dir),
                                      space=space, overrides=list(overrides), metric=metric)
        tuner = tune.Tuner(
            tune.with_resources(trainable, {"cpu": 1}),
            tune_config=tune.TuneConfig(search_alg=search, scheduler=scheduler, num_samples=trials),
            run_config=tune.RunConfig(storage_path=str(storage.parent), name=storage.name, verbose=0),
        )
        with warnings.catch_warnings():  # OptunaSearch re-reports a trial's last step when it ends
            warnings.filterwarnings("ignore", message="The reported value is ignored", category=UserWarning)
            results = tuner.fit()
        return _rows(results, space, sweep_dir)
    finally:
        ray_cluster.shutdown()


def _rows(results: Any, space: SweepSpace, sweep_dir: Path) -> list[TrialRow]:
    """Summary rows from Tune's result grid and the files each trial left in its run dir."""
    rows = []
    for r in results:
        metrics = r.metrics or {}
        number: int | None = metrics.get("sweep_trial")
        run_dir = sweep_dir / f"trial_{number:04d}" if number is not None else None
        params = {p.key: (r.config or {}).get(p.key) for p in space.params}
        last, wall = metrics.get(_SCORE), metrics.get("time_total_s")
        if r.error is not None or run_dir is None or number is None:
            error = str(r.error).strip().splitlines()[-1][:500] if r.error is not None else "no result reported"
            rows.append(TrialRow(-1 if number is None else number, "FAIL", last, wall, params,
                                 "" if run_dir is None else str(run_dir), error))
            continue
        saved = run_dir / TRIAL_RESULT
        status = "PRUNED"  # stopped by the median stopping rule: the run did not write its result
        if saved.is_file():
            info = json.loads(saved.read_text(encoding="utf-8"))
            status, last, wall = info["status"], info["value"], info["wall_s"]
        rows.append(TrialRow(number, status, last, wall, params, str(run_dir)))
    unnumbered = [r for r in rows if r.number < 0]
    top = max((r.number for r in rows), default=-1)
    for i, r in enumerate(unnumbered, start=top + 1):
        r.number = i
    return rows
