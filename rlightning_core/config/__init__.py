"""Configuration: the attrs schema, the strict cattrs converter, file loading and dotted overrides."""

from rlightning_core.config.converter import converter, structure, unstructure
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
