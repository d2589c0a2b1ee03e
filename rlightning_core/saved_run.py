"""A trained run read back from its checkpoint: the saved config, the policy and the observation preprocessors.

Shared by evaluation (:func:`rlightning_core.evaluate.evaluate_checkpoint`), the predict API
(:func:`rlightning_core.predict.load_policy`) and ``rlightning export``, so that they all rebuild a run the
same way: the newest checkpoint that fully loads (weights-only), its saved config upgraded to the current
schema, the rollout policy with the learner's weights, and the preprocessors with their saved statistics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from rlightning_core.errors import UserError

__all__ = ["SavedRun", "read_saved_run"]


@attrs.define
class SavedRun:
    """One checkpoint of a run, loaded: where it came from, its state and manifest, and its config."""

    file: Path
    """The checkpoint file that was loaded."""
    state: dict[str, Any]
    """The checkpoint's state (``policy``, ``preprocessors`` (numpy), ...)."""
    manifest: dict[str, Any]
    """The run's manifest as the checkpoint carries it."""
    config: Any
    """The saved :class:`~rlightning_core.config.MainConfig`, upgraded to the current schema."""
    given_preprocessors: list[Any] | None = None
    """The preprocessors passed by the caller (a run assembled with the builders), or ``None``."""

    def build_policy(self, observation_space: Any, action_space: Any) -> Any:
        """The run's rollout policy (a :class:`~rlightning_core.policy.base.BasePolicy`) with its saved weights."""
        from rlightning_core.builders import build_policy_group

        config = self.config
        group = build_policy_group(config.policy.type, config.policy, config.cluster)
        group.materialize(observation_space, action_space, seed=config.seed)
        group.load_state_dict(self.state["policy"])
        assert group.rollout is not None
        return group.rollout

    def build_preprocessors(self, observation_space: Any, *, num_envs: int = 1, registry: Any = None) -> list[Any]:
        """The run's preprocessors (the given ones, or those of its config) holding their saved statistics."""
        preprocessors = self.given_preprocessors
        if preprocessors is None:
            if registry is None:
                from rlightning_core.plugins import get_plugins

                registry = get_plugins().registry
            preprocessors = [registry.resolve("preprocessor", pc.type).build(
                pc.params, observation_space=observation_space, num_envs=num_envs)
                for pc in self.config.preprocessors]
        for pre, pstate in zip(preprocessors, self.state["preprocessors"], strict=True):
            pre.load_state_dict(pstate)
        return list(preprocessors)


def read_saved_run(path: str | Path, *, best: bool = False, purpose: str = "evaluating",
                   obs_preprocessor: Any = None, reward_preprocessor: Any = None, preprocess_fn: Any = None,
                   caller: str = "evaluate_checkpoint") -> SavedRun:
    """Load the checkpoint meant by ``path`` (run dir, checkpoints dir or file) and its saved config.

    A directory is read from its newest checkpoint that fully loads (every CRC, weights-only, the payload's
    structure); newer files that do not are reported, one warning each, and left where they are.

    Args:
        path: a run directory, its ``checkpoints`` directory, or one checkpoint file.
        best: the checkpoint recorded as best by evaluation instead of the newest.
        purpose: what the checkpoint is read for, in the warnings about refused files.
        obs_preprocessor: the one a builder-assembled run passed to ``build_data_buffer`` (no config
            holds it).
        reward_preprocessor: likewise, its reward preprocessor.
        preprocess_fn: the run's ``build_env_group(preprocess_fn=...)``, when it had one.
        caller: the public function being called, for messages.

    Raises:
        UserError: nothing loadable at ``path`` (its path named), no config in the checkpoint, or the run
            needs builder-only inputs that were not passed.
    """
    from rlightning_core.checkpoint.manager import (
        CheckpointManager,
        checkpoint_directory,
        load_checkpoint,
        load_newest,
        to_numpy_tree,
    )
    from rlightning_core.config.loading import load_config_dict
    from rlightning_core.config.removed import upgrade_saved_config
    from rlightning_core.preprocess.functions import as_preprocessor

    path = Path(path)
    if best:
        directory = checkpoint_directory(path) if path.is_dir() else path.parent
        file = CheckpointManager(directory).best()
        if file is None:
            raise UserError(f"no best-by-eval checkpoint recorded in {directory}")
        state, manifest = load_checkpoint(file)
    else:
        loaded = load_newest(path, required_state=("policy", "preprocessors"))
        loaded.report_refused(purpose, move_aside=False)
        file, state, manifest = loaded.path, loaded.state, loaded.manifest
    if "config_yaml" not in manifest:
        raise UserError(f"{file}: the checkpoint carries no config (written by an older rlightning?)")
    import yaml

    config = load_config_dict(upgrade_saved_config(yaml.safe_load(manifest["config_yaml"])),
                              source=f"{file} (saved config)")
    state["preprocessors"] = to_numpy_tree(state["preprocessors"])
    given = [p for p in (as_preprocessor(obs_preprocessor, "obs_preprocessor", caller),
                         as_preprocessor(reward_preprocessor, "reward_preprocessor", caller))
             if p is not None]
    saved = SavedRun(file=file, state=state, manifest=manifest, config=config, given_preprocessors=given or None)
    _check_builder_inputs(saved, preprocess_fn, caller)
    return saved


def _check_builder_inputs(saved: SavedRun, preprocess_fn: Any, caller: str) -> None:
    """Refuse a checkpoint whose run used builder-only inputs (see :func:`read_saved_run`) not passed now."""
    file, training = saved.file, saved.manifest.get("training_config") or {}
    fns = sorted(f"{k.removesuffix('.preprocess_fn')}: {v}" for k, v in training.items()
                 if k.endswith(".preprocess_fn"))
    if fns and preprocess_fn is None:
        raise UserError(f"{file}: the run passed its observations through build_env_group(preprocess_fn=...) "
                        f"({'; '.join(fns)}), which no config holds; load it from Python with "
                        f"{caller}(path, preprocess_fn=...)")
    count = len(saved.state["preprocessors"])
    given = saved.given_preprocessors
    have = len(given) if given is not None else len(saved.config.preprocessors)
    if count != have:
        names = [str(training.get(f"preprocessors[{i}].function", training.get(f"preprocessors[{i}].type", "?")))
                 for i in range(count)]
        where = "were passed" if given is not None else "are in its saved config"
        raise UserError(f"{file}: the checkpoint holds the state of {count} preprocessor(s) ({', '.join(names)}) "
                        f"but {have} {where}; a run that passed preprocessors to build_data_buffer is loaded "
                        f"from Python with the same ones: {caller}(path, obs_preprocessor=..., "
                        "reward_preprocessor=...)")
