"""The plugin manager: core's builtin plugin plus every ``rlightning`` entry point, each outcome recorded.

Loading is lazy (first call of :func:`get_plugins`) and cached per process. A plugin whose import fails, whose
declared plugin-API range excludes this core, whose registration hook raises, or which registers a factory the
core could not call (:func:`~rlightning_core.registry.check_factory`) is recorded with its distribution, version
and a one-line error, and skipped: the other plugins load. A plugin that loads but implements no hook, declares
no ``RLIGHTNING_PLUGIN_API``, imports torch or ray while loading, or registers a factory that cannot take an
optional keyword is loaded with status ``warning`` and one line per problem. Environment variables, read once at
load time:

- ``RLIGHTNING_LOAD_PLUGINS=a,b``: allowlist of external plugins (entry-point or distribution names); an empty
  value loads none (the escape hatch when an installed plugin is broken).
- ``RLIGHTNING_DISABLE_PLUGINS=a,b``: denylist, same names.
- ``RLIGHTNING_STRICT_PLUGINS=1``: any load error raises :class:`~rlightning_core.errors.PluginLoadError`.
"""

from __future__ import annotations

import importlib.metadata as importlib_metadata
import inspect
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import Any

import attrs
import pluggy
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from rlightning_core import hookspecs
from rlightning_core._version import PLUGIN_API_VERSION, __version__
from rlightning_core.callbacks import StopTraining
from rlightning_core.errors import PluginLoadError
from rlightning_core.registry import ComponentSpec, Registry, normalize_dist_name, validate_registration
from rlightning_core.types import HOOK_FOR_KIND

__all__ = [
    "ENTRY_POINT_GROUP",
    "PluginInfo",
    "PluginSet",
    "get_plugins",
    "hook_names",
    "load_plugins",
    "reset_plugins",
]

ENTRY_POINT_GROUP = "rlightning"
BUILTIN_NAME = "builtin"
#: Statuses of plugins whose components are registered.
LOADED_STATUSES = ("loaded", "warning")
#: Libraries too slow to import for commands that only list or validate (``--help``, ``list-plugins``).
HEAVY_MODULES = ("torch", "ray")
_KIND_FOR_HOOK = {hook: kind for kind, hook in HOOK_FOR_KIND.items()}


def hook_names() -> list[str]:
    """Names of every hook spec, in the order they are defined in :mod:`rlightning_core.hookspecs`."""
    return [
        name
        for name, fn in vars(hookspecs).items()
        if inspect.isfunction(fn) and getattr(fn, f"{hookspecs.PROJECT_NAME}_spec", None) is not None
    ]


