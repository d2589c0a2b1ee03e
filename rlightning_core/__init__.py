"""rlightning's core: the plugin contract, the config schema and the runtime that assembles a run.

Importing this package is cheap (no torch, no ray): runtime pieces that need them load on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlightning_core._version import PLUGIN_API_VERSION, __version__
from rlightning_core.errors import (
    ConfigError,
    DuplicateComponentError,
    MissingDependencyError,
    PluginLoadError,
    RlightningError,
    UnknownComponentError,
    UserError,
)
from rlightning_core.hookspecs import hookimpl
from rlightning_core.lazy import lazy_getattr
from rlightning_core.plugins import get_plugins, load_plugins, reset_plugins

if TYPE_CHECKING:
    from rlightning_core.callbacks import Callback, StopTraining
    from rlightning_core.config import (
        BufferConfig,
        CheckpointConfig,
        ClusterConfig,
        ComponentConfig,
        EngineConfig,
        EnvConfig,
        LoggerConfig,
        LoggingConfig,
        MainConfig,
        PolicyConfig,
        PreprocessorConfig,
        load_config,
        load_config_dict,
    )
    from rlightning_core.predict import LoadedPolicy, load_policy
    from rlightning_core.training import train

# Imported on first attribute access: the config API (cattrs, yaml), which a Ray env worker never needs.
_LAZY: dict[str, str] = {
    name: "rlightning_core.config"
    for name in ("BufferConfig", "CheckpointConfig", "ClusterConfig", "ComponentConfig", "EngineConfig",
                 "EnvConfig", "LoggerConfig", "LoggingConfig", "MainConfig", "PolicyConfig", "PreprocessorConfig",
                 "load_config", "load_config_dict")
}
# The predict API: imports torch and the plugins when first used.
_LAZY.update({"LoadedPolicy": "rlightning_core.predict", "load_policy": "rlightning_core.predict"})
# Library training: train() builds a run (torch, the plugins) when called; callbacks are light.
_LAZY.update({"train": "rlightning_core.training", "Callback": "rlightning_core.callbacks",
              "StopTraining": "rlightning_core.callbacks"})

__all__ = [
    "PLUGIN_API_VERSION",
    "BufferConfig",
    "Callback",
    "CheckpointConfig",
    "ClusterConfig",
    "ComponentConfig",
    "ConfigError",
    "DuplicateComponentError",
    "EngineConfig",
    "EnvConfig",
    "LoadedPolicy",
    "LoggerConfig",
    "LoggingConfig",
    "MainConfig",
    "MissingDependencyError",
    "PluginLoadError",
    "PolicyConfig",
    "PreprocessorConfig",
    "RlightningError",
    "StopTraining",
    "UnknownComponentError",
    "UserError",
    "__version__",
    "get_plugins",
    "hookimpl",
    "load_config",
    "load_config_dict",
    "load_plugins",
    "load_policy",
    "reset_plugins",
    "train",
]


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
