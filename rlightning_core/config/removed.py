"""Config keys rlightning no longer has, and what a config that still sets one is told.

A removed key is not merely unknown: the strict converter reports it as removed, names its dotted path and
says what to do instead (usually: delete the line), so a config written for an older version fails with a
message that explains itself. Configs a run saved itself (a checkpoint's manifest) carry every key with its
value at the time; :func:`without_removed_keys` drops the removed ones from such a document before it is read,
and :func:`upgrade_saved_config` also moves renamed keys to their new names.
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["REMOVED_KEYS", "RemovedKey", "RemovedKeyError", "removed_keys_of", "upgrade_saved_config",
           "without_removed_keys"]


@attrs.frozen
class RemovedKey:
    """One removed key: the config class that had it, where that class sits, and what to do now."""

    owner: str
    """``__name__`` of the config class the key belonged to (``"ClusterConfig"``)."""
    section: str
    """Dotted path of that class in a run's config (``"cluster"``)."""
    key: str
    """The field name (``"early_rollout"``)."""
    why: str
    """The mechanism that went with it and what happens instead (completes "removed together with ...")."""

    @property
    def message(self) -> str:
        """The problem line's text after the key's path."""
        return f"this key was removed together with {self.why}; delete it from the config"

    @property
    def path(self) -> str:
        """``section.key``."""
        return f"{self.section}.{self.key}"


#: Every removed key, in the order they were removed.
REMOVED_KEYS: tuple[RemovedKey, ...] = (
    RemovedKey(owner="ClusterConfig", section="cluster", key="local_channel",
               why="the Unix-socket channel beside Ray's calls (env runners and inference servers always take "
                   "Ray calls)"),
    RemovedKey(owner="ClusterConfig", section="cluster", key="early_rollout",
               why="the early-rollout helper process (the first rollout starts once the learner is built)"),
    RemovedKey(owner="PolicyConfig", section="policy", key="rollout_impl",
               why="the torch-free rollout copies the core picked (Ray env runners act with the policy class "
                   "itself)"),
)


class RemovedKeyError(ValueError):
    """A config sets a key that was removed (rendered as ``path:`` and :attr:`RemovedKey.message`)."""


def removed_keys_of(owner: str) -> dict[str, RemovedKey]:
    """The removed keys of the config class named ``owner``, by field name."""
    return {r.key: r for r in REMOVED_KEYS if r.owner == owner}


def without_removed_keys(data: Any) -> Any:
    """A copy of a config document without the removed keys (for configs a run saved, defaults included)."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for r in REMOVED_KEYS:
        section = out.get(r.section)
        if isinstance(section, dict) and r.key in section:
            out[r.section] = {k: v for k, v in section.items() if k != r.key}
    return out


def upgrade_saved_config(data: Any) -> Any:
    """A config a run saved (``RUN_DIR/config.yaml``, a checkpoint's manifest), readable by this version.

    Removed keys are dropped (:func:`without_removed_keys`) and renamed ones moved to their new name
    (:data:`~rlightning_core.config.structuring.RENAMED_KEYS`): the run wrote every key itself, defaults
    included, so an old name there is not the user's mistake. A config file a user wrote is not upgraded: it
    is refused with the new name, so that it gets fixed.
    """
    from rlightning_core.config.structuring import RENAMED_KEYS

    out = without_removed_keys(data)
    if not isinstance(out, dict):
        return out
    for old, new in RENAMED_KEYS.items():
        section, key = old.split(".", 1)
        new_key = new.split(".", 1)[1]
        part = out.get(section)
        if isinstance(part, dict) and key in part:
            part = {k: v for k, v in part.items() if k != key}
            part.setdefault(new_key, out[section][key])
            out[section] = part
    return out