@attrs.define(kw_only=True)
class PluginInfo:
    """What is known about one plugin after loading: where it came from and how loading went."""

    name: str
    """Entry-point name (``builtin`` for core's own plugin)."""
    distribution: str
    version: str
    entry_point: str | None = None
    """The entry point's value, ``module`` or ``module:attribute``."""
    status: str = "loaded"
    """``loaded``, ``warning`` (loaded, see :attr:`warnings`), ``error`` (import, hook or a factory's signature
    failed), ``incompatible`` (plugin-API range) or ``disabled``."""
    error: str | None = None
    warnings: list[str] = attrs.Factory(list)
    """One line per problem that does not stop the plugin from loading (no hooks, no API range, heavy imports)."""
    api: str | None = None
    """The plugin-API range the plugin declares (``RLIGHTNING_PLUGIN_API``), if any."""
    hooks: list[str] = attrs.Factory(list)
    provides: dict[str, list[str]] = attrs.Factory(dict)

    @property
    def loaded(self) -> bool:
        """Whether its components are registered (status ``loaded`` or ``warning``)."""
        return self.status in LOADED_STATUSES

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the ``list-plugins --json`` row)."""
        return attrs.asdict(self)


@attrs.define
class PluginSet:
    """The loaded plugins of this process: the pluggy manager, the registry and one record per plugin."""

    pm: pluggy.PluginManager
    registry: Registry
    plugins: list[PluginInfo]
    _warned: set[tuple[str, str]] = attrs.field(factory=set, alias="_warned")

    @property
    def hook(self) -> Any:
        """Pluggy's hook relay (``plugins.hook.on_metrics(step=..., metrics=...)``)."""
        return self.pm.hook

    def selection(self) -> list[str]:
        """Names of the external plugins that loaded: pass to :func:`load_plugins` to reproduce this set."""
        return [p.name for p in self.plugins if p.loaded and p.name != BUILTIN_NAME]

    def errors(self) -> list[PluginInfo]:
        """Plugins that failed to load or are incompatible."""
        return [p for p in self.plugins if p.status in ("error", "incompatible")]

    def call_each(
        self, hook_name: str, /, on_error: Callable[[str, BaseException], None] | None = None, **kwargs: Any
    ) -> tuple[str, StopTraining] | None:
        """Call every implementation of a hook; one that raises is reported once and skipped.

        Observer plugins (loggers, notifiers) and CLI extensions must not be able to crash a run or starve
        the others. ``on_error(plugin_name, exc)`` replaces the default warning. A hook may ask the run to stop
        only by raising :class:`~rlightning_core.callbacks.StopTraining`: the first such ``(plugin name,
        exception)`` is returned (the other plugins are still called); return values are ignored.
        """
        stopped: tuple[str, StopTraining] | None = None
        for impl in reversed(getattr(self.pm.hook, hook_name).get_hookimpls()):
            try:
                impl.function(*[kwargs[a] for a in impl.argnames])
            except StopTraining as exc:
                stopped = stopped or (impl.plugin_name, exc)
            except Exception as exc:
                key = (impl.plugin_name, hook_name)
                if on_error is not None:
                    on_error(impl.plugin_name, exc)
                elif key not in self._warned:
                    self._warned.add(key)
                    warnings.warn(
                        f"plugin {impl.plugin_name!r} raised in {hook_name}: {_one_line(exc)} "
                        "(further errors from this hook are silenced)",
                        RuntimeWarning,
                        stacklevel=2,
                    )
        return stopped


_lock = threading.Lock()
_current: PluginSet | None = None


def get_plugins() -> PluginSet:
    """The process's plugin set, loading it on first use (honouring the ``RLIGHTNING_*`` variables)."""
    global _current
    with _lock:
        if _current is None:
            _current = load_plugins()
        return _current


def reset_plugins(plugin_set: PluginSet | None = None) -> None:
    """Forget the cached plugin set (or install ``plugin_set``): the next :func:`get_plugins` reloads."""
    global _current
    with _lock:
        _current = plugin_set


