"""The ``swanlab`` logger, through its entry point, against the real swanlab package in offline mode.

Every test reads back the run file SwanLab wrote (``RUN_DIR/swanlog/run-*/run-*.swanlab``).
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from rlightning_swanlab import SwanlabLogger, SwanlabParams

from rlightning_core.plugins import load_plugins, reset_plugins
from rlightning_core.registry import ComponentSpec


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("RLIGHTNING_LOAD_PLUGINS", "RLIGHTNING_DISABLE_PLUGINS", "RLIGHTNING_STRICT_PLUGINS",
                "SWANLAB_MODE", "SWANLAB_LOG_DIR", "SWANLAB_PROJECT"):
        monkeypatch.delenv(var, raising=False)
    reset_plugins()
    yield
    reset_plugins()


@pytest.fixture
def spec() -> ComponentSpec:
    return load_plugins().registry.resolve("logger", "swanlab")


def test_plugin_is_listed_as_loaded() -> None:
    info = next(p for p in load_plugins().plugins if p.name == "swanlab")
    assert info.status == "loaded", info.error
    assert info.distribution == "rlightning-swanlab"
    assert info.hooks == ["register_loggers"]
    assert info.provides == {"logger": ["swanlab"]}


def test_metrics_steps_and_config_read_back(spec: ComponentSpec, tmp_path: Path, read_swanlab) -> None:
    assert spec.config is SwanlabParams and spec.description and SwanlabParams().mode == "offline"
    (tmp_path / "config.yaml").write_text("seed: 3\npolicy:\n  type: ppo\n  params: {lr: 0.0003}\n")
    logger = spec.build(SwanlabParams(monitor=False, tags=["test"]), run_dir=tmp_path)
    assert isinstance(logger, SwanlabLogger)
    logger.log(100, {"loss/policy": 0.5, "rollout/episode_return_mean": 10.0})
    logger.log(200, {"loss/policy": 0.25, "loss/nan": float("nan"), "perf/sps": 1234, "note": "text"})
    logger.close()
    logger.close()
    with pytest.raises(RuntimeError, match="closed"):
        logger.log(300, {"x": 1.0})

    run = read_swanlab(tmp_path)
    assert run["finished"]
    scalars = run["scalars"]
    assert scalars["loss/policy"] == [(100, 0.5), (200, 0.25)]
    assert scalars["rollout/episode_return_mean"] == [(100, 10.0)]
    assert scalars["perf/sps"] == [(200, 1234.0)]
    assert math.isnan(scalars["loss/nan"][0][1])
    assert "note" not in scalars
    assert run["config"]["seed"] == 3 and run["config"]["policy.params.lr"] == 0.0003


def test_params_validation_and_frozen() -> None:
    with pytest.raises(ValueError, match="must be one of"):
        SwanlabParams(mode="cloud")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        SwanlabParams().mode = "online"  # type: ignore[misc]


def test_plugin_module_does_not_import_swanlab_or_torch() -> None:
    code = (
        "import sys\n"
        "from rlightning_core.plugins import load_plugins\n"
        "ps = load_plugins(allow=['rlightning-swanlab'])\n"
        "assert any(p.name == 'swanlab' and p.status == 'loaded' for p in ps.plugins)\n"
        "heavy = [m for m in ('torch', 'swanlab') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
