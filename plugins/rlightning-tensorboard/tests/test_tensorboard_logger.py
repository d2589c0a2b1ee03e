from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from rlightning_tensorboard import TensorBoardLogger, TensorBoardParams
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rlightning_core.plugins import load_plugins, reset_plugins
from rlightning_core.registry import ComponentSpec


@pytest.fixture(autouse=True)
def _isolated_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("RLIGHTNING_LOAD_PLUGINS", "RLIGHTNING_DISABLE_PLUGINS", "RLIGHTNING_STRICT_PLUGINS"):
        monkeypatch.delenv(var, raising=False)
    reset_plugins()
    yield
    reset_plugins()


@pytest.fixture
def spec() -> ComponentSpec:
    return load_plugins().registry.resolve("logger", "tensorboard")


def read_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_plugin_is_listed_as_loaded() -> None:
    plugins = load_plugins()
    info = next(p for p in plugins.plugins if p.name == "tensorboard")
    assert info.status == "loaded", info.error
    assert info.distribution == "rlightning-tensorboard"
    assert info.api == ">=2,<3"
    assert info.hooks == ["register_loggers"]
    assert info.provides == {"logger": ["tensorboard"]}


def test_registered_with_params_class(spec: ComponentSpec) -> None:
    assert spec.config is TensorBoardParams
    assert spec.distribution == "rlightning-tensorboard"
    assert spec.description
    defaults = TensorBoardParams()
    assert defaults.subdir == "tensorboard"
    assert defaults.flush_secs == 10


def test_logs_scalars_readable_by_tensorboard(spec: ComponentSpec, tmp_path: Path) -> None:
    logger = spec.build(TensorBoardParams(), run_dir=tmp_path)
    assert isinstance(logger, TensorBoardLogger)
    logger.log(100, {"loss/policy": 0.5, "rollout/episode_return": 10.0})
    logger.log(200, {"loss/policy": 0.25, "rollout/episode_return": 20.0, "perf/sps": 1234})
    logger.close()

    scalars = read_scalars(tmp_path / "tensorboard")
    assert set(scalars) == {"loss/policy", "rollout/episode_return", "perf/sps"}
    assert scalars["loss/policy"] == [(100, 0.5), (200, 0.25)]
    assert scalars["rollout/episode_return"] == [(100, 10.0), (200, 20.0)]
    assert scalars["perf/sps"] == [(200, 1234.0)]


def test_subdir_and_numeric_kinds(spec: ComponentSpec, tmp_path: Path) -> None:
    import numpy as np
    import torch

    logger = spec.build(TensorBoardParams(subdir="logs/tb", flush_secs=0.5), run_dir=tmp_path)
    logger.log(1, {"a": np.float32(1.5), "b": torch.tensor(2.5), "c": True, "d": np.int64(7)})
    logger.close()
    scalars = read_scalars(tmp_path / "logs" / "tb")
    assert scalars == {"a": [(1, 1.5)], "b": [(1, 2.5)], "c": [(1, 1.0)], "d": [(1, 7.0)]}


def test_non_finite_written_non_numeric_skipped(
    spec: ComponentSpec, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    logger = spec.build(TensorBoardParams(), run_dir=tmp_path)
    logger.log(1, {"loss/nan": float("nan"), "loss/inf": float("inf"), "note": "hello"})
    logger.log(2, {"note": "again"})
    logger.close()
    scalars = read_scalars(tmp_path / "tensorboard")
    assert set(scalars) == {"loss/nan", "loss/inf"}
    assert math.isnan(scalars["loss/nan"][0][1])
    assert scalars["loss/inf"] == [(1, math.inf)]
    warnings = [r for r in caplog.records if "'note'" in r.getMessage()]
    assert len(warnings) == 1


def test_close_flushes_and_is_idempotent(spec: ComponentSpec, tmp_path: Path) -> None:
    logger = spec.build(TensorBoardParams(flush_secs=3600), run_dir=tmp_path)
    logger.log(5, {"x": 1.0})
    logger.close()
    logger.close()
    assert read_scalars(tmp_path / "tensorboard") == {"x": [(5, 1.0)]}
    with pytest.raises(RuntimeError, match="closed"):
        logger.log(6, {"x": 2.0})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"subdir": ""}, "non-empty"),
        ({"subdir": "/abs/tb"}, "relative path"),
        ({"subdir": "../outside"}, "relative path"),
        ({"flush_secs": 0}, "must be > 0"),
    ],
)
def test_params_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TensorBoardParams(**kwargs)  # type: ignore[arg-type]


def test_params_are_frozen() -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        TensorBoardParams().subdir = "x"  # type: ignore[misc]


def test_plugin_module_does_not_import_torch_or_tensorboard() -> None:
    code = (
        "import sys\n"
        "from rlightning_core.plugins import load_plugins\n"
        "ps = load_plugins(allow=['rlightning-tensorboard'])\n"
        "assert any(p.name == 'tensorboard' and p.status == 'loaded' for p in ps.plugins)\n"
        "heavy = [m for m in ('torch', 'tensorboard') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_video_becomes_an_animated_image(spec: ComponentSpec, tmp_path: Path) -> None:
    """``log_video`` (used by ``logging.video_every``) writes what ``add_video`` would: an animated GIF."""
    pytest.importorskip("moviepy")
    import io

    import numpy as np
    from PIL import Image

    from rlightning_core.video import Mp4Writer

    writer = Mp4Writer(tmp_path / "clip.mp4", fps=20)
    for i in range(30):  # a white square moving right on black
        frame = np.zeros((48, 64, 3), np.uint8)
        frame[16:32, 2 * i: 2 * i + 8] = 255
        writer.write(frame)
    writer.close()
    logger = spec.build(TensorBoardParams(video_max_frames=10), run_dir=tmp_path)
    logger.log_video(640, tmp_path / "clip.mp4", tag="video", fps=20)
    logger.close()

    acc = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"images": 0})
    acc.Reload()
    assert acc.Tags()["images"] == ["video"]
    (event,) = acc.Images("video")
    assert (event.step, event.width, event.height) == (640, 64, 48)
    gif = Image.open(io.BytesIO(event.encoded_image_string))
    assert gif.format == "GIF" and gif.n_frames == 10  # 30 frames thinned to every 3rd
    assert gif.info["duration"] == 150  # 3 frames at 20 fps: the clip keeps its 1.5 s
    first = np.asarray(gif.convert("RGB"))
    assert first[24, 4].min() > 200 and first[24, 40].max() < 50  # the square, where it starts
