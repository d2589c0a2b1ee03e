"""``check_engine``: does an engine run, record and resume a tiny run like the builtin ones?"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlightning_core.hookspecs import hookimpl
from rlightning_core.testing._common import ConformanceError, ConformanceReport, Subject

__all__ = ["check_engine"]

_RESULT_FIELDS = ("run_dir", "iterations", "env_steps", "train_s", "stop_reason", "last_eval_return")


class _Provides:
    """A plugin object registering one component given directly (not through an entry point)."""

    def __init__(self, name: str, factory: Callable[..., Any], config: type | None) -> None:
        self.name, self.factory, self.config = name, factory, config

    @hookimpl
    def register_engines(self, register: Any) -> None:
        """Register the engine under check."""
        register(self.name, self.factory, config=self.config, description="engine under check")


def check_engine(component: str | Callable[..., Any], params: Any = None, *, config: type | None = None,
                 buffer: str = "rollout", total_steps: int = 64, num_envs: int = 2,
                 run_dir: str | Path | None = None) -> ConformanceReport:
    """Check an engine by running it on test doubles, then resuming the run.

    Verifies the run directory, metrics, lifecycle hooks, checkpoints, and a resume that continues where the
    run stopped.

    The run uses env ``testing-env`` and policy ``testing-policy`` (:mod:`rlightning_core.testing.plugin`)
    next to the installed plugins; while it runs, the process's plugin set is replaced (and forgotten after).

    Args:
        component: a registered engine name, or the factory itself.
        params: the engine's params as a mapping (as under ``engine.params`` in a config file).
        config: the params class when ``component`` is a factory.
        buffer: the buffer type of the run (``replay`` for off-policy engines).
        total_steps: ``engine.total_steps`` of the first run (the resume runs twice as far).
        num_envs: envs of the single env worker.
        run_dir: where to run (default: a temporary directory).

    Raises:
        ConformanceError: the first broken rule, with the fix.
    """
    from rlightning_core.plugins import load_plugins, reset_plugins
    from rlightning_core.testing import plugin as testing_plugin
    from rlightning_core.testing.doubles import HookRecorder

    recorder = HookRecorder()
    extra: list[tuple[str, object]] = [(testing_plugin.DISTRIBUTION, testing_plugin),
                                       ("rlightning-testing-recorder", recorder)]
    name = component if isinstance(component, str) else "engine-under-check"
    if not isinstance(component, str):
        extra.append(("rlightning-testing-engine", _Provides(name, component, config)))
    plugins = load_plugins(extra=extra)
    spec = plugins.registry.resolve("engine", name)
    label = f"engine {spec.name!r} ({spec.distribution} {spec.version})"
    s = Subject(kind="engine", label=label, factory=spec.factory, params=params, takes_params=True)
    reset_plugins(plugins)
    try:
        with tempfile.TemporaryDirectory(prefix="rlightning-engine-") as tmp:
            where = Path(run_dir) if run_dir is not None else Path(tmp) / "run"
            data = _config(name, params, buffer, total_steps, num_envs)
            first = _run(s, plugins, data, where, resume=False)
            _check_first_run(s, first, recorder, where, total_steps)
            recorder.calls.clear()
            data["engine"]["total_steps"] = 2 * total_steps
            second = _run(s, plugins, data, where, resume=True)
            _check_resume(s, second, where, first)
    finally:
        reset_plugins()
    return s.report


def _config(name: str, params: Any, buffer: str, total_steps: int, num_envs: int) -> dict[str, Any]:
    return {
        "env": {"type": "testing-env", "num_envs": num_envs},
        "policy": {"type": "testing-policy", "device": "cpu", "rollout_device": "cpu"},
        "buffer": {"type": buffer},
        "engine": {"type": name, "params": dict(params or {}), "total_steps": total_steps, "eval_episodes": 2},
        "checkpoint": {"every": 1, "keep_last": 2},
        "logging": {"progress": False},
        "seed": 3,
    }


def _run(s: Subject, plugins: Any, data: dict[str, Any], run_dir: Path, *, resume: bool) -> Any:
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group
    from rlightning_core.config import load_config_dict
    from rlightning_core.errors import ConfigError

    reg = plugins.registry
    try:
        config = load_config_dict(data, registry=reg)
    except ConfigError as exc:
        raise ConformanceError(f"{s.label}: the test run's config is invalid:\n{exc}") from exc
    env_group = build_env_group(config.env, seed=config.seed, registry=reg)
    try:
        policy_group = build_policy_group(config.policy.type, config.policy, config.cluster, registry=reg)
        buf = build_data_buffer(config.buffer.type, config.buffer, registry=reg)
        engine = s.call("build_engine(config, env_group, policy_group, buffer)", build_engine, config, env_group,
                        policy_group, buf, registry=reg)
        what = f"run({run_dir}" + (", resume_from=run_dir)" if resume else ")")
        result = s.call(what, engine.run, run_dir, resume_from=run_dir if resume else None)
    finally:
        env_group.close()
    missing = [f for f in _RESULT_FIELDS if not hasattr(result, f)]
    if missing:
        s.fail(f"run() returned a {type(result).__name__} without {', '.join(missing)}",
               "return rlightning_core.engine.base.EngineResult (the CLI reports these fields)")
    return result


def _metrics(s: Subject, run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        s.fail(f"the run wrote no {path}", "log through the run's metrics hub (BaseEngine does)")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not rows or any(not isinstance(r.get("step"), int) for r in rows):
        s.fail(f"{path} has no rows, or rows without an integer 'step'",
               "log metrics with the env step count as step")
    steps = [r["step"] for r in rows]
    if steps != sorted(steps):
        s.fail(f"{path}: steps go backwards ({steps})", "log with the cumulative env step count")
    return rows


def _check_first_run(s: Subject, result: Any, recorder: Any, run_dir: Path, total_steps: int) -> None:
    if result.stop_reason == "total_steps" and result.env_steps < total_steps:
        s.fail(f"stop_reason is 'total_steps' after {result.env_steps} env steps (total_steps={total_steps})",
               "stop only when env_steps >= engine.total_steps")
    if result.iterations < 1:
        s.fail(f"run() reports {result.iterations} iterations", "count iterations in the result")
    if not (run_dir / "config.yaml").is_file():
        s.fail("the run directory has no config.yaml", "prepare the run with rlightning_core.run.prepare_run")
    rows = _metrics(s, run_dir)
    s.ok(f"a {total_steps}-step run stops ({result.stop_reason}) after {result.env_steps} env steps, "
         f"writes config.yaml and {len(rows)} metrics rows")
    names = recorder.names()
    if not names or names[0] != "on_run_start" or names[-1] != "on_run_end":
        s.fail(f"lifecycle hooks were called as {names[:3]}...{names[-2:]}",
               "call on_run_start first and on_run_end last (BaseEngine.run does)")
    status = recorder.calls[-1][1]["status"]
    if status != "completed":
        s.fail(f"on_run_end reported status {status!r} for a run that completed", "pass status='completed'")
    if "on_metrics" not in names:
        s.fail("no on_metrics hook was called", "log metrics through the run's metrics hub")
    if "on_checkpoint" not in names:
        s.fail("no checkpoint was written although checkpoint.every=1",
               "save checkpoints on the checkpoint schedule and call on_checkpoint after each")
    s.ok("hooks: on_run_start, on_metrics, on_checkpoint, on_run_end(status='completed')")


def _check_resume(s: Subject, result: Any, run_dir: Path, first: Any) -> None:
    rows = _metrics(s, run_dir)
    new = [r["step"] for r in rows if r["step"] > first.env_steps]
    if result.env_steps <= first.env_steps or not new:
        s.fail(f"run(resume_from=run_dir) ended at {result.env_steps} env steps, the first run at "
               f"{first.env_steps}", "restore the counters from the checkpoint (load_checkpoint) and continue")
    if result.iterations <= first.iterations:
        s.fail(f"after resuming, iterations went from {first.iterations} to {result.iterations}",
               "restore the iteration counter from the checkpoint")
    s.ok(f"resuming continues from {first.env_steps} to {result.env_steps} env steps")
