"""The ``mlflow`` logger, through its entry point, against the real MLflow client and a SQLite store.

Every test reads back through :class:`mlflow.tracking.MlflowClient`.
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from rlightning_mlflow import MlflowLogger, MlflowParams

from rlightning_core.plugins import load_plugins, reset_plugins
from rlightning_core.registry import ComponentSpec


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("RLIGHTNING_LOAD_PLUGINS", "RLIGHTNING_DISABLE_PLUGINS", "RLIGHTNING_STRICT_PLUGINS",
                "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID"):
        monkeypatch.delenv(var, raising=False)
    reset_plugins()
    yield
    reset_plugins()


@pytest.fixture
def spec() -> ComponentSpec:
    return load_plugins().registry.resolve("logger", "mlflow")


def history(logger: MlflowLogger, key: str) -> list[tuple[int, float]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=logger.tracking_uri)  # a fresh client: what another process would see
    return [(m.step, m.value) for m in client.get_metric_history(logger.run_id, key)]


def test_plugin_is_listed_as_loaded() -> None:
    info = next(p for p in load_plugins().plugins if p.name == "mlflow")
    assert info.status == "loaded", info.error
    assert info.distribution == "rlightning-mlflow"
    assert info.hooks == ["register_loggers"]
    assert info.provides == {"logger": ["mlflow"]}


def test_metrics_params_and_resume_read_back(spec: ComponentSpec, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    assert spec.config is MlflowParams and spec.description
    (tmp_path / "config.yaml").write_text(
        "seed: 3\nenv:\n- {type: gymnasium, params: {id: CartPole-v1}}\npolicy: {type: ppo, params: {lr: 0.0003}}\n")
    logger = spec.build(MlflowParams(tags={"team": "rl"}), run_dir=tmp_path)
    logger.log(100, {"loss/policy": 0.5, "rollout/episode_return_mean": 10.0, "env/Cart Pole(v1)/x": 1.0})
    logger.log(200, {"loss/policy": 0.25, "loss/inf": float("inf"), "loss/nan": float("nan"), "note": "text"})
    logger.close()
    logger.close()
    with pytest.raises(RuntimeError, match="closed"):
        logger.log(300, {"x": 1.0})

    assert (tmp_path / "mlflow.db").is_file()
    assert history(logger, "loss/policy") == [(100, 0.5), (200, 0.25)]
    assert history(logger, "rollout/episode_return_mean") == [(100, 10.0)]
    assert history(logger, "env/Cart Pole_v1_/x") == [(100, 1.0)]
    assert history(logger, "loss/inf")[0][1] > 1e300  # MLflow's stores clip infinity to the largest float
    ((step, value),) = history(logger, "loss/nan")
    assert step == 200 and math.isnan(value)
    assert history(logger, "note") == []
    run = MlflowClient(tracking_uri=logger.tracking_uri).get_run(logger.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == tmp_path.name
    assert run.data.params["seed"] == "3" and run.data.params["policy.params.lr"] == "0.0003"
    assert run.data.params["env.0.params.id"] == "CartPole-v1"
    assert run.data.tags["team"] == "rl" and run.data.tags["rlightning.run_dir"] == str(tmp_path.resolve())

    # a resumed training run (same run directory) continues the same MLflow run; a changed config is fine
    (tmp_path / "config.yaml").write_text("seed: 3\nengine: {total_steps: 999}\n")
    again = spec.build(MlflowParams(), run_dir=tmp_path)
    assert again.run_id == logger.run_id
    again.log(300, {"loss/policy": 0.125})
    again.close()
    assert history(again, "loss/policy") == [(100, 0.5), (200, 0.25), (300, 0.125)]
    params = MlflowClient(tracking_uri=logger.tracking_uri).get_run(logger.run_id).data.params
    assert params["seed"] == "3" and params["engine.total_steps"] == "999"


def test_shared_store_and_video_artifact(spec: ComponentSpec, tmp_path: Path, shared_uri: str) -> None:
    uri = shared_uri
    video = tmp_path / "iter_2.mp4"
    video.write_bytes(b"\x00\x00\x00\x18ftypmp42")  # only copied, never decoded
    runs = []
    for name in ("a", "b"):
        logger = spec.build(MlflowParams(tracking_uri=uri, experiment="shared-store", log_config=False),
                            run_dir=tmp_path / name)
        logger.log(1, {"x": float(len(runs))})
        logger.log_video(1, video, tag="video")
        logger.close()
        runs.append(logger)
    assert runs[0].run_id != runs[1].run_id
    assert [history(r, "x") for r in runs] == [[(1, 0.0)], [(1, 1.0)]]
    artifacts = [a.path for a in runs[0].client.list_artifacts(runs[0].run_id, "videos")]
    assert artifacts == ["videos/iter_2.mp4"]
    store_dir = Path(uri.removeprefix("sqlite:///")).parent  # artifacts beside the store, not in ./mlruns
    assert len(list(store_dir.glob("mlflow-artifacts/*/artifacts/videos/iter_2.mp4"))) == 2


def test_an_unusable_tracking_uri_is_a_user_error(spec: ComponentSpec, tmp_path: Path) -> None:
    from rlightning_core.errors import UserError

    with pytest.raises(UserError, match=r"could not open a run in 'foo://bar' \(params.tracking_uri\)"):
        spec.build(MlflowParams(tracking_uri="foo://bar"), run_dir=tmp_path)


@pytest.mark.parametrize(("kwargs", "message"), [({"experiment": ""}, "non-empty"),
                                                  ({"tracking_uri": " "}, "tracking URI")])
def test_params_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MlflowParams(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        MlflowParams().experiment = "x"  # type: ignore[misc]


def test_plugin_module_does_not_import_mlflow_or_torch() -> None:
    code = (
        "import sys\n"
        "from rlightning_core.plugins import load_plugins\n"
        "ps = load_plugins(allow=['rlightning-mlflow'])\n"
        "assert any(p.name == 'mlflow' and p.status == 'loaded' for p in ps.plugins)\n"
        "heavy = [m for m in ('torch', 'mlflow') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
