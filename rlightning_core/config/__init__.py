"""Configuration: the attrs schema, the strict cattrs converter, file loading and dotted overrides.

The names below load on first access, so a process that only needs the validators (a plugin's params module in
a Ray worker) or the schema does not import cattrs and yaml.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlightning_core.lazy import lazy_getattr

if TYPE_CHECKING:
    from rlightning_core.config.loading import (
        apply_overrides,
        component_slots,
        config_to_yaml,
        load_config,
        load_config_dict,
        parse_override,
        read_config_file,
        resolve_components,
        structure_config,
    )
    from rlightning_core.config.schema import (
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
    )
    from rlightning_core.config.structuring import converter, structure, unstructure

_SOURCES: dict[str, tuple[str, ...]] = {
    "rlightning_core.config.structuring": ("converter", "structure", "unstructure"),
    "rlightning_core.config.loading": (
        "apply_overrides", "component_slots", "config_to_yaml", "load_config", "load_config_dict",
        "parse_override", "read_config_file", "resolve_components", "structure_config",
    ),
    "rlightning_core.config.schema": (
        "BufferConfig", "CheckpointConfig", "ClusterConfig", "ComponentConfig", "EngineConfig", "EnvConfig",
        "LoggerConfig", "LoggingConfig", "MainConfig", "PolicyConfig", "PreprocessorConfig",
    ),
}
_LAZY: dict[str, str] = {name: module for module, names in _SOURCES.items() for name in names}

__all__ = [
    "BufferConfig",
    "CheckpointConfig",
    "ClusterConfig",
    "ComponentConfig",
    "EngineConfig",
    "EnvConfig",
    "LoggerConfig",
    "LoggingConfig",
    "MainConfig",
    "PolicyConfig",
    "PreprocessorConfig",
    "apply_overrides",
    "component_slots",
    "config_to_yaml",
    "converter",
    "load_config",
    "load_config_dict",
    "parse_override",
    "read_config_file",
    "resolve_components",
    "structure",
    "structure_config",
    "unstructure",
]


__getattr__ = lazy_getattr(__name__, _LAZY, globals())


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
