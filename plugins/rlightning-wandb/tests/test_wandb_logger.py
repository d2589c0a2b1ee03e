"""The ``wandb`` logger, through its entry point, against the real wandb package in offline mode.

Every test reads back the run file wandb wrote (``RUN_DIR/wandb/offline-run-*/run-*.wandb``).
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from rlightning_wandb import WandbLogger, WandbParams, read_offline_history
from rlightning_wandb.offline import find_offline_runs, iter_records

from rlightning_core.plugins import load_plugins, reset_plugins
from rlightning_core.registry import ComponentSpec


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("RLIGHTNING_LOAD_PLUGINS", "RLIGHTNING_DISABLE_PLUGINS", "RLIGHTNING_STRICT_PLUGINS"):
        monkeypatch.delenv(var, raising=False)
    for var in ("WANDB_MODE", "WANDB_DIR", "WANDB_PROJECT", "WANDB_RUN_ID", "WANDB_RESUME"):
        monkeypatch.delenv(var, raising=False)
    reset_plugins()
    yield
    reset_plugins()


@pytest.fixture
def spec() -> ComponentSpec:
    return load_plugins().registry.resolve("logger", "wandb")


def metrics_by_step(rows: list[dict]) -> dict[int, dict]:
    return {row["_step"]: {k: v for k, v in row.items() if not k.startswith("_")} for row in rows}


def test_plugin_is_listed_as_loaded() -> None:
    info = next(p for p in load_plugins().plugins if p.name == "wandb")
    assert info.status == "loaded", info.error
    assert info.distribution == "rlightning-wandb"
    assert info.hooks == ["register_loggers"]
    assert info.provides == {"logger": ["wandb"]}


def test_registered_with_params_class(spec: ComponentSpec) -> None:
    assert spec.config is WandbParams
    assert spec.description
    assert WandbParams().mode == "offline"


def test_metrics_steps_and_config_read_back(spec: ComponentSpec, tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("seed: 3\npolicy:\n  type: ppo\n  params: {lr: 0.0003}\n")
    logger = spec.build(WandbParams(tags=["test"]), run_dir=tmp_path)
    assert isinstance(logger, WandbLogger)
    logger.log(100, {"loss/policy": 0.5, "rollout/episode_return_mean": 10.0})
    logger.log(200, {"loss/policy": 0.25, "perf/sps": 1234, "loss/nan": float("nan"), "note": "text"})
    logger.close()
    logger.close()
    with pytest.raises(RuntimeError, match="closed"):
        logger.log(300, {"x": 1.0})

    (run_file,) = find_offline_runs(tmp_path)
    assert run_file.parent.parent == tmp_path / "wandb"
    by_step = metrics_by_step(read_offline_history(tmp_path))
    assert sorted(by_step) == [100, 200]
    assert by_step[100] == {"loss/policy": 0.5, "rollout/episode_return_mean": 10.0}
    assert by_step[200]["loss/policy"] == 0.25 and by_step[200]["perf/sps"] == 1234
    assert math.isnan(by_step[200]["loss/nan"])
    assert "note" not in by_step[200]

    config = {}
    for record in iter_records(run_file):
        if record.WhichOneof("record_type") == "config":
            config.update({item.key: item.value_json for item in record.config.update})
        if record.WhichOneof("record_type") == "run":  # the config given to wandb.init travels here
            config.update({item.key: item.value_json for item in record.run.config.update})
            assert record.run.display_name == tmp_path.name
            assert list(record.run.tags) == ["test"]
    assert config["seed"] == "3" and config["policy.type"] == '"ppo"' and config["policy.params.lr"] == "0.0003"


def test_two_runs_in_one_process_stay_apart(spec: ComponentSpec, tmp_path: Path) -> None:
    a = spec.build(WandbParams(log_config=False), run_dir=tmp_path / "a")
    b = spec.build(WandbParams(log_config=False, name="second"), run_dir=tmp_path / "b")
    a.log(1, {"x": 1.0})
    b.log(1, {"x": 2.0})
    a.close()
    b.log(2, {"x": 3.0})
    b.close()
    assert metrics_by_step(read_offline_history(tmp_path / "a")) == {1: {"x": 1.0}}
    assert metrics_by_step(read_offline_history(tmp_path / "b")) == {1: {"x": 2.0}, 2: {"x": 3.0}}


def test_reader_refuses_a_damaged_file(spec: ComponentSpec, tmp_path: Path) -> None:
    logger = spec.build(WandbParams(log_config=False), run_dir=tmp_path)
    logger.log(1, {"x": 1.0})
    logger.close()
    (tmp_path / "config.yaml").mkdir()  # a directory without any W&B run in it
    (run_file,) = find_offline_runs(tmp_path)
    data = bytearray(run_file.read_bytes())
    data[40] ^= 0xFF
    run_file.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum"):
        read_offline_history(run_file)
    with pytest.raises(FileNotFoundError, match="no W&B run file"):
        read_offline_history(tmp_path / "config.yaml")


def test_online_without_credentials_is_a_user_error(spec: ComponentSpec, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from rlightning_core.errors import UserError

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc with a key
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "config"))
    with pytest.raises(UserError, match="wandb login"):
        spec.build(WandbParams(mode="online", log_config=False), run_dir=tmp_path / "run")


@pytest.mark.parametrize(("kwargs", "message"), [({"mode": "cloud"}, "must be one of")])
def test_params_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WandbParams(**kwargs)  # type: ignore[arg-type]


def test_params_are_frozen() -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        WandbParams().mode = "online"  # type: ignore[misc]


def test_plugin_module_does_not_import_wandb_or_torch() -> None:
    code = (
        "import sys\n"
        "from rlightning_core.plugins import load_plugins\n"
        "ps = load_plugins(allow=['rlightning-wandb'])\n"
        "assert any(p.name == 'wandb' and p.status == 'loaded' for p in ps.plugins)\n"
        "heavy = [m for m in ('torch', 'wandb') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_video_is_logged_as_wandb_video(spec: ComponentSpec, tmp_path: Path) -> None:
    """``log_video`` (used by ``logging.video_every``) attaches the MP4 to the history row of its step."""
    pytest.importorskip("moviepy")
    import numpy as np

    from rlightning_core.video import Mp4Writer

    writer = Mp4Writer(tmp_path / "videos" / "iter_2.mp4", fps=10)
    for i in range(6):
        writer.write(np.full((32, 32, 3), 40 * i, np.uint8))
    writer.close()
    logger = spec.build(WandbParams(log_config=False), run_dir=tmp_path)
    logger.log(512, {"loss/policy": 0.5})
    logger.log_video(512, tmp_path / "videos" / "iter_2.mp4", tag="video", fps=10)
    logger.close()

    (row,) = read_offline_history(tmp_path)
    assert row["_step"] == 512 and row["loss/policy"] == 0.5
    video = row["video"]
    assert video["_type"] == "video-file"
    stored = find_offline_runs(tmp_path)[0].parent / "files" / video["path"]
    assert stored.read_bytes() == (tmp_path / "videos" / "iter_2.mp4").read_bytes()
