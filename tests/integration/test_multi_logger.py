"""Several loggers at once, in Ray mode: JSONL, TensorBoard, W&B and MLflow each receive every metric.

Metrics come from the learner actor (``loss/*``), the env-runner actors (``env/<label>/*``, ``rollout/*``) and
the driver (``perf/*``, ``eval/*``, ``profile/*``). Each logger's own files are read back with that tool's
reader and compared, key by key and step by step, with the run's ``metrics.jsonl``. Runs only where all those
plugins are installed.
"""

from __future__ import annotations

import json
import math

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("training_plugins")]

LOGGERS = ("[{type: jsonl, params: {filename: extra.jsonl}}, {type: tensorboard}, "
           "{type: wandb, params: {mode: offline}}, {type: mlflow}]")


def jsonl_points(path):
    """``{(step, key): value}`` of a metrics file (NaN was written as null and is left out)."""
    points = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        step = row.pop("step")
        points.update({(step, k): v for k, v in row.items() if v is not None})
    return points


def test_every_logger_receives_every_metric_in_ray_mode(ray_cluster, tmp_path, cartpole_config, build_run,
                                                        monkeypatch):
    for module in ("rlightning_tensorboard", "rlightning_wandb", "rlightning_mlflow"):
        pytest.importorskip(module)
    for var in ("WANDB_MODE", "WANDB_DIR", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(var, raising=False)
    from mlflow.tracking import MlflowClient
    from rlightning_wandb import read_offline_history
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config = cartpole_config("cluster.mode=ray", "env.num_workers=2", "env.num_envs=4", "checkpoint.every=0",
                             "engine.total_steps=768", "engine.eval_every=0", "engine.eval_episodes=2",
                             f"logging.loggers={LOGGERS}")
    run = tmp_path / "run"
    result = build_run(config).run(run)
    assert result.iterations == 3

    expected = jsonl_points(run / "metrics.jsonl")
    keys = {k for _, k in expected}
    assert any(k.startswith("loss/") for k in keys)  # from the learner actor
    assert any(k.startswith("env/") and k.endswith("/episode_return_mean") for k in keys)  # env-runner actors
    assert {"rollout/episode_return_mean", "perf/sps", "eval/episode_return_mean", "profile/learn_s"} <= keys
    assert len({s for s, _ in expected}) == 3  # one step per iteration

    # jsonl logger: the same rows as the run's own metrics.jsonl
    assert jsonl_points(run / "extra.jsonl") == expected

    # TensorBoard: every point, as float32
    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    tb = {(e.step, tag): e.value for tag in acc.Tags()["scalars"] for e in acc.Scalars(tag)}
    assert tb.keys() == expected.keys()
    assert all(math.isclose(tb[p], v, rel_tol=1e-6, abs_tol=1e-30) for p, v in expected.items())

    # W&B (offline run file): every point, exactly
    wb = {}
    for row in read_offline_history(run):
        wb.update({(row["_step"], k): v for k, v in row.items() if not k.startswith("_")})
    assert wb == expected

    # MLflow (SQLite store in the run directory): every point, exactly, through the client
    logger_state = json.loads((run / "mlflow-run.json").read_text())
    client = MlflowClient(tracking_uri=logger_state["tracking_uri"])
    mlflow_points = {}
    for key in keys:
        mlflow_points.update({(m.step, key): m.value for m in client.get_metric_history(logger_state["run_id"], key)})
    assert mlflow_points == expected
    assert set(client.get_run(logger_state["run_id"]).data.metrics) == keys
