"""Reading config files (YAML, TOML, JSON), applying dotted overrides, and resolving components.

``load_config(path, overrides)`` is the one entry point users need; every problem found on the way — file,
syntax, types, unknown keys, unknown component names, plugin params — is reported at once in a
:class:`~rlightning_core.errors.ConfigError` whose lines carry dotted key paths.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import yaml
from cattrs.errors import BaseValidationError

from rlightning_core.config.schema import ComponentConfig, MainConfig
from rlightning_core.config.structuring import (
    OverrideValue,
    collect_errors,
    structure,
    unstructure,
    unwrap_overrides,
)
from rlightning_core.errors import ConfigError

__all__ = [
    "apply_overrides",
    "component_slots",
    "config_to_yaml",
    "load_config",
    "load_config_dict",
    "parse_override",
    "read_config_file",
    "resolve_components",
    "structure_config",
]


class _Loader(yaml.SafeLoader):
    """Safe YAML with YAML 1.2 scalars: ``3e-4`` is a float, ``yes``/``on`` stay strings."""


_BOOL = "tag:yaml.org,2002:bool"
_FLOAT = "tag:yaml.org,2002:float"
_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in (_BOOL, _FLOAT)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_Loader.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*\.[0-9_]*|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?
            |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
            |[-+]?\.(?:inf|Inf|INF)
            |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def _yaml_load(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # ok: _Loader derives from yaml.SafeLoader


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML, TOML or JSON file into a dict; problems raise :class:`ConfigError` naming the file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(["file not found"], source=str(p)) from None
    except IsADirectoryError:
        raise ConfigError(["is a directory, expected a config file"], source=str(p)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"cannot read the file: {exc}"], source=str(p)) from None
    suffix = p.suffix.lower()
    try:
        if suffix == ".toml":
            data = tomllib.loads(text)
        elif suffix == ".json":
            data = json.loads(text)
        else:
            data = _yaml_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"malformed YAML: {where}{problem}"], source=str(p)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"malformed TOML: {exc}"], source=str(p)) from None
    except json.JSONDecodeError as exc:
        raise ConfigError([f"malformed JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}"],
                          source=str(p)) from None
    except RecursionError:
        raise ConfigError([f"nested too deeply to read (configs need a few levels, at most {MAX_DEPTH})"],
                          source=str(p)) from None
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        raise ConfigError([f"cannot read a value: {exc}"], source=str(p)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"the top level must be a mapping of sections, got {type(data).__name__}"],
                          source=str(p))
    return data


_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")

#: Deepest nesting a config may have (a real one needs fewer than 10 levels).
MAX_DEPTH = 64
#: Most values a config may hold once YAML aliases are expanded (an alias "bomb" expands exponentially).
MAX_VALUES = 100_000


def shape_problems(data: Any, where: str = "") -> list[str]:
    """Why ``data`` cannot be a config (an empty list when it can).

    Nested too deeply (or cyclic), too many values once YAML aliases are expanded, or mapping keys that are not
    strings. Iterative and bounded: an alias bomb is refused in milliseconds.
    """
    count = 0
    stack: list[tuple[Any, str, int]] = [(data, where, 0)]
    while stack:
        node, path, depth = stack.pop()
        count += 1
        if count > MAX_VALUES:
            return [f"{where or 'the config'}: more than {MAX_VALUES} values once YAML aliases are expanded; "
                    "refusing it (aliases that repeat aliases grow exponentially)"]
        if depth > MAX_DEPTH:
            path = path if len(path) <= 80 else path[:77] + "..."
            return [f"{path or 'the config'}: nested more than {MAX_DEPTH} levels deep (or refers to itself "
                    "through a YAML alias)"]
        if isinstance(node, dict):
            for key, value in node.items():
                if not isinstance(key, str):
                    shown = repr(key)
                    shown = shown if len(shown) <= 40 else shown[:37] + "..."
                    return [f"{path or 'the top level'}: keys must be strings, got {type(key).__name__} {shown} "
                            "(quote it)"]
                stack.append((value, f"{path}.{key}" if path else key, depth + 1))
        elif isinstance(node, list | tuple):
            stack.extend((value, f"{path}[{i}]", depth + 1) for i, value in enumerate(node))
    return []


def parse_override(text: str) -> tuple[list[str | int], OverrideValue]:
    """Parse ``a.b[0].c=value`` (or ``a.b.0.c=value``) into a key path and a typed-later value."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ValueError(f"override {text!r} is not KEY=VALUE (e.g. policy.params.lr=3e-4)")
    path: list[str | int] = []
    for part in re.split(r"\.(?![^\[]*\])", key):
        m = re.fullmatch(r"([^\[\]]+)((?:\[\d+\])*)", part)
        if not m:
            raise ValueError(f"override {text!r}: bad key segment {part!r}")
        name, indices = m.group(1), m.group(2)
        if name.isdigit():
            path.append(int(name))
        elif _KEY_RE.match(name):
            path.append(name)
        else:
            raise ValueError(f"override {text!r}: bad key segment {part!r}")
        path.extend(int(i) for i in re.findall(r"\[(\d+)\]", indices))
    try:
        value = _yaml_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return path, OverrideValue(raw, value)


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> list[str]:
    """Apply dotted overrides to ``data`` in place; returns the problems (each naming the override)."""
    problems: list[str] = []
    for text in overrides:
        try:
            path, value = parse_override(text)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        shape = shape_problems(value.value, f"override {text[:60]!r}")
        if shape:
            problems.extend(shape)
            continue
        node: Any = data
        dotted = ""
        for i, key in enumerate(path):
            last = i == len(path) - 1
            dotted = f"{dotted}[{key}]" if isinstance(key, int) else (f"{dotted}.{key}" if dotted else key)
            if isinstance(key, int):
                if not isinstance(node, list):
                    problems.append(f"override {text!r}: {dotted.rsplit('[', 1)[0]} is not a list")
                    break
                if not 0 <= key < len(node):
                    problems.append(f"override {text!r}: index {key} is out of range ({len(node)} items)")
                    break
                if last:
                    node[key] = value
                else:
                    node = node[key]
                continue
            if isinstance(node, list) and len(node) == 1:  # `env.num_envs=4` with a single env config
                node = node[0]
            if isinstance(node, list):
                problems.append(f"override {text!r}: {dotted.rsplit('.', 1)[0]} is a list; "
                                f"address an item, e.g. {dotted.rsplit('.', 1)[0]}[0].{key}")
                break
            if not isinstance(node, dict):
                problems.append(f"override {text!r}: {dotted.rsplit('.', 1)[0]} is not a mapping")
                break
            if last:
                node[key] = value
            else:
                child = node.get(key)
                if child is None:
                    child = node[key] = {}
                node = child
    return problems


