"""Name -> component lookup, per kind, with provenance and clear errors.

Plugins never touch the registry directly: their registration hooks receive a ``register`` callback (see
:mod:`rlightning_core.plugins`) that stages specs here once the whole plugin loaded cleanly.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from rlightning_core.errors import DuplicateComponentError, UnknownComponentError
from rlightning_core.types import KINDS

__all__ = ["ComponentSpec", "Registry", "normalize_dist_name"]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]*$")


def normalize_dist_name(name: str) -> str:
    """Normalize a distribution name the way PEP 503 does (``Rlightning_PPO`` -> ``rlightning-ppo``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@attrs.frozen(kw_only=True)
class ComponentSpec:
    """One registered component: what to call, how its ``params`` are typed, and who provided it."""

    kind: str
    name: str
    factory: Callable[..., Any]
    config: type | None
    description: str
    plugin: str
    """The plugin (entry-point name, ``builtin`` for core) whose hook registered it."""
    distribution: str
    """The distribution that ships the plugin (``rlightning`` for core's builtin plugin)."""
    version: str
    rollout: Callable[..., Any] | None = None
    """Policies only, optional: a torch-free factory of act-only rollout copies for CPU env runners, called as
    ``rollout(params, observation_space=..., action_space=..., seed=...)``; it returns ``None`` when these
    params need the full (torch) policy. Ray mode uses it when weights reach the runners as numpy arrays."""

    @property
    def qualified_name(self) -> str:
        """``dist-name:component``, unambiguous even when two plugins use one name."""
        return f"{normalize_dist_name(self.distribution)}:{self.name}"

    def build(self, params: Any = None, /, **kwargs: Any) -> Any:
        """Call the factory with the structured params (when the component declares a config class)."""
        if self.config is None:
            return self.factory(**kwargs)
        return self.factory(params, **kwargs)


def validate_registration(kind: str, name: Any, factory: Any, config: Any, description: Any,
                          rollout: Any = None) -> None:
    """Check one ``register(...)`` call; raises ``TypeError``/``ValueError`` naming the bad argument."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(
            f"register({name!r}, ...) for kind {kind!r}: a name is a non-empty string of letters, digits "
            "and '_.-/' that starts with a letter or digit (':' is reserved for 'dist-name:component')"
        )
    if not callable(factory):
        raise TypeError(f"register({name!r}, ...): factory must be callable, got {type(factory).__name__}")
    if config is not None and not (isinstance(config, type) and attrs.has(config)):
        raise TypeError(
            f"register({name!r}, ...): config must be an attrs class describing the params, got {config!r}"
        )
    if not isinstance(description, str):
        raise TypeError(f"register({name!r}, ...): description must be a string")
    if rollout is not None and (kind != "policy" or not callable(rollout)):
        raise TypeError(f"register({name!r}, ...): rollout= is a callable, and only policies take one "
                        f"(kind {kind!r}, got {type(rollout).__name__})")


class Registry:
    """Components by kind and name; several distributions may register one name (then qualify it)."""

    def __init__(self) -> None:
        self._specs: dict[str, dict[str, list[ComponentSpec]]] = {kind: {} for kind in KINDS}
        #: ``(plugin name, distribution, error line)`` of plugins that failed to load, for error messages.
        self.broken: list[tuple[str, str, str]] = []

    def check(self, spec: ComponentSpec) -> None:
        """Raise ``ValueError`` if :meth:`add` would refuse ``spec`` (its distribution already has the name)."""
        for other in self._specs[spec.kind].get(spec.name, []):
            if normalize_dist_name(other.distribution) == normalize_dist_name(spec.distribution):
                raise ValueError(
                    f"{spec.kind} {spec.name!r} is registered twice by distribution {spec.distribution!r}"
                )

    def add(self, spec: ComponentSpec) -> None:
        """Add one spec. The same distribution registering a name twice is an error; two are not."""
        self.check(spec)
        self._specs[spec.kind].setdefault(spec.name, []).append(spec)

    def names(self, kind: str) -> list[str]:
        """Sorted names registered for ``kind``."""
        return sorted(self._specs[self._check_kind(kind)])

    def specs(self, kind: str | None = None) -> list[ComponentSpec]:
        """Every spec (of one kind, or all), sorted by kind then name."""
        kinds: Iterable[str] = KINDS if kind is None else (self._check_kind(kind),)
        return [s for k in kinds for n in sorted(self._specs[k]) for s in self._specs[k][n]]

    def resolve(self, kind: str, name: str) -> ComponentSpec:
        """Find the component called ``name`` (or ``dist-name:name``) of ``kind``.

        Raises:
            UnknownComponentError: nothing of that name; the message lists what exists, the closest match
                and plugins that failed to load.
            DuplicateComponentError: two distributions provide ``name``; the message names both and the
                qualified names that pick one.
        """
        table = self._specs[self._check_kind(kind)]
        if not isinstance(name, str):
            raise UnknownComponentError(kind, str(name), f"{kind} name must be a string, got {name!r}")
        if ":" in name:
            dist, _, short = name.partition(":")
            for spec in table.get(short, []):
                if normalize_dist_name(spec.distribution) == normalize_dist_name(dist) or spec.plugin == dist:
                    return spec
            raise UnknownComponentError(kind, name, self._unknown_message(kind, name, short, dist))
        found = table.get(name, [])
        if len(found) == 1:
            return found[0]
        if not found:
            raise UnknownComponentError(kind, name, self._unknown_message(kind, name, name, None))
        providers = ", ".join(f"{s.distribution} {s.version} (plugin {s.plugin!r})" for s in found)
        choices = " or ".join(repr(s.qualified_name) for s in found)
        raise DuplicateComponentError(
            kind,
            name,
            f"{kind} {name!r} is provided by more than one installed distribution: {providers}. "
            f"Say which one with a qualified name: {choices}.",
        )

    def _unknown_message(self, kind: str, name: str, short: str, dist: str | None) -> str:
        names = sorted(self._specs[kind])
        if dist is not None:
            msg = f"no {kind} named {short!r} is provided by distribution or plugin {dist!r}."
        else:
            msg = f"unknown {kind} {name!r}."
        close = difflib.get_close_matches(short, names, n=1, cutoff=0.5)
        if close:
            msg += f" Did you mean {close[0]!r}?"
        msg += f" Available {kind} names: {', '.join(names) if names else '(none registered)'}."
        if self.broken:
            broken = "; ".join(f"{p} from {d} ({err})" for p, d, err in self.broken)
            msg += f" Plugins that failed to load and might provide it: {broken}."
        return msg

    @staticmethod
    def _check_kind(kind: str) -> str:
        if kind not in KINDS:
            raise ValueError(f"unknown component kind {kind!r}; kinds are {', '.join(KINDS)}")
        return kind
