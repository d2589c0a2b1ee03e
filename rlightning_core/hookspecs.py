"""The plugin contract: every hook rlightning calls, with its arguments and when it is called.

Implementations are plain functions decorated with :data:`rlightning_core.hookimpl`; they may accept any
subset of a hook's arguments (pluggy matches them by name), so specs only ever gain arguments and old plugins
keep working. A plugin module declares the plugin-API range it was written for::

    RLIGHTNING_PLUGIN_API = ">=2,<3"

and is exposed through an entry point in the ``rlightning`` group of its distribution::

    [project.entry-points.rlightning]
    my_plugin = "my_package.plugin"
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pluggy

from rlightning_core.types import RegisterFn

PROJECT_NAME = "rlightning"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

# --------------------------------------------------------------------------------------------------------------
# Registration: called once per process when plugins load (lazily, on first use of the registry). Each receives
# a ``register`` callback; the core validates names, records which distribution provided what, and applies the
# duplicate policy. A hook that raises makes its plugin "broken": none of that plugin's components register.
# --------------------------------------------------------------------------------------------------------------


@hookspec
def register_envs(register: RegisterFn) -> None:
    """Register environment components (kind ``env``).

    Called once when plugins load. The factory receives the structured ``params`` and builder keyword
    arguments (``num_envs``, ``seed``, ``worker_index``) and returns an env worker.

    Args:
        register: ``register(name, factory, *, config=None, description="")``.

    Example::

        @hookimpl
        def register_envs(register):
            register("gridworld", make_gridworld, config=GridParams, description="A 5x5 grid.")
    """


@hookspec
def register_policies(register: RegisterFn) -> None:
    """Register policy / algorithm components (kind ``policy``).

    Called once when plugins load. The factory returns a policy class or instance honouring ``BasePolicy``;
    the same class is placed in learners (role ``LEARNER``) and rollout copies (role ``ROLLOUT``).

    Args:
        register: ``register(name, factory, *, config=None, description="")``.

    Example::

        @hookimpl
        def register_policies(register):
            register("ppo", make_ppo, config=PPOParams, description="Proximal Policy Optimization.")
    """


@hookspec
def register_buffers(register: RegisterFn) -> None:
    """Register data buffers (kind ``buffer``): rollout storage, replay, their storages and samplers.

    Called once when plugins load.

    Args:
        register: ``register(name, factory, *, config=None, description="")``.

    Example::

        @hookimpl
        def register_buffers(register):
            register("fifo", FifoBuffer, config=FifoParams, description="Drops the oldest transitions.")
    """


@hookspec
def register_preprocessors(register: RegisterFn) -> None:
    """Register preprocessors (kind ``preprocessor``): observation/reward transforms with saved state.

    Called once when plugins load.

    Args:
        register: ``register(name, factory, *, config=None, description="")``.

    Example::

        @hookimpl
        def register_preprocessors(register):
            register("clip_obs", ClipObs, config=ClipParams, description="Clips observations.")
    """


@hookspec
def register_engines(register: RegisterFn) -> None:
    """Register engines (kind ``engine``): the loops that drive collection, learning and evaluation.

    Called once when plugins load.

    Args:
        register: ``register(name, factory, *, config=None, description="")``.

    Example::

        @hookimpl
        def register_engines(register):
            register("my_loop", MyEngine, config=MyLoopParams, description="A custom training loop.")
    """


@hookspec
def register_loggers(register: RegisterFn) -> None:
    """Register metric loggers (kind ``logger``), selected by ``logging.loggers`` in the config.

    Called once when plugins load. A logger receives every metric of the run, including those produced
    inside Ray actors.

    Args:
        register: ``register(name, factory, *, config=None, description="")``.

    Example::

        @hookimpl
        def register_loggers(register):
            register("csv", CsvLogger, config=CsvParams, description="Writes metrics.csv in the run dir.")
    """


# --------------------------------------------------------------------------------------------------------------
# CLI: called once when the ``rlightning`` command starts.
# --------------------------------------------------------------------------------------------------------------


@hookspec
def register_commands(cli: Any) -> None:
    """Add subcommands to the ``rlightning`` command.

    Called once when the CLI starts, after the core commands exist. ``cli`` is the root ``click.Group``;
    decorate new commands with ``@cli.command()``. Keep heavy imports inside the command body.

    Args:
        cli: the root ``click.Group`` of ``rlightning``.

    Example::

        @hookimpl
        def register_commands(cli):
            @cli.command()
            def hello():
                "Say hello."
                click.echo("hello")
    """


# --------------------------------------------------------------------------------------------------------------
# Run lifecycle: observers (loggers, notifiers, experiment trackers). Called on the driver, in order, for every
# loaded plugin, then for the run's Python callbacks (rlightning_core.callbacks). Return values are ignored; a
# hook stops a training run only by raising rlightning_core.StopTraining (at the iteration boundary, with a final
# checkpoint), and any other exception is reported and skipped.
# --------------------------------------------------------------------------------------------------------------


@hookspec
def on_run_start(config: Any, run_dir: Path) -> None:
    """A training or evaluation run starts.

    Called once per run, after the run directory exists and the resolved config is saved, before any step.

    Args:
        config: the resolved ``MainConfig``.
        run_dir: the run directory (only the driver writes it).

    Example::

        @hookimpl
        def on_run_start(config, run_dir):
            print(f"run {run_dir} with seed {config.seed}")
    """


@hookspec
def on_metrics(step: int, metrics: dict[str, float]) -> None:
    """A batch of metrics is ready.

    Called on every logging step (and after each evaluation) with namespaced scalar metrics such as
    ``rollout/episode_return`` or ``loss/policy``, including metrics reported by remote workers.

    Args:
        step: environment steps so far.
        metrics: metric name to value.

    Example::

        @hookimpl
        def on_metrics(step, metrics):
            if "eval/episode_return_mean" in metrics:
                print(step, metrics["eval/episode_return_mean"])
    """


@hookspec
def on_eval(step: int, metrics: dict[str, float]) -> None:
    """An evaluation of the current policy finished.

    Called on the driver after every evaluation (each ``engine.eval_every`` iterations and the final one), before
    the row of metrics that holds it reaches :func:`on_metrics`.

    Args:
        step: environment steps at the time of the evaluation.
        metrics: that evaluation's ``eval/*`` metrics, e.g. ``eval/episode_return_mean``.

    Example::

        @hookimpl
        def on_eval(step, metrics):
            print(step, metrics["eval/episode_return_mean"])
    """


@hookspec
def on_checkpoint(path: Path, step: int) -> None:
    """A checkpoint was written (atomically: the file is complete when this is called).

    Args:
        path: the checkpoint file.
        step: environment steps at the time of the checkpoint.

    Example::

        @hookimpl
        def on_checkpoint(path, step):
            upload(path)
    """


@hookspec
def on_video(path: Path, step: int, tag: str) -> None:
    """A training video was written (``logging.video_every``): one deterministic episode as an MP4 file.

    Called every ``video_every`` iterations, once per env config, after that iteration's metrics, on the
    driver. The file is complete when this is called. Logger components receive the same video through
    their optional ``log_video(step, path, *, tag, fps)`` method; this hook is for other observers.

    Args:
        path: the MP4 file (``RUN_DIR/videos/iter_<n>.mp4``, ``iter_<n>-<env label>.mp4`` with several envs).
        step: environment steps at the time of the recording.
        tag: ``video``, or ``video/<env label>`` with several env configs.

    Example::

        @hookimpl
        def on_video(path, step, tag):
            shutil.copy(path, f"/shared/videos/{step}.mp4")
    """


@hookspec
def on_run_end(run_dir: Path, status: str, error: BaseException | None) -> None:
    """A run ended, successfully or not.

    Called once per run, after the last checkpoint and metrics. ``status`` is ``"completed"``,
    ``"interrupted"`` or ``"failed"``.

    Args:
        run_dir: the run directory.
        status: how the run ended.
        error: the exception that ended the run, or ``None``.

    Example::

        @hookimpl
        def on_run_end(run_dir, status, error):
            notify(f"{run_dir}: {status}")
    """
