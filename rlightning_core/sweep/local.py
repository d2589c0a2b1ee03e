"""Local sweeps on Optuna: a TPE sampler, a median pruner fed by the runs' eval metric, a SQLite study file.

Each trial is a normal run directory ``SWEEP_DIR/trial_NNNN/`` trained in this process by
:func:`rlightning_core.training.train` with the trial's values as overrides. The study lives in
``SWEEP_DIR/study.db``: running the same sweep again continues it. ``--trials N`` is the number of finished
trials (complete, pruned or failed) the sweep should hold; trials a killed sweep left running are marked failed
(and recorded as interrupted, so they do not count) and their values are queued again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlightning_core.sweep.space import Param, SweepSpace, override
from rlightning_core.sweep.summary import TrialRow

__all__ = ["STUDY_FILE", "MetricReporter", "import_optuna", "run_local_sweep"]

log = logging.getLogger("rlightning")

STUDY_FILE = "study.db"
_INTERRUPTED = "interrupted_trials"


def import_optuna() -> Any:
    """``optuna``, or a clear error telling how to install it."""
    from rlightning_core.dependencies import import_module

    return import_module("optuna", pip="rlightning[sweep]", needed_by="rlightning sweep")


def distribution(optuna: Any, p: Param) -> Any:
    """The Optuna distribution of one swept parameter."""
    d = optuna.distributions
    if p.kind == "categorical":
        return d.CategoricalDistribution(list(p.choices))
    assert p.low is not None and p.high is not None  # numeric kinds always have both (parse_space)
    if p.kind == "int":
        return d.IntDistribution(int(p.low), int(p.high), step=int(p.step or 1), log=p.log)
    return d.FloatDistribution(float(p.low), float(p.high), log=p.log, step=p.step)


class MetricReporter:
    """A training callback that records ``metric`` each time the run reports it and asks whether to stop.

    ``report(value, step)`` is called with every new value; when it returns True the run stops (the trial is
    pruned). ``last`` is the last value seen, the trial's result.
    """

    def __init__(self, metric: str, report: Any) -> None:
        self.metric = metric
        self.report = report
        self.last: float | None = None
        self.pruned = False

    def _seen(self, step: int, metrics: dict[str, Any]) -> bool | None:
        if self.metric not in metrics:
            return None
        self.last = float(metrics[self.metric])
        if self.report(self.last, int(step)):
            self.pruned = True
            return False
        return None

    def on_eval(self, step: int, metrics: dict[str, Any]) -> bool | None:
        """Eval metrics (``eval/*``)."""
        return self._seen(step, metrics) if self.metric.startswith("eval/") else None

    def on_metrics(self, step: int, metrics: dict[str, Any]) -> bool | None:
        """Training metrics (any other key)."""
        return None if self.metric.startswith("eval/") else self._seen(step, metrics)


def _callback(reporter: MetricReporter) -> Any:
    """``reporter`` as a :class:`rlightning_core.callbacks.Callback` subclass instance."""
    from rlightning_core.callbacks import Callback

    class _Reporter(Callback):
        def on_eval(self, step: int, metrics: dict[str, Any]) -> bool | None:
            return reporter.on_eval(step, metrics)

        def on_metrics(self, step: int, metrics: dict[str, Any]) -> bool | None:
            return reporter.on_metrics(step, metrics)

    return _Reporter()


def trial_overrides(space: SweepSpace, values: dict[str, Any]) -> list[str]:
    """The ``key=value`` overrides one trial adds to the sweep's own."""
    return [override(p.key, values[p.key]) for p in space.params if p.key in values]


def open_study(optuna: Any, sweep_dir: Path, space: SweepSpace, direction: str, seed: int) -> Any:
    """Create or load the study in ``sweep_dir/study.db``; re-queue trials a killed sweep left running."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=space.sampler_startup_trials)
    if space.pruner == "median":
        pruner = optuna.pruners.MedianPruner(n_startup_trials=space.pruner_startup_trials,
                                             n_warmup_steps=space.pruner_warmup_steps)
    else:
        pruner = optuna.pruners.NopPruner()
    study = optuna.create_study(study_name="sweep", storage=f"sqlite:///{sweep_dir / STUDY_FILE}",
                                sampler=sampler, pruner=pruner, direction=direction, load_if_exists=True)
    if study.direction.name.lower() != direction:
        from rlightning_core.errors import UserError

        raise UserError(f"{sweep_dir}: the study there is to {study.direction.name.lower()} its metric, this sweep "
                        f"asks to {direction} it (use another --sweep-dir)")
    interrupted = list(study.user_attrs.get(_INTERRUPTED, []))
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        log.info("sweep: trial %d was left running by an earlier sweep; marking it failed and queueing its "
                 "values again", t.number)
        interrupted.append(t.number)
        study.set_user_attr(_INTERRUPTED, interrupted)
        study.tell(t.number, state=optuna.trial.TrialState.FAIL)
        study.enqueue_trial(dict(t.params), skip_if_exists=False)
    return study


def finished_count(optuna: Any, study: Any) -> int:
    """Trials that count towards ``--trials``: complete, pruned or failed, less those a kill interrupted."""
    s = optuna.trial.TrialState
    interrupted = set(study.user_attrs.get("interrupted_trials", []))
    return sum(1 for t in study.get_trials(deepcopy=False, states=(s.COMPLETE, s.PRUNED, s.FAIL))
               if t.number not in interrupted)


def trial_dir(sweep_dir: Path, number: int) -> Path:
    """``SWEEP_DIR/trial_NNNN``."""
    return sweep_dir / f"trial_{number:04d}"


def run_local_sweep(config_file: str | Path, space: SweepSpace, sweep_dir: Path, *, trials: int,
                    overrides: Sequence[str] = (), metric: str = "eval/episode_return_mean",
                    direction: str = "maximize", seed: int = 0) -> list[TrialRow]:
    """Run trials until the study holds ``trials`` finished ones; returns every trial's summary row."""
    optuna = import_optuna()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    from rlightning_core.training import train

    study = open_study(optuna, sweep_dir, space, direction, seed)
    dists = {p.key: distribution(optuna, p) for p in space.params}
    s = optuna.trial.TrialState
    while finished_count(optuna, study) < trials:
        trial = study.ask(dists)
        values = dict(trial.params)
        run_dir = trial_dir(sweep_dir, trial.number)
        trial.set_user_attr("run_dir", str(run_dir))

        def report(value: float, step: int, trial: Any = trial) -> bool:
            trial.report(value, step)
            return bool(trial.should_prune())

        reporter = MetricReporter(metric, report)
        log.info("sweep: trial %d of %d: %s", trial.number, trials, ", ".join(f"{k}={v}" for k, v in values.items()))
        t0 = time.perf_counter()
        try:
            result = train(config_file, run_dir, overrides=[*overrides, *trial_overrides(space, values)],
                           callbacks=[_callback(reporter)])
        except Exception as exc:
            log.warning("sweep: trial %d failed: %s", trial.number, exc)
            trial.set_user_attr("error", str(exc)[:500])
            trial.set_user_attr("wall_s", time.perf_counter() - t0)
            study.tell(trial, state=s.FAIL)
            continue
        trial.set_user_attr("wall_s", time.perf_counter() - t0)
        if result.stop_reason == "interrupted":
            log.warning("sweep: trial %d was interrupted; the sweep stops (run it again to continue)", trial.number)
            break  # left RUNNING: the next sweep re-queues it
        if reporter.pruned:
            study.tell(trial, state=s.PRUNED)
        elif reporter.last is None:
            trial.set_user_attr("error", f"the run never reported {metric}")
            study.tell(trial, state=s.FAIL)
        else:
            study.tell(trial, reporter.last)
    return study_rows(optuna, study, space)


def study_rows(optuna: Any, study: Any, space: SweepSpace) -> list[TrialRow]:
    """One :class:`TrialRow` per trial of the study (interrupted ones say so)."""
    interrupted = set(study.user_attrs.get(_INTERRUPTED, []))
    rows = []
    for t in study.get_trials(deepcopy=False):
        status = "INTERRUPTED" if t.number in interrupted else t.state.name
        value = t.value if t.state == optuna.trial.TrialState.COMPLETE else (
            t.intermediate_values[max(t.intermediate_values)] if t.intermediate_values else None)
        rows.append(TrialRow(number=t.number, status=status, value=value,
                             wall_s=t.user_attrs.get("wall_s"),
                             params={p.key: t.params.get(p.key) for p in space.params},
                             run_dir=t.user_attrs.get("run_dir", ""), error=t.user_attrs.get("error", "")))
    return rows
