"""Configuration in-process: file formats, schema-typed overrides, collected errors, round trips."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import attrs
import pytest

from rlightning_core.config import (
    EnvConfig,
    MainConfig,
    apply_overrides,
    config_to_yaml,
    load_config,
    load_config_dict,
    parse_override,
    read_config_file,
)
from rlightning_core.errors import ConfigError, UserError

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
GOOD = CONFIGS / "good.yaml"
MINIMAL = {"env": {"type": "dummy-env"}, "policy": {"type": "dummy-policy"},
           "buffer": {"type": "dummy-buffer"}, "engine": {"type": "dummy-engine"}}


@pytest.fixture
def registry(dummy_plugins):
    assert dummy_plugins.errors() == []
    return dummy_plugins.registry


def problems_of(exc_info: pytest.ExceptionInfo[ConfigError]) -> list[str]:
    return exc_info.value.problems


# ---------------------------------------------------------------------------------------------- good configs


@pytest.mark.parametrize("name", ["good.toml", "good.json"])
def test_formats_load_to_the_same_config(registry, name):
    assert load_config(CONFIGS / name, registry=registry) == load_config(GOOD, registry=registry)
    assert load_config(CONFIGS / name, resolve=False) == load_config(GOOD, resolve=False)


def test_good_config_is_typed_by_the_schema_and_the_plugins(registry):
    cfg = load_config(GOOD, registry=registry)
    dummy = sys.modules["rlightning_test_dummy"]
    assert isinstance(cfg, MainConfig)
    assert cfg.engine.total_steps == 1_000_000
    assert type(cfg.engine.total_steps) is int
    assert cfg.engine.time_limit_s == 60.0
    assert type(cfg.engine.time_limit_s) is float
    assert cfg.policy.params == dummy.DummyPolicyParams(lr=3e-4, hidden=[32, 32])
    assert cfg.env[0].params == dummy.DummyEnvParams(id="Dummy-v1", size=7)
    assert cfg.env[0].label == "Dummy-v1"
    assert cfg.env[1].type == "rlightning-test-twin:shared-env"
    assert cfg.env[1].params is None  # a component without a config class has no params
    assert cfg.buffer.params == dummy.DummyBufferParams(capacity=256)
    assert cfg.preprocessors[0].params == dummy.DummyNormParams(clip=5.0)
    assert cfg.logging.loggers[0].params.filename == "extra.jsonl"
    assert (cfg.seed, cfg.name, cfg.run_dir) == (7, "good", None)


def test_unresolved_config_keeps_params_as_data():
    cfg = load_config(GOOD, resolve=False)
    assert cfg.policy.params == {"lr": 3e-4, "hidden": [32, 32]}


def test_single_env_mapping_becomes_a_list(registry):
    cfg = load_config_dict(MINIMAL, registry=registry)
    assert len(cfg.env) == 1
    assert isinstance(cfg.env[0], EnvConfig)
    assert cfg.env[0].params.size == 5  # plugin default


def test_defaults_fill_every_section(registry):
    cfg = load_config_dict(MINIMAL, registry=registry)
    assert cfg.cluster.mode == "local"
    assert cfg.checkpoint.keep_last == 3
    assert cfg.logging.loggers == []
    assert cfg.seed == 0
    assert cfg.policy.device == "auto"


def test_config_show_yaml_round_trips(registry, tmp_path):
    cfg = load_config(GOOD, ["policy.params.gamma=0.9"], registry=registry)
    shown = tmp_path / "shown.yaml"
    shown.write_text(config_to_yaml(cfg), encoding="utf-8")
    assert load_config(shown, registry=registry) == cfg
    text = shown.read_text()
    assert text.index("type: dummy-policy") < text.index("lr: 0.0003")  # type, params, then the rest


def test_configs_are_frozen(registry):
    cfg = load_config_dict(MINIMAL, registry=registry)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        cfg.seed = 3  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------- overrides


@pytest.mark.parametrize(
    ("override", "getter", "expected", "expected_type"),
    [
        ("run_dir=123", lambda c: c.run_dir, "123", str),
        ("name=null", lambda c: c.name, None, type(None)),
        ("engine.total_steps=1e6", lambda c: c.engine.total_steps, 1_000_000, int),
        ("engine.time_limit_s=30", lambda c: c.engine.time_limit_s, 30.0, float),
        ("engine.time_limit_s=null", lambda c: c.engine.time_limit_s, None, type(None)),
        ("policy.params.lr=3e-4", lambda c: c.policy.params.lr, 3e-4, float),
        ("policy.params.hidden=[8, 16]", lambda c: c.policy.params.hidden, [8, 16], list),
        ("policy.params.activation=relu", lambda c: c.policy.params.activation, "relu", str),
        ("env[0].num_envs=4", lambda c: c.env[0].num_envs, 4, int),
        ("env.0.num_envs=4", lambda c: c.env[0].num_envs, 4, int),
        ("env.num_envs=4", lambda c: c.env[0].num_envs, 4, int),
        ("env[0].params.id=123", lambda c: c.env[0].params.id, "123", str),
        ("env.params.id=yes", lambda c: c.env[0].params.id, "yes", str),
        ("cluster.dashboard=true", lambda c: c.cluster.dashboard, True, bool),
        ("cluster.address=10.0.0.1:6379", lambda c: c.cluster.address, "10.0.0.1:6379", str),
        ("logging.log_every=5", lambda c: c.logging.log_every, 5, int),
        ("seed=42", lambda c: c.seed, 42, int),
    ],
)
def test_overrides_are_typed_by_the_schema(registry, override, getter, expected, expected_type):
    value = getter(load_config_dict(MINIMAL, [override], registry=registry))
    assert value == expected
    assert type(value) is expected_type


def test_overrides_apply_in_order_and_reach_list_items(registry):
    cfg = load_config(GOOD, ["env[1].num_envs=3", "seed=1", "seed=2"], registry=registry)
    assert cfg.env[1].num_envs == 3
    assert cfg.env[0].num_envs == 2
    assert cfg.seed == 2


def test_parse_override_forms_agree():
    assert parse_override("env[0].params.id=X")[0] == parse_override("env.0.params.id=X")[0]
    path, value = parse_override("policy.params.lr = 3e-4")
    assert path == ["policy", "params", "lr"]
    assert (value.text, value.value) == (" 3e-4", 3e-4)
    assert parse_override("name=")[1].value == ""


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("policy.params.lr", "'policy.params.lr' is not KEY=VALUE"),
        ("=3", "'=3' is not KEY=VALUE"),
        ("policy..lr=1", "bad key segment ''"),
        ("policy.l r=1", "bad key segment 'l r'"),
        ("env[3].num_envs=2", "'env[3].num_envs=2': index 3 is out of range (2 items)"),
        ("seed[0]=1", "'seed[0]=1': seed is not a list"),
        ("seed.value=1", "'seed.value=1': seed is not a mapping"),
        ("env.num_envs=2", "env is a list; address an item, e.g. env[0].num_envs"),
    ],
)
def test_bad_overrides_are_reported(override, message):
    data = {"env": [{"type": "a"}, {"type": "b"}], "policy": {"type": "p"}, "seed": 1}
    problems = apply_overrides(data, [override])
    assert len(problems) == 1
    assert message in problems[0]


def test_bad_overrides_are_all_reported_and_name_the_file(registry):
    with pytest.raises(ConfigError) as exc_info:
        load_config(GOOD, ["policy.params.lr", "env[7].num_envs=1", "seed.x=1"], registry=registry)
    assert len(problems_of(exc_info)) == 3
    assert str(GOOD) in str(exc_info.value)


# ---------------------------------------------------------------------------------------------- errors


def test_all_problems_are_reported_at_once(registry):
    data = {
        "env": [{"type": "dummy-env", "num_envs": 0}, {"type": "dummy-env", "params": {"size": "big"}}],
        "policy": {"type": "dummy-policy", "params": {"lr": "abc", "gama": 0.9}},
        "engine": {"type": "dummy-engine", "total_steps": -5},
        "cluster": {"mode": "cloud"},
        "seed": True,
    }
    with pytest.raises(ConfigError) as exc_info:
        load_config_dict(data, registry=registry, source="exp.yaml")
    problems = problems_of(exc_info)
    for line in [
        "env[0].num_envs: must be >= 1, got 0",
        "engine.total_steps: must be >= 1, got -5",
        "cluster.mode: must be one of 'local', 'ray'; got 'cloud'",
        "seed: expected int, got True",
    ]:
        assert line in problems
    message = str(exc_info.value)
    assert message.startswith(f"invalid configuration in exp.yaml ({len(problems)} problems):")
    assert isinstance(exc_info.value, UserError)

    # With the core schema valid, every plugin-params problem is reported at once too.
    fixed = {**data, "env": [{"type": "dummy-env"}, data["env"][1]], "engine": {"type": "dummy-engine"},
             "cluster": {}, "seed": 1}
    with pytest.raises(ConfigError) as exc_info:
        load_config_dict(fixed, registry=registry)
    assert problems_of(exc_info) == [
        "env[1].params.size: expected int, got 'big'",
        "policy.params.gama: unknown key (did you mean 'gamma'?); "
        "allowed keys: lr, gamma, hidden, activation",
        "policy.params.lr: expected float, got 'abc'",
    ]


@pytest.mark.parametrize(
    ("data", "line"),
    [
        ({"engin": {}}, "engin: unknown key (did you mean 'engine'?)"),
        ({"cluster": {"num_cpu": 2}}, "cluster.num_cpu: unknown key (did you mean 'num_cpus'?)"),
        ({"env": {"type": "dummy-env", "num_env": 2}},
         "env[0].num_env: unknown key (did you mean 'num_envs'?)"),
        ({"policy": {"type": "dummy-policy", "params": {"lrr": 1.0}}},
         "policy.params.lrr: unknown key (did you mean 'lr'?)"),
        ({"logging": {"loggers": [{"type": "jsonl", "params": {"file": "x"}}]}},
         "logging.loggers[0].params.file: unknown key (did you mean 'filename'?)"),
        ({"zzz": 1}, "zzz: unknown key; allowed keys: env, policy"),
    ],
)
def test_unknown_keys_suggest_the_closest(registry, data, line):
    with pytest.raises(ConfigError) as exc_info:
        load_config_dict({**MINIMAL, **data}, registry=registry)
    assert any(p.startswith(line) for p in problems_of(exc_info)), problems_of(exc_info)


@pytest.mark.parametrize(
    ("data", "line"),
    [
        ({"policy": {"type": "dummy-policy", "params": {"lr": "0.1"}}},
         "policy.params.lr: expected float, got '0.1'"),
        ({"cluster": {"dashboard": "yes"}}, "cluster.dashboard: expected bool (true or false), got 'yes'"),
        ({"cluster": {"dashboard": 1}}, "cluster.dashboard: expected bool (true or false), got 1"),
        ({"engine": {"type": "dummy-engine", "total_steps": 1.5}},
         "engine.total_steps: expected int, got 1.5"),
        ({"run_dir": 123}, "run_dir: expected str, got 123"),
        ({"env": "CartPole"}, "env: expected a list, got 'CartPole'"),
        ({"logging": {"loggers": {"type": "jsonl"}}}, "logging.loggers: expected a list, got a mapping"),
        ({"policy": {"type": "dummy-policy", "params": {"hidden": "64"}}},
         "policy.params.hidden: expected a list, got '64'"),
        ({"policy": "dummy-policy"}, "policy: expected a mapping, got 'dummy-policy'"),
        ({"policy": {"params": {}}}, "policy.type: required key is missing"),
        ({"policy": {"type": "dummy-policy", "params": [1]}}, "policy.params: expected a mapping, got [1]"),
        ({"engine": {"params": {"x": 1}, "type": "dummy-engine"}},
         "engine.params: engine 'dummy-engine' takes no params, got x"),
        ({"policy": {"type": "dummy-policy", "device": "gpu"}}, "policy.device: must be 'auto', 'cpu'"),
        ({"policy": {"type": "dummy-policy", "params": {"gamma": 1.5}}},
         "policy.params.gamma: must be between 0 and 1, got 1.5"),
    ],
)
def test_values_are_checked_strictly(registry, data, line):
    with pytest.raises(ConfigError) as exc_info:
        load_config_dict({**MINIMAL, **data}, registry=registry)
    assert any(p.startswith(line) for p in problems_of(exc_info)), problems_of(exc_info)


def test_missing_sections_are_reported_together():
    with pytest.raises(ConfigError) as exc_info:
        load_config_dict({}, resolve=False)
    assert problems_of(exc_info) == ["env: required key is missing", "policy: required key is missing"]


def test_component_names_resolve_through_the_registry(registry):
    data = {**MINIMAL, "env": [{"type": "dumy-env"}, {"type": "shared-env"}],
            "logging": {"loggers": [{"type": "jsnl"}]}}
    with pytest.raises(ConfigError) as exc_info:
        load_config_dict(data, registry=registry)
    problems = problems_of(exc_info)
    assert len(problems) == 3
    assert problems[0].startswith("env[0].type: unknown env 'dumy-env'. Did you mean 'dummy-env'?")
    assert problems[1].startswith("env[1].type: env 'shared-env' is provided by more than one")
    assert "'rlightning-test-dummy:shared-env' or 'rlightning-test-twin:shared-env'" in problems[1]
    assert problems[2].startswith("logging.loggers[0].type: unknown logger 'jsnl'. Did you mean 'jsonl'?")

    cfg = load_config_dict({**data, "env": {"type": "rlightning-test-dummy:shared-env"},
                            "logging": {}}, registry=registry)
    assert cfg.env[0].type == "rlightning-test-dummy:shared-env"


def test_component_error_mentions_broken_plugins(make_plugin_dist):
    from rlightning_core.plugins import load_plugins

    make_plugin_dist("rlt-broken-policies", "0.2", "rlt_broken_policies", "raise ImportError('needs jax')")
    ps = load_plugins(allow=["rlt-broken-policies"])
    with pytest.raises(ConfigError) as exc_info:
        load_config_dict({"env": {"type": "e"}, "policy": {"type": "ppo"}}, registry=ps.registry)
    assert "rlt-broken-policies" in str(exc_info.value)
    assert "needs jax" in str(exc_info.value)


def test_load_config_uses_the_process_plugins_by_default(dummy_dists, monkeypatch):
    monkeypatch.setenv("RLIGHTNING_LOAD_PLUGINS", ",".join(dummy_dists))
    assert load_config(GOOD).policy.params.lr == 3e-4
    monkeypatch.setenv("RLIGHTNING_DISABLE_PLUGINS", "rlightning-test-twin")
    assert load_config(GOOD).seed == 7  # the plugin set is loaded once per process, then cached


# ---------------------------------------------------------------------------------------------- files


@pytest.mark.parametrize(
    ("filename", "content", "message"),
    [
        ("list.yaml", "- env\n- policy\n", "the top level must be a mapping of sections, got list"),
        ("scalar.yaml", "just text\n", "the top level must be a mapping of sections, got str"),
        ("bad.yaml", "env: [unclosed\n", "malformed YAML: line 2, column 1:"),
        ("tabs.yml", "env:\n\t- type: x\n", "malformed YAML: line 2"),
        ("bad.toml", "[env\n", "malformed TOML:"),
        ("bad.json", '{"env": }', "malformed JSON: line 1, column 9:"),
        ("list.json", "[1, 2]", "the top level must be a mapping of sections, got list"),
    ],
)
def test_unreadable_files_name_the_file(tmp_path, filename, content, message):
    path = tmp_path / filename
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as exc_info:
        read_config_file(path)
    assert exc_info.value.source == str(path)
    assert problems_of(exc_info)[0].startswith(message), problems_of(exc_info)
    assert str(path) in str(exc_info.value)


def test_missing_directory_and_binary_files(tmp_path):
    cases = {
        tmp_path / "nope.yaml": "file not found",
        tmp_path: "is a directory, expected a config file",
    }
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00env")
    cases[binary] = "cannot read the file:"
    for path, message in cases.items():
        with pytest.raises(ConfigError) as exc_info:
            read_config_file(path)
        assert problems_of(exc_info)[0].startswith(message)
        assert exc_info.value.source == str(path)


def test_empty_file_is_an_empty_config(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing yet\n", encoding="utf-8")
    assert read_config_file(path) == {}


def test_yaml_uses_yaml_1_2_scalars(tmp_path):
    path = tmp_path / "scalars.yaml"
    path.write_text("a: 3e-4\nb: yes\nc: on\nd: true\ne: 1_000\nf: .inf\n", encoding="utf-8")
    data = read_config_file(path)
    assert data["a"] == 3e-4
    assert (data["b"], data["c"], data["d"]) == ("yes", "on", True)
    assert data["f"] == float("inf")


def test_json_and_yaml_of_the_same_dict_agree(tmp_path):
    data = {**MINIMAL, "engine": {"type": "dummy-engine", "total_steps": 500}, "seed": 3}
    (tmp_path / "c.json").write_text(json.dumps(data), encoding="utf-8")
    (tmp_path / "c.yaml").write_text(json.dumps(data), encoding="utf-8")  # JSON is YAML
    assert load_config(tmp_path / "c.json", resolve=False) == load_config(tmp_path / "c.yaml", resolve=False)
