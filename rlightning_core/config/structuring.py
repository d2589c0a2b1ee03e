"""The one strict cattrs converter, and the rendering of its errors as dotted-path lines.

Strict means: no silent coercion (``"0.1"`` is not a float, ``1`` is not a bool), unknown keys are errors,
and every problem in a document is reported, not just the first.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.cols import list_structure_factory
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)

from rlightning_core.config.removed import RemovedKeyError, removed_keys_of
from rlightning_core.errors import ConfigError, MissingDependencyError

#: What a validator or ``__attrs_post_init__`` raises to report a problem (collected with the field's path).
#: A :class:`MissingDependencyError` is one: a plugin refuses params whose env needs an uninstalled package;
#: a :class:`ConfigError` is a cross-field check that already renders its own lines.
_VALIDATION_ERRORS = (TypeError, ValueError, ConfigError, MissingDependencyError)

__all__ = ["RENAMED_KEYS", "OverrideValue", "converter", "renamed_key_problem", "structure", "unstructure"]

#: Config keys that were renamed: old dotted path -> new dotted path. A config (file or ``key=value``
#: override) that still sets an old key is refused with a line naming the new one, not as an unknown key.
RENAMED_KEYS: dict[str, str] = {
    "cluster.train_workers": "cluster.num_learners",
    "cluster.eval_workers": "cluster.num_inference_servers",
    "cluster.rollout_num_cpus": "cluster.inference_server_num_cpus",
    "cluster.rollout_num_gpus": "cluster.inference_server_num_gpus",
}

T = TypeVar("T")


@attrs.frozen
class OverrideValue:
    """A ``key=value`` override before the schema types it: ``text`` for str fields, ``value`` otherwise."""

    text: str
    value: Any


def _describe(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return repr(value)


def _strict(kind: type, accepts: tuple[type, ...], name: str) -> Any:
    def hook(value: Any, _type: Any) -> Any:
        if isinstance(value, bool) and kind is not bool:
            raise TypeError(f"expected {name}, got {value!r}")
        if not isinstance(value, accepts):
            raise TypeError(f"expected {name}, got {_describe(value)}")
        return kind(value)

    return hook


def _strict_int(value: Any, _type: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected int, got {_describe(value)}")
    if isinstance(value, float):
        if not value.is_integer():
            raise TypeError(f"expected int, got {value!r}")
        return int(value)  # `total_steps: 1e6` is an int written as a float
    return value


class _ValidatorsOff:
    """Turn attrs validators off for one construction, restoring the previous setting (nesting-safe)."""

    def __enter__(self) -> None:
        self._was = attrs.validators.get_disabled()
        attrs.validators.set_disabled(True)

    def __exit__(self, *exc: object) -> None:
        attrs.validators.set_disabled(self._was)


def _noted(exc: Exception, cls: type, name: str, type_: Any) -> Exception:
    exc.add_note(AttributeValidationNote(f"Structuring class {cls.__qualname__} @ attribute {name}", name, type_))
    return exc


def _attrs_hook_factory(cls: type) -> Any:
    """Structure an attrs class, reporting every problem at once.

    Unknown, removed (:mod:`~rlightning_core.config.removed`) and missing keys, wrong types and failed validators
    (run on each field as soon as it is structured) all end up in one ``ClassValidationError``.
    """
    fields = attrs.fields(attrs.resolve_types(cls))
    names = {f.name for f in fields}
    removed = removed_keys_of(cls.__name__)

    def hook(data: Any, _type: Any) -> Any:
        if attrs.has(type(data)) and isinstance(data, cls):
            return data
        if not isinstance(data, Mapping):
            raise TypeError(f"expected a mapping, got {_describe(data)}")
        errors: list[Exception] = []
        for key in sorted(k for k in data if k in removed):
            errors.append(_noted(RemovedKeyError(removed[key].message), cls, key, Any))
        extra = {k for k in data if k not in names and k not in removed}
        if extra:
            errors.append(ForbiddenExtraKeysError(f"Extra fields in constructor for {cls.__name__}", cls, extra))
        values: dict[str, Any] = {}
        for f in fields:
            if f.name not in data:
                if f.default is attrs.NOTHING:
                    errors.append(_noted(KeyError(f.name), cls, f.name, f.type))
                continue
            try:
                values[f.name] = converter.structure(data[f.name], f.type)
            except Exception as exc:
                errors.append(_noted(exc, cls, f.name, f.type))
        if not errors:
            with _ValidatorsOff():
                try:
                    obj = cls(**{(f.alias or f.name): values[f.name] for f in fields if f.name in values})
                except _VALIDATION_ERRORS as exc:  # __attrs_post_init__ cross-field checks
                    raise ClassValidationError(f"While structuring {cls.__name__}", [exc], cls) from None
            target: Any = obj
        else:
            obj, target = None, types.SimpleNamespace(**values)
        if not attrs.validators.get_disabled():
            for f in fields:
                if f.validator is not None and f.name in values:
                    try:
                        f.validator(target, f, values[f.name])
                    except _VALIDATION_ERRORS as exc:
                        errors.append(_noted(exc, cls, f.name, f.type))
        if errors:
            raise ClassValidationError(f"While structuring {cls.__name__}", errors, cls)
        return obj

    return hook


def _is_list(type_: Any) -> bool:
    return type_ is list or typing.get_origin(type_) is list


def _list_hook_factory(type_: Any, conv: cattrs.BaseConverter) -> Any:
    """Structure lists and tuples only, then with cattrs' own list hook.

    A string or mapping is not iterated (``env: CartPole`` is not 8 one-letter envs) and a scalar gets a clean
    message instead of ``'int' object is not iterable``.
    """
    inner = list_structure_factory(type_, conv)

    def hook(value: Any, _type: Any) -> Any:
        if not isinstance(value, list | tuple):
            raise TypeError(f"expected a list, got {_describe(value)}")
        return inner(value, _type)

    return hook


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    conv.register_structure_hook_factory(_is_list, _list_hook_factory)
    conv.register_structure_hook(int, _strict_int)
    conv.register_structure_hook(float, _strict(float, (int, float), "float"))
    conv.register_structure_hook(bool, _strict(bool, (bool,), "bool (true or false)"))
    conv.register_structure_hook(str, _strict(str, (str,), "str"))
    conv.register_structure_hook_factory(attrs.has, _attrs_hook_factory)
    return conv


converter = _make_converter()


def structure(data: Any, cls: type[T]) -> T:
    """Structure ``data`` into ``cls`` with the strict converter, validators included."""
    return converter.structure(data, cls)


def unstructure(obj: Any) -> Any:
    """Plain dicts/lists of ``obj`` (for YAML output and hashing)."""
    return converter.unstructure(obj)


def join(path: str, key: str | int) -> str:
    """``policy`` + ``lr`` -> ``policy.lr``; ``env`` + 0 -> ``env[0]``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def _message(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, _VALIDATION_ERRORS) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def renamed_key_problem(path: str) -> str | None:
    """The problem line for ``path`` when it is a key that was renamed (:data:`RENAMED_KEYS`), else ``None``."""
    new = RENAMED_KEYS.get(path)
    return f"{path}: was renamed to {new}; set {new} instead" if new else None


