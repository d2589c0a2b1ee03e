"""Helpers for plugin authors: conformance checks, test doubles and pytest fixtures.

Each ``check_*`` builds a component the way the builders do and verifies the contract of its kind, raising
:class:`ConformanceError` with what was wrong and how to fix it (like Stable-Baselines3's ``check_env``)::

    from rlightning_core.testing import check_env, check_policy

    check_env("gridworld", {"size": 5})     # a registered name and its params, as in a config file
    check_policy(MyPolicy, config=MyParams)  # or the factory itself

With rlightning installed, pytest also gets the fixtures of :mod:`rlightning_core.testing.pytest_plugin`
(``conformance``, ``rlightning_plugins``, ``rlightning_registry``). Importing this package is light: torch
loads only when a check needs it.
"""

from __future__ import annotations

from rlightning_core.testing._common import ConformanceError, ConformanceReport
from rlightning_core.testing.buffers import check_buffer, make_chunk
from rlightning_core.testing.engines import check_engine
from rlightning_core.testing.envs import check_env
from rlightning_core.testing.execution import check_execution
from rlightning_core.testing.loggers import check_logger
from rlightning_core.testing.policies import check_policy, check_policy_spaces
from rlightning_core.testing.preprocessors import check_preprocessor

__all__ = [
    "CHECKS",
    "ConformanceError",
    "ConformanceReport",
    "check_buffer",
    "check_component",
    "check_engine",
    "check_env",
    "check_execution",
    "check_logger",
    "check_policy",
    "check_policy_spaces",
    "check_preprocessor",
    "make_chunk",
]

#: The check of each component kind.
CHECKS = {
    "env": check_env,
    "policy": check_policy,
    "buffer": check_buffer,
    "preprocessor": check_preprocessor,
    "engine": check_engine,
    "logger": check_logger,
}


def check_component(kind: str, component: object, params: object = None, **kwargs: object) -> ConformanceReport:
    """Run the check of ``kind`` (``env``, ``policy``, ``buffer``, ``preprocessor``, ``engine``, ``logger``)."""
    if kind not in CHECKS:
        raise ValueError(f"unknown component kind {kind!r}; kinds are {', '.join(CHECKS)}")
    return CHECKS[kind](component, params, **kwargs)  # type: ignore[operator]
