"""Name -> component lookup, per kind, with provenance and clear errors.

Plugins never touch the registry directly: their registration hooks receive a ``register`` callback (see
:mod:`rlightning_core.plugins`) that stages specs here once the whole plugin loaded cleanly. How the core calls
each kind's factories is written down once, in :data:`FACTORY_CALLS`: ``register`` checks every factory's
signature against it, so a factory the core could not call is a load error naming the plugin, not a
``TypeError`` in the middle of a run.
"""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from rlightning_core import provenance
from rlightning_core.errors import DuplicateComponentError, UnknownComponentError
from rlightning_core.types import KINDS

__all__ = ["FACTORY_CALLS", "ComponentSpec", "FactoryCall", "Registry", "check_factory",
           "normalize_dist_name"]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]*$")


def normalize_dist_name(name: str) -> str:
    """Normalize a distribution name the way PEP 503 does (``Rlightning_PPO`` -> ``rlightning-ppo``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@attrs.frozen
class FactoryCall:
    """How the core calls the factories of one kind.

    After the params (when the component has a params class), the keyword arguments below, by name.
    """

    keywords: tuple[str, ...]
    """Passed on every call."""
    optional: tuple[tuple[str, str], ...] = ()
    """``(keyword, when the core passes it)``: passed only then; a factory that cannot take one still loads,
    with a warning."""

    def render(self, takes_params: bool, what: str = "factory") -> str:
        """The call as docs write it, e.g. ``factory(params, *, num_envs, seed, worker_index)``."""
        return f"{what}({', '.join([*(['params'] if takes_params else []), '*', *self.keywords])})"


#: What the builders pass to each kind's factory (env workers: ``env/group.py`` and the Ray env actors;
#: policies: ``policy/group.py`` and the Ray learner / rollout actors; buffers: ``builders.py``; preprocessors:
#: ``engine/execution.py``; engines: ``builders.build_engine``; loggers: ``run.prepare_run``).
FACTORY_CALLS: dict[str, FactoryCall] = {
    "env": FactoryCall(("num_envs", "seed", "worker_index"),
                       (("render_mode", "to record episode videos: eval --video, logging.video_every"),)),
    "policy": FactoryCall(("observation_space", "action_space", "role", "device", "seed")),
    "buffer": FactoryCall(("spec",)),
    "preprocessor": FactoryCall(("observation_space", "num_envs")),
    "engine": FactoryCall(("config", "env_group", "policy_group", "buffer"),
                          (("plugins", "by build_engine(..., plugins=...) in scripts"),)),
    "logger": FactoryCall(("run_dir",)),
}

_PARAMS = object()  # stands for the structured params when a signature is checked


def check_factory(kind: str, name: str, factory: Callable[..., Any], config: type | None, *,
                  call: FactoryCall | None = None, what: str = "factory") -> list[str]:
    """Check that the core can call ``factory`` the way it calls factories of ``kind``.

    The signature (a class's is its ``__init__``'s) must bind the params, when the component declares
    ``config``, and every keyword of :data:`FACTORY_CALLS`; ``**kwargs`` factories always do. Callables
    without an introspectable signature are not checked.

    Returns:
        One warning per optional keyword the factory cannot take.

    Raises:
        TypeError: one line naming the component, the factory's signature, the call the core makes and why
            the two do not fit.
    """
    call = call or FACTORY_CALLS[kind]
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return []
    args = (_PARAMS,) if config is not None else ()
    kwargs = dict.fromkeys(call.keywords)
    qualname = str(getattr(factory, "__qualname__", type(factory).__name__)).rpartition("<locals>.")[2]
    label = f"{what} {qualname}{sig}"
    try:
        sig.bind(*args, **kwargs)
    except TypeError as exc:
        missing = re.search(r"missing a required argument: '(\w+)'", str(exc))
        hint = ""
        if config is None and missing and missing.group(1) not in call.keywords:
            hint = ("; it is registered without config=, so it receives no params: pass config=ParamsClass to "
                    "register(), or drop that argument")
        elif config is not None and "too many positional arguments" in str(exc):
            hint = (f"; it is registered with config={config.__name__}, so its first positional argument is the "
                    "structured params")
        raise TypeError(f"{kind} {name!r}: {label} cannot be called the way the core calls {kind} {what[:-1]}ies, "
                        f"{call.render(config is not None, what.split()[0])}: {exc}{hint}") from None
    warnings = []
    for keyword, when in call.optional:
        try:
            sig.bind(*args, **kwargs, **{keyword: None})
        except TypeError:
            warnings.append(f"{kind} {name!r}: {label} does not accept {keyword}=, which the core passes {when}")
    return warnings


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

    @property
    def qualified_name(self) -> str:
        """``dist-name:component``, unambiguous even when two plugins use one name."""
        return f"{normalize_dist_name(self.distribution)}:{self.name}"

    @property
    def label(self) -> str:
        """The component and who provided it, as error messages name it."""
        return (f"{self.kind} {self.name!r} from plugin {self.plugin!r} "
                f"(distribution {self.distribution} {self.version})")

    def build(self, params: Any = None, /, **kwargs: Any) -> Any:
        """Call the factory with the structured params (when the component declares a config class).

        An exception from a plugin's factory keeps its type and traceback and gains a note naming the
        component, its plugin and distribution; what the factory returns is remembered so that a later error
        in one of its methods can be traced back to the component (:func:`rlightning_core.provenance.culprit`).
        """
        try:
            built = self.factory(**kwargs) if self.config is None else self.factory(params, **kwargs)
        except Exception as exc:
            if self.plugin != "builtin":
                exc.add_note(f"raised while building {self.label}")
            raise
        provenance.remember(built, self)
        return built


def validate_registration(kind: str, name: Any, factory: Any, config: Any, description: Any) -> list[str]:
    """Check one ``register(...)`` call, the factories' signatures included (:func:`check_factory`).

    Returns:
        Warnings: optional keywords a factory cannot take.

    Raises:
        TypeError, ValueError: one line naming the bad argument.
    """
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
    return check_factory(kind, name, factory, config)


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
