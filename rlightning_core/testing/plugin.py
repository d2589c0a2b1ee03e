"""A plugin that registers the test doubles, for runs assembled by tests (never an entry point).

Load it next to the installed plugins with::

    from rlightning_core.plugins import load_plugins
    from rlightning_core.testing import plugin as testing_plugin

    plugins = load_plugins(extra=[("rlightning-testing", testing_plugin)])

It provides env ``testing-env`` (:class:`~rlightning_core.testing.doubles.SpaceEnv`), policy ``testing-policy``
(:class:`~rlightning_core.testing.doubles.TinyPolicy`) and logger ``testing-logger``
(:class:`~rlightning_core.testing.doubles.RecordingLogger`).
"""

from __future__ import annotations

from rlightning_core.hookspecs import hookimpl
from rlightning_core.testing.doubles import (
    RecordingLogger,
    SpaceEnvParams,
    TinyPolicyParams,
    make_space_env,
    make_tiny_policy,
)
from rlightning_core.types import RegisterFn

RLIGHTNING_PLUGIN_API = ">=2,<3"
DISTRIBUTION = "rlightning-testing"


@hookimpl
def register_envs(register: RegisterFn) -> None:
    """``testing-env``."""
    register("testing-env", make_space_env, config=SpaceEnvParams,
             description="Test double: random observations in Box(-1, 1), short episodes.")


@hookimpl
def register_policies(register: RegisterFn) -> None:
    """``testing-policy``."""
    register("testing-policy", make_tiny_policy, config=TinyPolicyParams,
             description="Test double: a linear actor-critic.")


@hookimpl
def register_loggers(register: RegisterFn) -> None:
    """``testing-logger``."""
    register("testing-logger", RecordingLogger, description="Test double: keeps every row in memory.")
