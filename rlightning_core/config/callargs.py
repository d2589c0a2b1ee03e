"""Check keyword arguments meant for a third-party callable against its signature, at config time.

A plugin whose params carry ``kwargs`` for a constructor it does not own (``gymnasium.make``'s env kwargs, a
PettingZoo ``parallel_env``) calls :func:`call_problems` from a validator: an unknown name or a value its
annotation refuses is then a config error with a key path (``env[0].params.kwargs: max_cycles: expected int, got
'abc'``) instead of a failure deep inside the first ``step()``. Only what the signature says is checked: names when
it takes no ``**kwargs``; values whose annotation is made of ``bool``, ``int``, ``float``, ``str``, ``None``,
unions of them, and ``list``/``dict`` of them (checked by the config's own strict converter, so ``1`` is not a
bool). Anything else is left to the callable.
"""

from __future__ import annotations

import difflib
import inspect
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["call_problems"]

_SCALARS = (bool, int, float, str, type(None))


def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn, eval_str=True)
    except (NameError, TypeError, SyntaxError, AttributeError):  # annotations that do not evaluate here
        try:
            return inspect.signature(fn)
        except (TypeError, ValueError):
            return None
    except ValueError:  # no signature (a builtin)
        return None


def _checkable(annotation: Any) -> bool:
    """Whether the strict converter can check a value against ``annotation`` without false refusals."""
    if annotation in _SCALARS:
        return True
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):  # the converter handles optional values, not other unions
        rest = [a for a in args if a is not type(None)]
        return len(rest) == 1 and len(args) == 2 and _checkable(rest[0])
    if origin is list and len(args) == 1:
        return _checkable(args[0])
    if origin is dict and len(args) == 2:
        return args[0] is str and _checkable(args[1])
    return False


def _shown(param: inspect.Parameter) -> str:
    text = param.name
    if param.annotation is not inspect.Parameter.empty:
        ann = param.annotation
        text += f": {ann.__name__ if isinstance(ann, type) else ann}"
    if param.default is not inspect.Parameter.empty:
        text += f" = {param.default!r}"
    return text


def call_problems(fn: Callable[..., Any], kwargs: Mapping[str, Any], *, name: str,
                  also: Iterable[str] = ()) -> list[str]:
    """Why ``fn(**kwargs)`` would be refused by ``fn``'s signature; one line per problem, an empty list if none.

    Args:
        fn: the callable (a class checks its ``__init__``).
        kwargs: the keyword arguments a config gives it.
        name: how the messages name ``fn`` (``mpe2.simple_spread_v3``).
        also: further names the caller accepts and passes elsewhere (``gymnasium.make``'s own arguments).
    """
    from cattrs.errors import BaseValidationError

    from rlightning_core.config.structuring import collect_errors, converter

    sig = _signature(fn)
    if sig is None:
        return []
    params = {p.name: p for p in sig.parameters.values()
              if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values())
    extra = set(also)
    problems: list[str] = []
    for key, value in kwargs.items():
        param = params.get(key)
        if param is None:
            if not open_ended and key not in extra:
                choices = sorted({*params, *extra})
                close = difflib.get_close_matches(key, choices, n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                problems.append(f"{key}: not an argument of {name}{hint}; it takes {', '.join(choices) or 'none'}")
            continue
        if param.annotation is inspect.Parameter.empty or not _checkable(param.annotation):
            continue
        try:
            converter.structure(value, param.annotation)
        except (TypeError, ValueError, BaseValidationError) as exc:
            lines: list[str] = []
            collect_errors(exc, "", lines)
            detail = "; ".join(line.removeprefix("<root>: ") for line in lines)
            problems.append(f"{key}: {detail} ({name} takes {_shown(param)})")
    return problems
