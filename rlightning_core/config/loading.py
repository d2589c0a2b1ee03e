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

import yaml
from cattrs.errors import BaseValidationError

from rlightning_core.config.components import (
    component_slots,
    raw_component_problems,
    resolve_components,
    resolve_params,
)
from rlightning_core.config.schema import MainConfig
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
    "resolve_params",
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


def _as_data(value: OverrideValue) -> Any:
    """What an override puts into the document.

    A mapping or list is plain data, exactly as if the file held it; a scalar stays wrapped until the schema says
    whether its field wants the text or the parsed value.
    """
    if isinstance(value.value, Mapping | list):
        return _deepcopy(value.value)
    return value


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> list[str]:
    """Apply dotted overrides to ``data`` in place, left to right; returns the problems (each naming the override).

    ``key=value`` assigns: a mapping or list value replaces what ``key`` held (the file's value and earlier
    overrides below ``key`` are gone, omitted keys take their defaults) and is typed like the same value in the
    file. ``key.sub=value`` changes one key inside the mapping ``key`` holds at that point, so
    ``'policy.params={lr: 0.1}' policy.params.gamma=0.9`` sets both, while the reverse order drops ``gamma``.
    """
    problems: list[str] = []
    for text in overrides:
        try:
            path, parsed = parse_override(text)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        shape = shape_problems(parsed.value, f"override {text[:60]!r}")
        if shape:
            problems.extend(shape)
            continue
        value = _as_data(parsed)
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
                if child is None or (isinstance(child, OverrideValue) and child.value is None):
                    child = node[key] = {}  # `key=null` then `key.sub=1`: a mapping starts here
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
            extra = raw_component_problems(unwrap_overrides(data, MainConfig), registry)
            raise ConfigError([*exc.problems, *(p for p in extra if p not in exc.problems)], source=source) from None
        raise
    return resolve_components(cfg, registry, source=source) if resolve else cfg


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
