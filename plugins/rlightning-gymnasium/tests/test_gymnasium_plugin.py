"""The plugin as users get it (``pip install -e plugins/rlightning-gymnasium``), found by its entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rlightning_gymnasium.params import GymnasiumParams
from rlightning_gymnasium.worker import GymnasiumWorker

from rlightning_core.config.loading import resolve_params
from rlightning_core.plugins import get_plugins, load_plugins

RLIGHTNING = Path(sys.executable).parent / "rlightning"


def test_entry_point_loads_and_registers_the_env() -> None:
    plugins = load_plugins(allow=["rlightning-gymnasium"], deny=[], strict=True)
    (info,) = [p for p in plugins.plugins if p.name == "gymnasium"]
    assert info.status == "loaded", info.error
    assert info.distribution == "rlightning-gymnasium"
    assert info.api == ">=2,<3"
    assert info.hooks == ["register_envs"]
    assert info.provides == {"env": ["gymnasium"]}
    spec = plugins.registry.resolve("env", "gymnasium")
    assert spec.config is GymnasiumParams
    assert spec.qualified_name == "rlightning-gymnasium:gymnasium"
    assert "Gymnasium" in spec.description


def test_default_plugin_set_has_it_and_builds_a_worker() -> None:
    spec = get_plugins().registry.resolve("env", "gymnasium")
    problems: list[str] = []
    params = resolve_params(spec, {"id": "CartPole-v1", "max_episode_steps": 10}, "env[0]", problems)
    assert problems == []
    assert isinstance(params, GymnasiumParams)
    worker = spec.build(params, num_envs=2, seed=3, worker_index=1)
    try:
        assert isinstance(worker, GymnasiumWorker)
        assert worker.worker_index == 1 and worker.seed == 3
        assert worker.reset().shape == (2, 4)
        assert worker.step(np.zeros(2, dtype=np.int64)).obs.shape == (2, 4)
    finally:
        worker.close()


def test_bad_params_are_reported_with_their_path() -> None:
    spec = get_plugins().registry.resolve("env", "gymnasium")
    problems: list[str] = []
    resolve_params(spec, {"id": "CartPole-v1", "wrappers": [{"type": "NoSuchWrapper"}]}, "env[1]", problems)
    assert len(problems) == 1 and problems[0].startswith("env[1].params.wrappers[0].type: unknown gymnasium")


@pytest.mark.skipif(not RLIGHTNING.exists(), reason="the rlightning console script is not installed")
def test_list_plugins_shows_it() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLIGHTNING_")}
    out = subprocess.run([str(RLIGHTNING), "list-plugins", "--json"], capture_output=True, text=True,
                         env=env, check=True, timeout=120).stdout
    rows = {p["name"]: p for p in json.loads(out)["plugins"]}
    assert rows["gymnasium"]["status"] == "loaded"
    assert rows["gymnasium"]["distribution"] == "rlightning-gymnasium"
    assert rows["gymnasium"]["provides"] == {"env": ["gymnasium"]}
    text = subprocess.run([str(RLIGHTNING), "list-plugins"], capture_output=True, text=True, env=env,
                          check=True, timeout=120).stdout
    assert "rlightning-gymnasium" in text and "env: gymnasium" in text
