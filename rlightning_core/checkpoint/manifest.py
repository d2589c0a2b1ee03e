"""Compatibility manifests: does a checkpoint fit this installation and this config?

A checkpoint's manifest (written by :func:`rlightning_core.run.build_manifest`) records the versions of
rlightning and of the plugins whose components the run used, and the hash of the training-relevant config;
:func:`check_manifest` compares it with the manifest of the run about to start.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlightning_core.registry import normalize_dist_name

__all__ = ["CORE_DISTRIBUTION", "check_manifest"]

#: Core's distribution: its version is checked by major number, not as a plugin.
CORE_DISTRIBUTION = "rlightning"


def check_manifest(manifest: Mapping[str, Any], *, expected: Mapping[str, Any]) -> list[str]:
    """Human-readable reasons a checkpoint may not fit this installation and config; empty if none.

    Both arguments are manifests as :func:`rlightning_core.run.build_manifest` writes them; the keys read are
    ``rlightning`` (core version), ``plugins`` (``{distribution: version}`` of the plugins loaded then),
    ``components`` (``{slot: {"distribution": ..., "version": ...}}``, the providers of the components the run
    used) and ``config_hash``. Each check runs only when ``expected`` has its key:

    - rlightning's major version differs (minor and patch releases keep the checkpoint layout);
    - a plugin distribution that provided a component of the checkpoint's run (all its loaded plugins when
      it records no ``components``) is missing now or has another version; plugins loaded but unused are
      not reported, and core's own distribution is covered by the version check above;
    - the config hash differs (the keys of ``training_config`` that differ are named, with both values).

    Args:
        manifest: the checkpoint's manifest (from :func:`load_checkpoint`).
        expected: the manifest of the run about to start (or of this installation).

    Returns:
        One sentence per problem, ready to print; the caller decides whether they are fatal.
    """
    problems: list[str] = []
    want_core, got_core = expected.get("rlightning"), manifest.get("rlightning")
    if want_core is not None:
        if got_core is None:
            problems.append("the checkpoint does not record which rlightning version wrote it")
        elif _major(str(got_core)) != _major(str(want_core)):
            problems.append(f"written by rlightning {got_core}, this is rlightning {want_core} (major "
                            "version differs; the state layout may have changed)")
    if "plugins" in expected:
        have = {normalize_dist_name(k): str(v) for k, v in (expected.get("plugins") or {}).items()}
        used = _plugins_used(manifest)
        if used is None:
            problems.append("the checkpoint does not record which plugins wrote it")
        for dist, (version, slots) in sorted((used or {}).items()):
            where = f" (for {', '.join(slots)})" if slots else ""
            if dist not in have:
                problems.append(f"plugin distribution {dist} {version}{where} wrote this checkpoint but is "
                                f"not installed or did not load (pip install '{dist}=={version}')")
            elif have[dist] != version:
                problems.append(f"plugin distribution {dist}{where}: checkpoint written with {version}, "
                                f"installed is {have[dist]}")
    want_hash = expected.get("config_hash")
    if want_hash is not None:
        got_hash = manifest.get("config_hash")
        if got_hash is None:
            problems.append("the checkpoint does not record a config hash")
        elif got_hash != want_hash and not _same_but_removed_keys(manifest, want_hash):
            from rlightning_core.checkpoint.config_diff import config_mismatch

            problems.append(config_mismatch(manifest, expected))  # names the keys that differ
    return problems


def _same_but_removed_keys(manifest: Mapping[str, Any], want_hash: str) -> bool:
    """Whether the checkpoint's training config hashes to ``want_hash`` once keys removed since are dropped.

    A checkpoint written before a key was removed (:mod:`rlightning_core.config.removed`) records it in its
    hashed config; the key no longer exists, so it cannot be what makes the configs differ.
    """
    from rlightning_core.config.removed import REMOVED_KEYS
    from rlightning_core.run import fields_hash

    saved = manifest.get("training_config")
    if not isinstance(saved, Mapping):
        return False
    gone = {r.path for r in REMOVED_KEYS}
    if not gone & set(saved):
        return False
    return fields_hash({k: v for k, v in saved.items() if k not in gone}) == want_hash


def _plugins_used(manifest: Mapping[str, Any]) -> dict[str, tuple[str, list[str]]] | None:
    """``{distribution: (version, [slots])}`` of the external plugins a checkpoint depends on, or ``None``."""
    core = normalize_dist_name(CORE_DISTRIBUTION)
    components = manifest.get("components")
    if isinstance(components, Mapping):
        used: dict[str, tuple[str, list[str]]] = {}
        for slot, comp in components.items():
            if not isinstance(comp, Mapping) or "distribution" not in comp:
                return None
            dist = normalize_dist_name(str(comp["distribution"]))
            if dist != core:
                used.setdefault(dist, (str(comp.get("version")), []))[1].append(str(slot))
        return used
    plugins = manifest.get("plugins")
    if isinstance(plugins, Mapping):
        return {normalize_dist_name(k): (str(v), []) for k, v in plugins.items()
                if normalize_dist_name(k) != core}
    return None


def _major(version: str) -> str:
    return version.split(".", 1)[0]
