"""Fixtures of the gymnasium plugin's tests: a tiny env that reports ``info["metrics"]``, plugin isolation."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium
import numpy as np
import pytest

from rlightning_core.plugins import reset_plugins

METRICS_ENV_ID = "RlightningMetricsTest-v0"


class MetricsEnv(gymnasium.Env):
    """Counts steps; terminates after ``horizon`` steps; reports ``metrics`` in every step info."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, horizon: int = 3, reset_metrics: bool = False, bad_metric: bool = False) -> None:
        self.observation_space = gymnasium.spaces.Box(0.0, 100.0, shape=(1,), dtype=np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)
        self.horizon = horizon
        self.reset_metrics = reset_metrics
        self.bad_metric = bad_metric
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        info = {"metrics": {"foo": -100.0}} if self.reset_metrics else {}
        return np.zeros(1, dtype=np.float32), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        metrics: dict[str, Any] = {"foo": 1.0, "t": float(self.t), "nested": {"bar": 2.0}}
        if self.bad_metric:
            metrics["name"] = "not a number"
        obs = np.array([self.t], dtype=np.float32)
        return obs, 1.0, self.t >= self.horizon, False, {"metrics": metrics}


@pytest.fixture(scope="session", autouse=True)
def metrics_env_id() -> Iterator[str]:
    gymnasium.register(id=METRICS_ENV_ID, entry_point=MetricsEnv)
    yield METRICS_ENV_ID
    gymnasium.registry.pop(METRICS_ENV_ID, None)


@pytest.fixture(autouse=True)
def _isolated_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("RLIGHTNING_LOAD_PLUGINS", "RLIGHTNING_DISABLE_PLUGINS", "RLIGHTNING_STRICT_PLUGINS"):
        monkeypatch.delenv(var, raising=False)
    reset_plugins()
    yield
    reset_plugins()