def _normalize(data: dict[str, Any]) -> dict[str, Any]:
    env = data.get("env")
    if isinstance(env, Mapping):
        data = {**data, "env": [env]}
    return data


def structure_config(data: Mapping[str, Any], *, source: str | None = None) -> MainConfig:
    """Structure a raw dict into :class:`MainConfig` (components not yet resolved); all problems at once."""
    data = _normalize(dict(data))
    data = unwrap_overrides(data, MainConfig)
    problems: list[str] = []
    try:
        cfg = structure(data, MainConfig)
    except BaseValidationError as exc:
        collect_errors(exc, "", problems)
        raise ConfigError(problems, source=source) from None
    return cfg


def component_slots(cfg: MainConfig) -> list[tuple[str, str, ComponentConfig]]:
    """``(dotted path, kind, component config)`` for every pluggable slot of a config."""
    slots: list[tuple[str, str, ComponentConfig]] = [(f"env[{i}]", "env", e) for i, e in enumerate(cfg.env)]
    slots.append(("policy", "policy", cfg.policy))
    slots.append(("buffer", "buffer", cfg.buffer))
    slots.extend((f"preprocessors[{i}]", "preprocessor", p) for i, p in enumerate(cfg.preprocessors))
    slots.append(("engine", "engine", cfg.engine))
    slots.extend((f"logging.loggers[{i}]", "logger", lg) for i, lg in enumerate(cfg.logging.loggers))
    return slots


