"""pytest fixtures for plugin authors, loaded automatically through rlightning's ``pytest11`` entry point.

- ``rlightning_plugins``: the installed plugins, freshly loaded for the test (``RLIGHTNING_*`` variables
  cleared), forgotten afterwards.
- ``rlightning_registry``: that plugin set's registry.
- ``conformance``: the ``check_*`` functions of :mod:`rlightning_core.testing`, resolving names against that
  registry and running engines in the test's ``tmp_path``::

      def test_my_env_conforms(conformance):
          conformance.check_env("gridworld", {"size": 5})

Nothing here is autouse and nothing heavy is imported when pytest starts.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_PLUGIN_ENV_VARS = ("RLIGHTNING_LOAD_PLUGINS", "RLIGHTNING_DISABLE_PLUGINS", "RLIGHTNING_STRICT_PLUGINS")


class Conformance:
    """The conformance checks bound to one registry (and a directory for engine runs)."""

    def __init__(self, registry: Any, tmp_path: Path) -> None:
        self.registry = registry
        self.tmp_path = tmp_path

    def check_env(self, component: Any, params: Any = None, **kwargs: Any) -> Any:
        """:func:`rlightning_core.testing.check_env` against this registry."""
        from rlightning_core.testing import check_env

        return check_env(component, params, registry=self.registry, **kwargs)

    def check_policy(self, component: Any, params: Any = None, **kwargs: Any) -> Any:
        """:func:`rlightning_core.testing.check_policy` against this registry."""
        from rlightning_core.testing import check_policy

        return check_policy(component, params, registry=self.registry, **kwargs)

    def check_policy_spaces(self, component: Any, params: Any = None, **kwargs: Any) -> Any:
        """:func:`rlightning_core.testing.check_policy_spaces` against this registry."""
        from rlightning_core.testing import check_policy_spaces

        return check_policy_spaces(component, params, registry=self.registry, **kwargs)

    def check_buffer(self, component: Any, params: Any = None, **kwargs: Any) -> Any:
        """:func:`rlightning_core.testing.check_buffer` against this registry."""
        from rlightning_core.testing import check_buffer

        return check_buffer(component, params, registry=self.registry, **kwargs)

    def check_preprocessor(self, component: Any, params: Any = None, **kwargs: Any) -> Any:
        """:func:`rlightning_core.testing.check_preprocessor` against this registry."""
        from rlightning_core.testing import check_preprocessor

        return check_preprocessor(component, params, registry=self.registry, **kwargs)

    def check_logger(self, component: Any, params: Any = None, **kwargs: Any) -> Any:
        """:func:`rlightning_core.testing.check_logger` against this registry, in ``tmp_path``."""
        from rlightning_core.testing import check_logger

        kwargs.setdefault("run_dir", self.tmp_path / "logger-run")
        Path(kwargs["run_dir"]).mkdir(parents=True, exist_ok=True)
        return check_logger(component, params, registry=self.registry, **kwargs)

    def check_engine(self, component: Any, params: Any = None, **kwargs: Any) -> Any:
        """:func:`rlightning_core.testing.check_engine`, running in ``tmp_path``."""
        from rlightning_core.testing import check_engine

        kwargs.setdefault("run_dir", self.tmp_path / "engine-run")
        return check_engine(component, params, **kwargs)

    def check(self, kind: str, component: Any, params: Any = None, **kwargs: Any) -> Any:
        """The check of ``kind`` (``env``, ``policy``, ``buffer``, ``preprocessor``, ``engine``, ``logger``)."""
        return getattr(self, f"check_{kind}")(component, params, **kwargs)


@pytest.fixture
def rlightning_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The installed plugins, loaded fresh for this test (``RLIGHTNING_*`` variables cleared)."""
    from rlightning_core.plugins import get_plugins, reset_plugins

    for var in _PLUGIN_ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    reset_plugins()
    yield get_plugins()
    reset_plugins()


@pytest.fixture
def rlightning_registry(rlightning_plugins: Any) -> Any:
    """The registry of :func:`rlightning_plugins`."""
    return rlightning_plugins.registry


@pytest.fixture
def conformance(rlightning_registry: Any, tmp_path: Path) -> Conformance:
    """The conformance checks, resolving names against the freshly loaded plugins."""
    return Conformance(rlightning_registry, tmp_path)