def collect_errors(exc: BaseException, path: str, out: list[str]) -> None:
    """Flatten a cattrs error tree into ``"dotted.path: problem"`` lines appended to ``out``."""
    if isinstance(exc, ForbiddenExtraKeysError):
        fields = [f.name for f in attrs.fields(exc.cl)] if exc.cl is not None and attrs.has(exc.cl) else []
        for key in sorted(exc.extra_fields):
            renamed = renamed_key_problem(join(path, key))
            if renamed:
                out.append(renamed)
                continue
            close = difflib.get_close_matches(key, fields, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            allowed = f"; allowed keys: {', '.join(fields)}" if fields else ""
            out.append(f"{join(path, key)}: unknown key{hint}{allowed}")
        return
    if isinstance(exc, ClassValidationError | IterableValidationError):
        for sub in exc.exceptions:
            sub_path = path
            for note in getattr(sub, "__notes__", []):
                if isinstance(note, AttributeValidationNote):
                    sub_path = join(path, note.name)
                    break
                if isinstance(note, IterableValidationNote):  # a list index, or the key of a dict[str, X]
                    index = note.index
                    sub_path = join(path, index if isinstance(index, int | str) else str(index))
                    break
            collect_errors(sub, sub_path, out)
        return
    if isinstance(exc, KeyError):
        out.append(f"{path}: required key is missing")
        return
    if isinstance(exc, ConfigError):  # a class's cross-field checks: lines addressed from that class
        out.extend(f"{path}.{line}" if path else line for line in exc.problems)
        return
    out.append(f"{path or '<root>'}: {_message(exc)}")


def unwrap_overrides(data: Any, type_: Any) -> Any:
    """Replace :class:`OverrideValue` leaves by text (where the schema expects ``str``) or parsed value.

    ``params`` (typed ``Any`` before its component resolves) keeps its overrides wrapped until the plugin's
    config class is known.
    """
    if isinstance(data, OverrideValue):
        args = _union_args(type_)
        if str in args and not (data.value is None and type(None) in args):
            return data.text
        return data.value
    if isinstance(data, Mapping) and attrs.has(type_):
        resolved = attrs.resolve_types(type_)
        fields = {f.name: f for f in attrs.fields(resolved)}
        return {
            k: (v if k == "params" and fields[k].type is Any else unwrap_overrides(v, fields[k].type))
            if k in fields else unwrap_overrides(v, Any)
            for k, v in data.items()
        }
    origin = typing.get_origin(type_)
    if origin in (list, tuple) or type_ is list:
        (item,) = typing.get_args(type_)[:1] or (Any,)
        if isinstance(data, Mapping):
            return unwrap_overrides(data, item)
        if isinstance(data, list):
            return [unwrap_overrides(v, item) for v in data]
    if isinstance(data, Mapping):
        return {k: unwrap_overrides(v, Any) for k, v in data.items()}
    if isinstance(data, list):
        return [unwrap_overrides(v, Any) for v in data]
    return data


def _union_args(type_: Any) -> tuple[Any, ...]:
    if typing.get_origin(type_) in (typing.Union, types.UnionType):
        return typing.get_args(type_)
    return (type_,)
