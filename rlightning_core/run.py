"""A run on disk: its directory, saved config, manifest, loggers and lifecycle hooks.

Only the driver writes the run directory; workers send it what to record. Layout::

    RUN_DIR/config.yaml       the resolved config (defaults included)
    RUN_DIR/metrics.jsonl     one JSON object per logging step
    RUN_DIR/checkpoints/      atomic checkpoints + index.json
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from rlightning_core._version import PLUGIN_API_VERSION, __version__
from rlightning_core.config.loading import component_slots, config_to_yaml
from rlightning_core.config.schema import MainConfig
from rlightning_core.config.structuring import unstructure
from rlightning_core.errors import StorageError, UserError, describe_os_error
from rlightning_core.files import write_text_atomic
from rlightning_core.logging.hub import MetricsHub

__all__ = ["RunContext", "StopRequest", "build_manifest", "config_hash", "default_run_dir",
           "graceful_stop", "prepare_run", "training_config"]

log = logging.getLogger("rlightning")

#: Config sections that may change between a run and its resume without invalidating the checkpoint.
RESUMABLE_CHANGES = ("engine.total_steps", "engine.time_limit_s", "engine.target_eval_return",
                     "engine.eval_every", "engine.eval_episodes", "logging", "checkpoint", "run_dir", "name",
                     "policy.nan_policy", "cluster.max_restarts", "cluster.call_timeout_s",
                     "cluster.actor_start_timeout_s", "cluster.close_timeout_s",
                     # where and with how many workers a run trains (scaling a resumed run out or in, or moving a
                     # run between one process and a Ray cluster: both write the same state layout)
                     "cluster.mode", "cluster.topology", "cluster.weight_sync", "cluster.offload",
                     "cluster.address", "cluster.num_cpus", "cluster.num_gpus", "cluster.dashboard",
                     "cluster.num_learners", "cluster.num_inference_servers", "cluster.placement", "cluster.bundles",
                     "cluster.learner_bundle", "cluster.learner_num_cpus", "cluster.learner_num_gpus",
                     "cluster.inference_server_num_cpus", "cluster.inference_server_num_gpus", "cluster.backend",
                     "cluster.bucket_mb",
                     # a run trained on a GPU resumes on a CPU machine and back (checkpoints load onto the CPU
                     # first; a resume continues bit for bit only on the device kind it was written on)
                     "policy.device", "policy.rollout_device")
#: Per-env-config keys a resume may change: fault handling and how many workers run the config's envs (a
#: different count restarts the envs' episodes instead of restoring them), not what is learned.
RESUMABLE_ENV_KEYS = ("step_timeout_s", "num_workers", "num_cpus", "bundle")


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(data, list):
        out = {}
        for i, v in enumerate(data):
            out.update(_flatten(v, f"{prefix}[{i}]"))
        return out or {prefix: []}
    return {prefix: data}


def training_fields(config: MainConfig) -> dict[str, Any]:
    """The flattened config without the keys a resume may change (what the config hash covers)."""
    flat = _flatten(unstructure(config))
    return {k: v for k, v in flat.items()
            if not any(k == r or k.startswith(r + ".") or k.startswith(r + "[") for r in RESUMABLE_CHANGES)
            and not (k.startswith("env[") and k.split("].", 1)[-1] in RESUMABLE_ENV_KEYS)}


def config_hash(config: MainConfig) -> str:
    """sha256 of the training-relevant config (stable across key order and resumable changes)."""
    return fields_hash(training_fields(config))


def fields_hash(fields: dict[str, Any]) -> str:
    """sha256 (16 hex digits) of flattened config fields, independent of key order."""
    blob = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def training_config(config: MainConfig, *, preprocessors: list[Any] | None = None,
                    preprocess_fns: list[Any] | None = None) -> dict[str, Any]:
    """:func:`training_fields` of ``config`` plus what the builders were given beside it.

    Args:
        config: the run's config.
        preprocessors: the preprocessors passed to ``build_data_buffer`` (``None``: the config's were used); they
            replace ``preprocessors[...]``, named by :func:`~rlightning_core.preprocess.functions.
            describe_preprocessor`.
        preprocess_fns: per env config, the ``build_env_group(preprocess_fn=...)`` function or ``None``; each one
            given is ``env[c].preprocess_fn: "module.qualname"``.
    """
    fields = training_fields(config)
    if preprocessors is not None:
        from rlightning_core.preprocess.functions import describe_preprocessor

        fields = {k: v for k, v in fields.items() if not (k == "preprocessors" or k.startswith("preprocessors["))}
        fields.update(_flatten([describe_preprocessor(p) for p in preprocessors], "preprocessors"))
    if preprocess_fns:
        from rlightning_core.env.preprocess_fn import callable_name

        fields.update({f"env[{c}].preprocess_fn": callable_name(fn) for c, fn in enumerate(preprocess_fns)
                       if fn is not None})
    return fields


def build_manifest(config: MainConfig, plugins: Any, *, preprocessors: list[Any] | None = None,
                   preprocess_fns: list[Any] | None = None) -> dict[str, Any]:
    """What a checkpoint was made with: versions, components' providers, config hash, seed ledger.

    ``preprocessors`` / ``preprocess_fns``: what the builders were given beside the config (see
    :func:`training_config`); the config hash covers them, so a resume without them is refused.
    """
    training = training_config(config, preprocessors=preprocessors, preprocess_fns=preprocess_fns)
    components = {}
    for path, kind, comp in component_slots(config):
        spec = plugins.registry.resolve(kind, comp.type)
        components[path] = {"kind": kind, "name": spec.name, "distribution": spec.distribution,
                            "version": spec.version}
    return {
        "format": 1,
        "rlightning": __version__,
        "plugin_api": PLUGIN_API_VERSION,
        "plugins": {p.distribution: p.version for p in plugins.plugins if p.loaded},
        "components": components,
        "config_hash": fields_hash(training),
        "training_config": training,
        "seed_ledger": {
            "seed": config.seed,
            "derivation": "numpy SeedSequence([seed, *keys]): env worker (1, config, worker), eval env "
                          "(2, config, evaluation), learner (3, rank), rollout copy (4, index)",
        },
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config_yaml": config_to_yaml(config),
    }


def default_run_dir(config: MainConfig, root: str | Path = "runs") -> Path:
    """``runs/<name>-<YYYYmmdd-HHMMSS>``; the name defaults to ``<env label>-<policy type>``."""
    name = config.name or f"{config.env[0].label}-{config.policy.type}"
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = Path(root) / f"{safe}-{stamp}"
    n = 1
    while path.exists():
        n += 1
        path = Path(root) / f"{safe}-{stamp}-{n}"
    return path


@attrs.define
class RunContext:
    """Everything a running engine writes to."""

    run_dir: Path
    config: MainConfig
    hub: MetricsHub
    plugins: Any
    manifest: dict[str, Any]
    resumed: bool = False

    def close(self) -> None:
        """Flush and close loggers."""
        self.hub.close()


def prepare_run(config: MainConfig, run_dir: str | Path | None = None, *, plugins: Any = None,
                resume: bool = False, preprocessors: list[Any] | None = None,
                preprocess_fns: list[Any] | None = None, events: Any = None) -> RunContext:
    """Create (or reopen, when resuming) the run directory, save the config, build the loggers.

    ``preprocessors`` / ``preprocess_fns``: what the builders were given beside the config, for the manifest
    (:func:`build_manifest`). ``events``: where the metrics hub sends ``on_metrics`` / ``on_video`` (the run's
    :class:`~rlightning_core.callbacks.RunEvents`; default: the plugins' hooks only).
    """
    if plugins is None:
        from rlightning_core.plugins import get_plugins

        plugins = get_plugins()
    path = Path(run_dir or config.run_dir or default_run_dir(config))
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise UserError(f"cannot use {path} as the run directory: it (or a folder above it) is a file") from exc
    except OSError as exc:
        raise StorageError(f"cannot create the run directory {path}: {describe_os_error(exc)}") from exc
    write_text_atomic(path / "config.yaml", config_to_yaml(attrs.evolve(config, run_dir=str(path))),
                      what="run config")
    loggers = []
    for lc in config.logging.loggers:
        spec = plugins.registry.resolve("logger", lc.type)
        loggers.append(spec.build(lc.params, run_dir=path))
    hub = MetricsHub(path, loggers, events if events is not None else plugins)
    return RunContext(run_dir=path, config=config, hub=hub, plugins=plugins,
                      manifest=build_manifest(config, plugins, preprocessors=preprocessors,
                                              preprocess_fns=preprocess_fns), resumed=resume)


# ------------------------------------------------------------------------------------------------------------
# Signals: SIGINT / SIGTERM stop a run cleanly
# ------------------------------------------------------------------------------------------------------------

#: Signals that ask a run to stop: it finishes the iteration in progress, writes a final checkpoint, flushes
#: the loggers and releases its workers. A second one of them stops at once (``KeyboardInterrupt``).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@attrs.define
class StopRequest:
    """Set by :func:`graceful_stop`'s handlers or by a callback; the engine polls it between iterations."""

    signum: int | None = None
    """The signal that asked the run to stop (``None``: no signal did)."""
    message: str | None = None
    """Why a callback or plugin asked the run to stop (:class:`~rlightning_core.callbacks.StopTraining`)."""

    @property
    def requested(self) -> bool:
        """Whether a stop was asked for."""
        return self.signum is not None or self.message is not None

    @property
    def reason(self) -> str:
        """The run's ``stop_reason``: ``interrupted`` for a signal, ``callback`` for a callback's stop."""
        return "interrupted" if self.signum is not None else "callback"

    @property
    def name(self) -> str:
        """``SIGINT`` / ``SIGTERM`` (empty when no signal arrived)."""
        return signal.Signals(self.signum).name if self.signum is not None else ""

    @property
    def exit_code(self) -> int:
        """The shell convention for a process stopped by a signal: ``128 + signum`` (130 SIGINT, 143 SIGTERM)."""
        return 128 + int(self.signum or 0)


@contextlib.contextmanager
def graceful_stop(request: StopRequest | None = None) -> Iterator[StopRequest]:
    """Catch SIGINT and SIGTERM while a run trains (main thread only; elsewhere signals keep their handlers).

    The first signal records itself in the yielded :class:`StopRequest` (the engine then stops after the
    current iteration); a second raises ``KeyboardInterrupt`` for an immediate stop. Previous handlers (e.g.
    Ray's own SIGTERM handler in a driver) are restored on exit. ``request``: record into this one (the run's
    callbacks share it) instead of a new one.
    """
    request = request if request is not None else StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def handler(signum: int, _frame: Any) -> None:
        if request.signum is not None:
            raise KeyboardInterrupt
        request.signum = signum
        log.warning("%s received: stopping after this iteration with a final checkpoint (send it again to stop "
                    "at once)", signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield request
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
