"""Why a resume's config does not fit its checkpoint, key by key.

A manifest (:func:`rlightning_core.run.build_manifest`) holds ``config_hash`` and ``training_config``, the
flattened training-relevant config that hash covers. When the hashes differ, the keys that differ are named with
both values, so a refused resume says what changed instead of two hashes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["config_changes", "config_mismatch"]

#: Differing keys listed in one message (the rest are counted).
MAX_LISTED = 12
_UNSET = object()


def _shown(value: Any) -> str:
    if value is _UNSET:
        return "not set"
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def config_changes(saved: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """``"KEY: VALUE in the checkpoint, VALUE now"`` for every flattened key whose value differs, in key order."""
    out = []
    for key in sorted({*saved, *now}):
        before, after = saved.get(key, _UNSET), now.get(key, _UNSET)
        if before != after or type(before) is not type(after):
            out.append(f"{key}: {_shown(before)} in the checkpoint, {_shown(after)} now")
    return out


def config_mismatch(manifest: Mapping[str, Any], expected: Mapping[str, Any]) -> str:
    """The problem line for a checkpoint whose ``config_hash`` differs from ``expected``'s, naming the keys.

    Falls back to the two hashes when either manifest lacks ``training_config`` (an older checkpoint).
    """
    hashes = (f"config hash {str(manifest.get('config_hash'))[:12]} in the checkpoint, "
              f"{str(expected.get('config_hash'))[:12]} now")
    saved, now = manifest.get("training_config"), expected.get("training_config")
    head = "the config differs from the one the checkpoint was written with"
    if not isinstance(saved, Mapping) or not isinstance(now, Mapping):
        return f"{head} ({hashes})"
    changes = config_changes(saved, now)
    if not changes:  # same keys and values, another hash: the hashing itself changed between versions
        return f"{head} ({hashes}; no key differs, so the config hash is computed differently now)"
    listed = changes[:MAX_LISTED]
    more = f"\n    ... and {len(changes) - MAX_LISTED} more" if len(changes) > MAX_LISTED else ""
    return f"{head} ({hashes}):\n    " + "\n    ".join(listed) + more
