"""What every conformance check shares: the subject under check, the error type and the report."""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import attrs
import numpy as np

__all__ = ["ConformanceError", "ConformanceReport", "Subject", "resolve_subject"]


class ConformanceError(AssertionError):
    """A component breaks the contract of its kind.

    The message names the component (kind, name, distribution), says what was wrong with which value, and how to
    fix it. It derives from ``AssertionError`` so pytest shows it as a plain test failure.
    """


@attrs.define
class ConformanceReport:
    """What a check verified, and what it could not exercise."""

    kind: str
    label: str
    """The component as named in messages, e.g. ``env 'gridworld' (rlightning-gridworld 0.1.0)``."""
    passed: list[str] = attrs.Factory(list)
    """One line per property verified."""
    notes: list[str] = attrs.Factory(list)
    """Things the check could not exercise or found suspicious without being wrong."""

    def __str__(self) -> str:
        lines = [f"{self.label}: {len(self.passed)} checks passed"]
        lines += [f"  ok   {p}" for p in self.passed]
        lines += [f"  note {n}" for n in self.notes]
        return "\n".join(lines)


@attrs.define
class Subject:
    """The component under check: how to build it and how to name it."""

    kind: str
    label: str
    factory: Callable[..., Any]
    params: Any
    takes_params: bool
    report: ConformanceReport = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.report = ConformanceReport(kind=self.kind, label=self.label)

    def build(self, what: str = "the factory", **kwargs: Any) -> Any:
        """Call the factory as the builders do (``factory(params, **kwargs)`` or ``factory(**kwargs)``)."""
        args = (self.params,) if self.takes_params else ()
        return self.call(what, self.factory, *args, **kwargs)

    def call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``fn``; an exception becomes a :class:`ConformanceError` naming the component and the call."""
        try:
            return fn(*args, **kwargs)
        except ConformanceError:
            raise
        except Exception as exc:
            raise ConformanceError(f"{self.label}: {what} raised {type(exc).__name__}: {exc}") from exc

    def fail(self, problem: str, fix: str) -> NoReturn:
        """Raise a :class:`ConformanceError`: the problem, then how to fix it."""
        raise ConformanceError(f"{self.label}: {problem}\n  fix: {fix}")

    def ok(self, line: str) -> None:
        """Record a verified property."""
        self.report.passed.append(line)

    def note(self, line: str) -> None:
        """Record something the check could not exercise."""
        self.report.notes.append(line)


def resolve_subject(kind: str, component: str | Callable[..., Any], params: Any = None, *,
                    config: type | None = None, registry: Any = None) -> Subject:
    """Turn a registered name, or a factory plus params, into a :class:`Subject`.

    Args:
        kind: the component kind (``env``, ``policy``, ...).
        component: a registered name (``"gridworld"`` or ``"dist-name:gridworld"``) or the factory itself.
        params: the component's params: a mapping (structured with the registered or given ``config`` class,
            exactly as a config file's ``params`` would be), an instance of the config class, or ``None`` for
            the defaults.
        config: the params class of a factory given directly (ignored for registered names).
        registry: the registry to resolve names against (default: this process's plugins).
    """
    from rlightning_core.config.loading import resolve_params

    if isinstance(component, str):
        if registry is None:
            from rlightning_core.plugins import get_plugins

            registry = get_plugins().registry
        spec = registry.resolve(kind, component)
        label = f"{kind} {spec.name!r} ({spec.distribution} {spec.version})"
        factory, config = spec.factory, spec.config
    elif callable(component):
        label = f"{kind} {getattr(component, '__qualname__', repr(component))}"
        factory = component
    else:
        raise TypeError(f"component must be a registered name or a factory, got {component!r}")
    if config is None:
        if params not in (None, {}):
            raise ConformanceError(f"{label}: params were given but the component declares no config class")
        return Subject(kind=kind, label=label, factory=factory, params=None, takes_params=False)
    if params is None:
        params = {}
    if not attrs.has(type(params)):
        problems: list[str] = []
        spec_like = _SpecLike(kind=kind, name=label, config=config)
        params = resolve_params(spec_like, params, kind, problems)
        if problems:
            raise ConformanceError(f"{label}: invalid params:\n  " + "\n  ".join(problems))
    return Subject(kind=kind, label=label, factory=factory, params=params, takes_params=True)


@attrs.define
class _SpecLike:
    kind: str
    name: str
    config: type | None


# -- comparisons and serialization shared by the checks ---------------------------------------------------------


def trees_equal(a: Any, b: Any) -> bool:
    """Exact equality of nested dicts/lists of arrays, tensors and plain values (NaNs equal NaNs)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(trees_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(trees_equal(x, y) for x, y in zip(a, b, strict=True))
    if _is_array(a) or _is_array(b):
        x, y = _numpy(a), _numpy(b)
        return x.shape == y.shape and x.dtype == y.dtype and bool(
            np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"))
    return bool(a == b)


def _is_array(x: Any) -> bool:
    return isinstance(x, np.ndarray | np.generic) or type(x).__module__.startswith("torch")


def _numpy(x: Any) -> np.ndarray:
    if isinstance(x, np.ndarray | np.generic):
        return np.asarray(x)
    return x.detach().cpu().numpy()


def checkpoint_round_trip(subject: Subject, state: Any, what: str) -> Any:
    """``torch.save`` then ``torch.load(weights_only=True)``, as checkpoints do; refusals are explained."""
    import torch

    buf = io.BytesIO()
    subject.call(f"torch.save({what})", torch.save, state, buf)
    buf.seek(0)
    try:
        return torch.load(buf, weights_only=True)
    except Exception as exc:
        subject.fail(
            f"{what} cannot be loaded with torch.load(weights_only=True), which checkpoints use: "
            f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}",
            "keep state to tensors, dicts, lists, tuples, str, int, float, bool and None (numpy arrays: "
            "torch.from_numpy)",
        )


def space_dtype(space: Any) -> np.dtype | None:
    """The numpy dtype of a space's samples, when it declares one."""
    dtype = getattr(space, "dtype", None)
    return np.dtype(dtype) if dtype is not None else None
