"""``train()``: what ``rlightning train`` does, as a function (the CLI calls it; so can scripts and sweeps)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlightning_core.config.schema import MainConfig
    from rlightning_core.engine.base import EngineResult

__all__ = ["resolve_config", "resolve_run_dir", "train"]


def train(config: str | Path | MainConfig | Mapping[str, Any] | None, run_dir: str | Path | None = None, *,
          overrides: Sequence[str] = (), callbacks: Iterable[Any] = (),
          resume_from: str | Path | None = None) -> EngineResult:
    """Train one run: resolve the config and overrides, pick the run directory, build the parts, run the engine.

    Args:
        config: a config file, a loaded ``MainConfig`` (or its dict); ``None`` with ``resume_from``: the resumed
            run's saved ``config.yaml``.
        run_dir: where to write the run (default: ``resume_from``'s run, else ``config.run_dir``, else
            ``runs/...``).
        overrides: dotted ``key=value`` overrides applied on top of ``config``.
        callbacks: :class:`~rlightning_core.callbacks.Callback` objects (one may stop the run).
        resume_from: a run directory or checkpoint to continue from.

    Returns:
        The engine's :class:`~rlightning_core.engine.base.EngineResult`.

    Raises:
        ConfigError: the config has problems (each with its key path).
    """
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group
    from rlightning_core.callbacks import check_callbacks

    callbacks = check_callbacks(callbacks)  # before anything is built
    cfg, _ = resolve_config(config, overrides, resume_from=resume_from)
    target = resolve_run_dir(cfg, run_dir, resume_from=resume_from)
    env_group = build_env_group(cfg.env, seed=cfg.seed, cluster=cfg.cluster)
    try:
        policy_group = build_policy_group(cfg.policy.type, cfg.policy, cfg.cluster)
        buffer = build_data_buffer(cfg.buffer.type, cfg.buffer)
        engine = build_engine(cfg, env_group, policy_group, buffer)
        return engine.run(target, resume_from=resume_from, callbacks=callbacks)
    finally:
        env_group.close()


def resolve_config(config: str | Path | MainConfig | Mapping[str, Any] | None, overrides: Sequence[str] = (), *,
                   resume_from: str | Path | None = None) -> tuple[MainConfig, str]:
    """``(resolved config, where it came from)``; ``config=None`` reads the saved config of ``resume_from``."""
    from rlightning_core.config.loading import load_config, load_config_dict
    from rlightning_core.config.schema import MainConfig

    if config is None:
        if resume_from is None:
            from rlightning_core.errors import UserError

            raise UserError("train: give a config (it may be left out only when resuming a run)")
        source = saved_config(Path(resume_from))
        return load_saved_config(source, overrides), source
    if isinstance(config, MainConfig):
        if not overrides:
            return config, "<config>"
        from rlightning_core.config.structuring import unstructure

        return load_config_dict(unstructure(config), overrides, source="<config>"), "<config>"
    if isinstance(config, Mapping):
        return load_config_dict(config, overrides, source="<config>"), "<config>"
    return load_config(config, overrides), str(config)


def resolve_run_dir(config: MainConfig, run_dir: str | Path | None = None, *,
                    resume_from: str | Path | None = None) -> Path:
    """The run directory: ``run_dir``, else the resumed run's, else ``config.run_dir``, else ``runs/...``."""
    from rlightning_core.run import default_run_dir

    if run_dir is None and resume_from is not None:
        resume_path = Path(resume_from)
        run_dir = resume_path if resume_path.is_dir() and resume_path.name != "checkpoints" else run_dir_of(
            resume_path)
    if run_dir:
        return Path(run_dir)
    return Path(config.run_dir) if config.run_dir else default_run_dir(config)


def run_dir_of(path: Path) -> Path:
    """The run directory that holds a checkpoint file or checkpoints directory."""
    p = path if path.is_dir() else path.parent
    return p.parent if p.name == "checkpoints" else p


def load_saved_config(path: str, overrides: Sequence[str]) -> MainConfig:
    """The config a run saved, written by this or an older version (renamed / removed keys upgraded)."""
    from rlightning_core.config.loading import load_config_dict, read_config_file
    from rlightning_core.config.removed import upgrade_saved_config

    return load_config_dict(upgrade_saved_config(read_config_file(path)), overrides, source=path)


def saved_config(resume: Path) -> str:
    """The config a resumed run was saved with: ``config.yaml`` in the run directory ``resume`` names."""
    from rlightning_core.errors import UserError

    run = resume if resume.is_dir() and resume.name != "checkpoints" else run_dir_of(resume)
    saved = run / "config.yaml"
    if not saved.is_file():
        raise UserError(f"--resume {resume}: {saved} does not exist, so the run's config is unknown; give the "
                        "config file: rlightning train CONFIG [KEY=VALUE]... --resume RUN_DIR")
    return str(saved)
