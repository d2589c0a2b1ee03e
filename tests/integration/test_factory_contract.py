"""``FACTORY_CALLS`` is what the core really passes: a local run whose every component comes from factories that
record the keywords they receive, checked against the table that ``register`` validates signatures with."""

from __future__ import annotations

from typing import Any

from rlightning_core import hookimpl
from rlightning_core.registry import FACTORY_CALLS
from rlightning_core.types import KINDS


class Recorder:
    """Registers one ``rec-<kind>`` component per kind: core's own implementations behind ``**kwargs`` factories
    that record which keywords the core called them with."""

    def __init__(self) -> None:
        self.calls: dict[str, list[set[str]]] = {kind: [] for kind in KINDS}

    def _factory(self, kind: str, target: Any) -> Any:
        def factory(*args: Any, **kwargs: Any) -> Any:
            self.calls[kind].append(set(kwargs))
            return target(*args, **kwargs)

        return factory

    @hookimpl
    def register_envs(self, register):
        from rlightning_core.testing.doubles import SpaceEnvParams, make_space_env

        register("rec-env", self._factory("env", make_space_env), config=SpaceEnvParams)

    @hookimpl
    def register_policies(self, register):
        from rlightning_core.testing.doubles import TinyPolicyParams, make_tiny_policy

        register("rec-policy", self._factory("policy", make_tiny_policy), config=TinyPolicyParams)

    @hookimpl
    def register_buffers(self, register):
        from rlightning_core.buffer.params import RolloutBufferParams
        from rlightning_core.buffer.rollout import RolloutBuffer

        register("rec-buffer", self._factory("buffer", RolloutBuffer), config=RolloutBufferParams)

    @hookimpl
    def register_preprocessors(self, register):
        from rlightning_core.preprocess.builtins import NormalizeObs
        from rlightning_core.preprocess.params import NormalizeObsParams

        register("rec-preprocessor", self._factory("preprocessor", NormalizeObs), config=NormalizeObsParams)

    @hookimpl
    def register_engines(self, register):
        from rlightning_core.engine.params import SyncEngineParams
        from rlightning_core.engine.sync import SyncEngine

        register("rec-engine", self._factory("engine", SyncEngine), config=SyncEngineParams)

    @hookimpl
    def register_loggers(self, register):
        from rlightning_core.testing.doubles import RecordingLogger

        register("rec-logger", self._factory("logger", RecordingLogger))


def test_every_keyword_the_core_passes_is_in_the_contract(tmp_path):
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group
    from rlightning_core.config import load_config_dict
    from rlightning_core.plugins import load_plugins, reset_plugins

    recorder = Recorder()
    plugins = load_plugins(allow=[], extra=[("rec", recorder)])
    reset_plugins(plugins)
    config = load_config_dict({
        "env": {"type": "rec-env", "num_envs": 2},
        "policy": {"type": "rec-policy", "device": "cpu"},
        "buffer": {"type": "rec-buffer"},
        "preprocessors": [{"type": "rec-preprocessor"}],
        "engine": {"type": "rec-engine", "total_steps": 32, "eval_episodes": 1, "params": {"rollout_steps": 8}},
        "logging": {"loggers": [{"type": "rec-logger"}]},
        "cluster": {"mode": "local"},
    }, registry=plugins.registry)
    # the calls `rlightning train` makes (rlightning_cli/commands/train.py)
    env_group = build_env_group(config.env, seed=config.seed, cluster=config.cluster)
    try:
        policy_group = build_policy_group(config.policy.type, config.policy, config.cluster)
        buffer = build_data_buffer(config.buffer.type, config.buffer)
        build_engine(config, env_group, policy_group, buffer).run(tmp_path / "run")
    finally:
        env_group.close()

    for kind in KINDS:
        call = FACTORY_CALLS[kind]
        optional = {keyword for keyword, _ in call.optional}
        assert recorder.calls[kind], f"no {kind} was built"
        for keywords in recorder.calls[kind]:
            assert set(call.keywords) <= keywords <= set(call.keywords) | optional, (kind, keywords)
    assert len(recorder.calls["env"]) >= 2  # training envs and the final evaluation's