def resolve_params(spec: Any, params: Any, path: str, problems: list[str]) -> Any:
    """Structure one component's ``params`` into its registered config class, collecting problems."""
    if attrs.has(type(params)):
        return params
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        problems.append(f"{path}.params: expected a mapping, got {params!r}")
        return params
    if spec.config is None:
        if params:
            problems.append(f"{path}.params: {spec.kind} {spec.name!r} takes no params, got "
                            f"{', '.join(map(str, params))}")
        return None
    data = unwrap_overrides(dict(params), spec.config)
    try:
        value = structure(data, spec.config)
    except BaseValidationError as exc:
        collect_errors(exc, f"{path}.params", problems)
        return params
    except (TypeError, ValueError) as exc:
        problems.append(f"{path}.params: {exc}")
        return params
    return value


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
        resolved[path] = attrs.evolve(comp, params=resolve_params(spec, comp.params, path, problems))
    if problems:
        raise ConfigError(problems, source=source)
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


def load_config_dict(
    data: Mapping[str, Any],
    overrides: Sequence[str] = (),
    *,
    source: str | None = None,
    resolve: bool = True,
    registry: Any = None,
) -> MainConfig:
    """Build a :class:`MainConfig` from a dict (plus overrides), resolving components unless told not to."""
    shape = shape_problems(dict(data))
    if shape:
        raise ConfigError(shape, source=source)
    data = _normalize(_deepcopy(dict(data)))
    problems = apply_overrides(data, overrides)
    if problems:
        raise ConfigError(problems, source=source)
    try:
        cfg = structure_config(data, source=source)
    except ConfigError as exc:
        if resolve:  # also report component names and plugin params, so every problem shows at once
            extra = _raw_component_problems(unwrap_overrides(data, MainConfig), registry)
            raise ConfigError([*exc.problems, *(p for p in extra if p not in exc.problems)], source=source) from None
        raise
    return resolve_components(cfg, registry, source=source) if resolve else cfg


_RAW_SLOTS = (("env", "env", True), ("policy", "policy", False), ("buffer", "buffer", False),
              ("preprocessors", "preprocessor", True), ("engine", "engine", False))


def _raw_component_problems(data: Mapping[str, Any], registry: Any) -> list[str]:
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
        resolve_params(spec, comp.get("params", {}), path, problems)
    return problems


def load_config(
    path: str | Path, overrides: Sequence[str] = (), *, resolve: bool = True, registry: Any = None
) -> MainConfig:
    """Load a config file, apply ``key=value`` overrides and resolve every component through the plugins.

    Args:
        path: a ``.yaml``/``.yml``, ``.toml`` or ``.json`` file.
        overrides: dotted overrides such as ``policy.params.lr=3e-4`` or ``env[0].num_envs=16``; values are
            parsed as YAML and typed by the schema.
        resolve: also resolve component names and their params (needs the plugins; ``False`` checks only the
            core schema).
        registry: the registry to resolve against (default: this process's plugins).

    Raises:
        ConfigError: every problem found, each with its dotted key path.
    """
    data = read_config_file(path)
    return load_config_dict(data, overrides, source=str(path), resolve=resolve, registry=registry)


def _deepcopy(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _deepcopy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_deepcopy(v) for v in data]
    return data


def config_to_yaml(cfg: MainConfig) -> str:
    """The resolved config, defaults included, as YAML (what ``config show`` prints and runs save)."""
    return yaml.safe_dump(_type_first(unstructure(cfg)), sort_keys=False, default_flow_style=False)


def _type_first(data: Any) -> Any:
    """Order component sections ``type``, ``params``, then the rest, as people write them."""
    if isinstance(data, dict):
        head = [k for k in ("type", "params") if k in data and "type" in data]
        return {k: _type_first(data[k]) for k in [*head, *(k for k in data if k not in head)]}
    if isinstance(data, list):
        return [_type_first(v) for v in data]
    return data
