"""Fixtures of the rsl-rl plugin's tests: plugin isolation."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rlightning_core.plugins import reset_plugins


@pytest.fixture(autouse=True)
def _isolated_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("RLIGHTNING_LOAD_PLUGINS", "RLIGHTNING_DISABLE_PLUGINS", "RLIGHTNING_STRICT_PLUGINS"):
        monkeypatch.delenv(var, raising=False)
    reset_plugins()
    yield
    reset_plugins()
