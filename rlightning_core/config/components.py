"""Resolving components: every ``type`` through the plugin registry, every ``params`` into its config class.

Component configs nested in a plugin's params (a field holding a
:class:`~rlightning_core.config.schema.ComponentConfig` subclass, such as the ``remote`` env's ``local_env``) are
resolved the same way, so their problems carry the full key path (``env[0].params.local_env.type: ...``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from cattrs.errors import BaseValidationError

from rlightning_core.config.schema import ComponentConfig, MainConfig
from rlightning_core.config.structuring import OverrideValue, collect_errors, join, structure, unwrap_overrides
from rlightning_core.errors import ConfigError

__all__ = ["component_slots", "raw_component_problems", "resolve_components", "resolve_params"]


def component_slots(cfg: MainConfig) -> list[tuple[str, str, ComponentConfig]]:
    """``(dotted path, kind, component config)`` for every pluggable slot of a config."""
    slots: list[tuple[str, str, ComponentConfig]] = [(f"env[{i}]", "env", e) for i, e in enumerate(cfg.env)]
    slots.append(("policy", "policy", cfg.policy))
    slots.append(("buffer", "buffer", cfg.buffer))
    slots.extend((f"preprocessors[{i}]", "preprocessor", p) for i, p in enumerate(cfg.preprocessors))
    slots.append(("engine", "engine", cfg.engine))
    slots.extend((f"logging.loggers[{i}]", "logger", lg) for i, lg in enumerate(cfg.logging.loggers))
    return slots


def resolve_params(spec: Any, params: Any, path: str, problems: list[str], registry: Any = None) -> Any:
    """Structure one component's ``params`` into its registered config class, collecting problems.

    Params that already are an instance of that class are kept. Component configs nested in the params (a field
    holding a :class:`~rlightning_core.config.schema.ComponentConfig` subclass with a ``kind``, such as the
    ``remote`` env's ``local_env``) are resolved through ``registry`` the same way, their problems addressed
    below ``path`` (``env[0].params.local_env.type: ...``).
    """
    if isinstance(params, OverrideValue):  # `policy.params=null`; a mapping override is plain data already
        params = unwrap_overrides(params, Any)
    if params is None:
        params = {}
    if spec.config is None:
        if params:
            shown = ", ".join(map(str, params)) if isinstance(params, Mapping) else type(params).__name__
            problems.append(f"{path}.params: {spec.kind} {spec.name!r} takes no params, got {shown}")
        return None
    if isinstance(params, spec.config):
        value = params
    elif attrs.has(type(params)):
        problems.append(f"{path}.params: {spec.kind} {spec.name!r} takes {spec.config.__name__}, got "
                        f"{type(params).__name__} (give a mapping or a {spec.config.__name__})")
        return params
    elif not isinstance(params, Mapping):
        problems.append(f"{path}.params: expected a mapping, got {params!r}")
        return params
    else:
        data = unwrap_overrides(dict(params), spec.config)
        try:
            value = structure(data, spec.config)
        except BaseValidationError as exc:
            collect_errors(exc, f"{path}.params", problems)
            return params
        except (TypeError, ValueError) as exc:
            problems.append(f"{path}.params: {exc}")
            return params
    return _resolve_nested(value, f"{path}.params", registry, problems)


def _resolve_nested(value: Any, path: str, registry: Any, problems: list[str]) -> Any:
    """``value`` (an attrs instance) with every component config found in its fields resolved."""
    changes: dict[str, Any] = {}
    for f in attrs.fields(type(value)):
        if not f.init:
            continue
        old = getattr(value, f.name)
        new = _resolve_nested_value(old, join(path, f.name), registry, problems)
        if new is not old:
            changes[f.alias or f.name] = new
    if not changes:
        return value
    try:
        return attrs.evolve(value, **changes)
    except (TypeError, ValueError) as exc:  # the params' own cross-field checks, now with structured parts
        problems.append(f"{path}: {exc}")
        return value


def _resolve_nested_value(value: Any, path: str, registry: Any, problems: list[str]) -> Any:
    if isinstance(value, ComponentConfig) and type(value).kind is not None:
        return _resolve_nested_component(value, path, registry, problems)
    if isinstance(value, list | tuple):
        items = [_resolve_nested_value(v, join(path, i), registry, problems) for i, v in enumerate(value)]
        return type(value)(items) if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if attrs.has(type(value)):
        return _resolve_nested(value, path, registry, problems)
    return value


def _resolve_nested_component(comp: ComponentConfig, path: str, registry: Any, problems: list[str]) -> Any:
    from rlightning_core.errors import DuplicateComponentError, UnknownComponentError

    if registry is None:
        from rlightning_core.plugins import get_plugins

        registry = get_plugins().registry
    try:
        spec = registry.resolve(type(comp).kind, comp.type)
    except (UnknownComponentError, DuplicateComponentError) as exc:
        problems.append(f"{path}.type: {exc}")
        return comp
    params = resolve_params(spec, comp.params, path, problems, registry)
    return comp if params is comp.params else attrs.evolve(comp, params=params)


def resolve_components(cfg: MainConfig, registry: Any = None, *, source: str | None = None) -> MainConfig:
    """Resolve every ``type`` through the plugin registry and structure every ``params``.

    Raises:
        ConfigError: with one line per unknown name or bad param, all at once.
    """
    from rlightning_core.errors import DuplicateComponentError, UnknownComponentError

    if registry is None:
        from rlightning_core.plugins import get_plugins

        registry = get_plugins().registry
    problems: list[str] = []
    resolved: dict[str, Any] = {}
    for path, kind, comp in component_slots(cfg):
        try:
            spec = registry.resolve(kind, comp.type)
        except (UnknownComponentError, DuplicateComponentError) as exc:
            problems.append(f"{path}.type: {exc}")
            continue
        resolved[path] = attrs.evolve(comp, params=resolve_params(spec, comp.params, path, problems, registry))
    if problems:
        raise ConfigError(problems, source=source)
    try:  # MainConfig's cross-field checks run again, now with each component's run_problems
        return attrs.evolve(
            cfg,
            env=[resolved[f"env[{i}]"] for i in range(len(cfg.env))],
            policy=resolved["policy"],
            buffer=resolved["buffer"],
            preprocessors=[resolved[f"preprocessors[{i}]"] for i in range(len(cfg.preprocessors))],
            engine=resolved["engine"],
            logging=attrs.evolve(
                cfg.logging, loggers=[resolved[f"logging.loggers[{i}]"] for i in range(len(cfg.logging.loggers))]
            ),
        )
    except ConfigError as exc:
        raise ConfigError(exc.problems, source=source) from None


_RAW_SLOTS = (("env", "env", True), ("policy", "policy", False), ("buffer", "buffer", False),
              ("preprocessors", "preprocessor", True), ("engine", "engine", False))


def raw_component_problems(data: Mapping[str, Any], registry: Any) -> list[str]:
    """Component-name and params problems found in a document whose core schema is already invalid."""
    from rlightning_core.errors import DuplicateComponentError, UnknownComponentError

    if registry is None:
        from rlightning_core.plugins import get_plugins

        registry = get_plugins().registry
    slots: list[tuple[str, str, Any]] = []
    for key, kind, many in _RAW_SLOTS:
        value = data.get(key)
        if many and isinstance(value, list):
            slots.extend((f"{key}[{i}]", kind, v) for i, v in enumerate(value))
        elif not many and isinstance(value, Mapping):
            slots.append((key, kind, value))
    log_cfg = data.get("logging")
    if isinstance(log_cfg, Mapping) and isinstance(log_cfg.get("loggers"), list):
        slots.extend((f"logging.loggers[{i}]", "logger", v) for i, v in enumerate(log_cfg["loggers"]))
    problems: list[str] = []
    for path, kind, comp in slots:
        if not isinstance(comp, Mapping) or not isinstance(comp.get("type"), str):
            continue
        try:
            spec = registry.resolve(kind, comp["type"])
        except (UnknownComponentError, DuplicateComponentError) as exc:
            problems.append(f"{path}.type: {exc}")
            continue
        resolve_params(spec, comp.get("params", {}), path, problems, registry)
    return problems