def _split_names(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


def load_plugins(
    *,
    allow: Sequence[str] | None = None,
    deny: Sequence[str] | None = None,
    strict: bool | None = None,
    extra: Iterable[tuple[str, object]] = (),
) -> PluginSet:
    """Load the builtin plugin and the ``rlightning`` entry points into a new :class:`PluginSet`.

    Args:
        allow: external plugins to load (entry-point or distribution names); ``None`` reads
            ``RLIGHTNING_LOAD_PLUGINS`` (unset: all).
        deny: plugins not to load; ``None`` reads ``RLIGHTNING_DISABLE_PLUGINS``.
        strict: raise :class:`PluginLoadError` if any plugin fails; ``None`` reads
            ``RLIGHTNING_STRICT_PLUGINS``.
        extra: ``(name, module_or_object)`` plugins registered directly, as if they came from an entry point
            of distribution ``name`` (used by tests and notebooks).
    """
    if allow is None:
        allow = _split_names(os.environ.get("RLIGHTNING_LOAD_PLUGINS"))
    if deny is None:
        deny = _split_names(os.environ.get("RLIGHTNING_DISABLE_PLUGINS")) or []
    if strict is None:
        strict = os.environ.get("RLIGHTNING_STRICT_PLUGINS", "").strip().lower() in ("1", "true", "yes")
    allowed = None if allow is None else {normalize_dist_name(a) for a in allow}
    denied = {normalize_dist_name(d) for d in deny}

    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    registry = Registry()
    infos: list[PluginInfo] = []

    from rlightning_core import builtin

    candidates: list[tuple[PluginInfo, Callable[[], object]]] = [
        (
            PluginInfo(name=BUILTIN_NAME, distribution="rlightning", version=__version__,
                       entry_point=builtin.__name__),
            lambda: builtin,
        )
    ]
    seen: set[tuple[str, str]] = set()
    for ep in _entry_points():
        dist = ep.dist.metadata["Name"] if ep.dist is not None else "unknown"
        version = ep.dist.version if ep.dist is not None else "unknown"
        key = (normalize_dist_name(dist), ep.name)
        if key in seen:  # the same distribution visible twice on sys.path
            continue
        seen.add(key)
        info = PluginInfo(name=ep.name, distribution=dist, version=version, entry_point=ep.value)
        names = {normalize_dist_name(ep.name), normalize_dist_name(dist)}
        if (allowed is not None and not names & allowed) or names & denied:
            info.status = "disabled"
            infos.append(info)
            continue
        candidates.append((info, ep.load))
    for name, obj in extra:
        info = PluginInfo(name=name, distribution=name, version="0", entry_point=repr(obj))
        candidates.append((info, _constant(obj)))

    for info, load in candidates:
        infos.append(info)
        heavy_before = [m for m in HEAVY_MODULES if m in sys.modules]
        _load_one(pm, registry, info, load)
        heavy = [m for m in HEAVY_MODULES if m in sys.modules and m not in heavy_before]
        if heavy and info.loaded:
            info.warnings.append(f"imports {' and '.join(heavy)} while loading, which every rlightning command "
                                 "then pays for (import heavy libraries inside the factories)")
        if info.warnings and info.status == "loaded":
            info.status = "warning"

    registry.broken = [(p.name, p.distribution, p.error or p.status) for p in infos if p.status in
                       ("error", "incompatible")]
    plugin_set = PluginSet(pm, registry, infos)
    if strict and plugin_set.errors():
        lines = [f"{p.name} ({p.distribution} {p.version}): {p.error}" for p in plugin_set.errors()]
        raise PluginLoadError("plugins failed to load (RLIGHTNING_STRICT_PLUGINS=1):\n  " + "\n  ".join(lines))
    return plugin_set


def _constant(obj: object) -> Callable[[], object]:
    return lambda: obj


def _entry_points() -> list[importlib_metadata.EntryPoint]:
    return sorted(importlib_metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _load_one(pm: pluggy.PluginManager, registry: Registry, info: PluginInfo,
              load: Callable[[], object]) -> None:
    """Import, check the API range, register with pluggy, run the registration hooks: all or nothing."""
    try:
        plugin = load()
    except (Exception, SystemExit) as exc:
        info.status, info.error = "error", f"import failed: {_one_line(exc)}"
        return

    api = getattr(plugin, "RLIGHTNING_PLUGIN_API", None)
    info.api = api if isinstance(api, str) else None
    if api is None:
        major = Version(PLUGIN_API_VERSION).major
        info.warnings.append("declares no RLIGHTNING_PLUGIN_API, so rlightning cannot tell which plugin API it was "
                             f'written for (add RLIGHTNING_PLUGIN_API = ">={major},<{major + 1}" to '
                             f"{_module_name(plugin)})")
    else:
        try:
            compatible = Version(PLUGIN_API_VERSION) in SpecifierSet(str(api))
        except InvalidSpecifier:
            info.status, info.error = "error", f"RLIGHTNING_PLUGIN_API {api!r} is not a version range"
            return
        if not compatible:
            info.status = "incompatible"
            info.error = (f"written for plugin API {api}, this core provides {PLUGIN_API_VERSION} "
                          f"(rlightning {__version__}); upgrade the plugin or rlightning")
            return

    specs = set(hook_names())
    impls = [n for n in dir(plugin) if pm.parse_hookimpl_opts(plugin, n) is not None]
    unknown = [n for n in impls if n not in specs]
    if unknown:
        close = {n: _closest(n, specs) for n in unknown}
        hint = ", ".join(f"{n!r}" + (f" (did you mean {c!r}?)" if c else "") for n, c in close.items())
        info.status, info.error = "error", f"implements unknown hooks: {hint}"
        return
    info.hooks = [n for n in hook_names() if n in impls]
    if not info.hooks:
        undecorated = [n for n in specs if callable(getattr(plugin, n, None))]
        info.warnings.append("implements no hooks, so it provides nothing" + (
            f": {', '.join(sorted(undecorated))} {'lacks' if len(undecorated) == 1 else 'lack'} the "
            "@rlightning_core.hookimpl decorator" if undecorated
            else " (decorate its hook functions with @rlightning_core.hookimpl)"))

    try:
        pm.register(plugin, name=info.name)
    except Exception as exc:  # pluggy's PluginValidationError: arguments not in the spec, duplicate name
        # pluggy puts the actual problem (e.g. "Argument(s) {'x'} ... not in the hookspec") on a later line.
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        info.status, info.error = "error", f"{type(exc).__name__}: {'; '.join(lines)}"
        return

    staged: list[ComponentSpec] = []
    signature_warnings: list[str] = []
    try:
        for hook_name in info.hooks:
            kind = _KIND_FOR_HOOK.get(hook_name)
            if kind is None:
                continue
            for impl in getattr(pm.hook, hook_name).get_hookimpls():
                if impl.plugin is plugin:
                    register = _stager(kind, info, staged, signature_warnings)
                    impl.function(*[{"register": register}[a] for a in impl.argnames])
        for spec in staged:  # validate duplicates inside this distribution before committing anything
            if sum(1 for s in staged if s.kind == spec.kind and s.name == spec.name) > 1:
                raise ValueError(f"{spec.kind} {spec.name!r} is registered twice by this plugin")
        for spec in staged:
            registry.check(spec)
        for spec in staged:
            registry.add(spec)
    except Exception as exc:
        pm.unregister(plugin)
        info.status, info.error = "error", f"registration failed: {_one_line(exc)}"
        return
    for spec in staged:
        info.provides.setdefault(spec.kind, []).append(spec.name)
    info.warnings += signature_warnings


def _stager(kind: str, info: PluginInfo, staged: list[ComponentSpec],
            signature_warnings: list[str]) -> Callable[..., None]:
    def register(name: str, factory: Callable[..., Any], *, config: type | None = None,
                 description: str = "") -> None:
        signature_warnings.extend(validate_registration(kind, name, factory, config, description))
        if not description:
            doc = inspect.getdoc(factory) or ""
            description = doc.strip().splitlines()[0] if doc.strip() else ""
        staged.append(ComponentSpec(kind=kind, name=name, factory=factory, config=config,
                                    description=description, plugin=info.name,
                                    distribution=info.distribution, version=info.version))

    return register


def _module_name(plugin: object) -> str:
    name = getattr(plugin, "__name__", None)
    return f"module {name}" if isinstance(name, str) else "the plugin module"


def _closest(name: str, options: Iterable[str]) -> str | None:
    import difflib

    close = difflib.get_close_matches(name, list(options), n=1, cutoff=0.6)
    return close[0] if close else None


def plugin_module(plugin_set: PluginSet, name: str) -> ModuleType | object | None:
    """The registered plugin object called ``name`` (``None`` if it did not load)."""
    return plugin_set.pm.get_plugin(name)
