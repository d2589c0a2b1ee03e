"""Overrides whose value is a mapping or a list, and their order with dotted overrides below them."""

from __future__ import annotations

import sys

import pytest

from rlightning_core.config import config_to_yaml, load_config_dict
from rlightning_core.errors import ConfigError

MINIMAL = {"env": {"type": "dummy-env", "params": {"id": "File-v0", "size": 9}},
           "policy": {"type": "dummy-policy", "params": {"lr": 0.5, "gamma": 0.5, "hidden": [8]}},
           "buffer": {"type": "dummy-buffer"}, "engine": {"type": "dummy-engine"}}


@pytest.fixture
def registry(dummy_plugins):
    assert dummy_plugins.errors() == []
    return dummy_plugins.registry


def params_cls(name: str) -> type:
    return getattr(sys.modules["rlightning_test_dummy"], name)


def test_a_mapping_override_replaces_params_and_is_structured(registry):
    cfg = load_config_dict(MINIMAL, ["policy.params={lr: 0.1}"], registry=registry)
    assert cfg.policy.params == params_cls("DummyPolicyParams")(lr=0.1)  # omitted keys: defaults, not the file's
    assert "text:" not in config_to_yaml(cfg)


@pytest.mark.parametrize(("override", "line"), [
    ("policy.params={lrr: 0.1}", "policy.params.lrr: unknown key (did you mean 'lr'?)"),
    ("policy.params={lr: abc}", "policy.params.lr: expected float, got 'abc'"),
    ("policy.params={gamma: 2}", "policy.params.gamma: must be between 0 and 1, got 2"),
    ("policy.params=[1, 2]", "policy.params: expected a mapping, got [1, 2]"),
    ("env.params={size: 0}", "env[0].params.size: must be >= 1, got 0"),
    ("buffer.params={capacityy: 3}", "buffer.params.capacityy: unknown key (did you mean 'capacity'?)"),
])
def test_a_mapping_override_is_validated_like_the_file(registry, override, line):
    with pytest.raises(ConfigError) as info:
        load_config_dict(MINIMAL, [override], registry=registry)
    assert any(p.startswith(line) for p in info.value.problems), info.value.problems


def test_values_inside_a_mapping_override_are_typed_as_in_the_file(registry):
    """`{id: 123}` gives the str field an int, exactly as `id: 123` in the file would: refused."""
    with pytest.raises(ConfigError) as info:
        load_config_dict(MINIMAL, ["env.params={id: 123}"], registry=registry)
    assert info.value.problems == ["env[0].params.id: expected str, got 123"]
    with pytest.raises(ConfigError) as file_info:
        load_config_dict({**MINIMAL, "env": {"type": "dummy-env", "params": {"id": 123}}}, registry=registry)
    assert file_info.value.problems == info.value.problems


def test_dotted_overrides_after_a_replacement_change_the_new_mapping(registry):
    cfg = load_config_dict(MINIMAL, ["policy.params={lr: 0.1}", "policy.params.gamma=0.9"], registry=registry)
    assert (cfg.policy.params.lr, cfg.policy.params.gamma, cfg.policy.params.hidden) == (0.1, 0.9, [64, 64])
    # the other order: the replacement comes last and drops the earlier change (gamma is back to its default)
    cfg = load_config_dict(MINIMAL, ["policy.params.gamma=0.9", "policy.params={lr: 0.1}"], registry=registry)
    assert (cfg.policy.params.lr, cfg.policy.params.gamma) == (0.1, 0.99)


def test_a_dotted_override_below_a_replacement_is_typed_by_the_schema(registry):
    cfg = load_config_dict(MINIMAL, ["env.params={size: 3}", "env.params.id=123"], registry=registry)
    assert (cfg.env[0].params.id, cfg.env[0].params.size) == ("123", 3)


def test_null_params_then_a_dotted_key(registry):
    cfg = load_config_dict(MINIMAL, ["policy.params=null", "policy.params.lr=0.2"], registry=registry)
    assert cfg.policy.params == params_cls("DummyPolicyParams")(lr=0.2)
    assert load_config_dict(MINIMAL, ["policy.params=null"], registry=registry).policy.params == \
        params_cls("DummyPolicyParams")()


def test_list_overrides_replace_lists_and_items_can_be_addressed_after(registry):
    cfg = load_config_dict(MINIMAL, ["policy.params.hidden=[16, 32]", "policy.params.hidden[1]=4"],
                           registry=registry)
    assert cfg.policy.params.hidden == [16, 4]
    cfg = load_config_dict(MINIMAL, ["env=[{type: dummy-env}, {type: dummy-env, params: {size: 2}}]",
                                     "env[1].num_envs=3"], registry=registry)
    assert [e.params.size for e in cfg.env] == [5, 2]
    assert [e.num_envs for e in cfg.env] == [1, 3]
    with pytest.raises(ConfigError) as info:
        load_config_dict(MINIMAL, ["policy.params.hidden=[16, x]"], registry=registry)
    assert info.value.problems == ["policy.params.hidden[1]: expected int, got 'x'"]


def test_a_whole_env_mapping_override_becomes_the_one_env(registry):
    cfg = load_config_dict(MINIMAL, ["env={type: dummy-env, params: {size: 4}}", "env.num_envs=2"],
                           registry=registry)
    assert len(cfg.env) == 1 and cfg.env[0].params.size == 4 and cfg.env[0].num_envs == 2


def test_an_override_of_a_section_replaces_it(registry):
    cfg = load_config_dict({**MINIMAL, "cluster": {"max_restarts": 7, "num_cpus": 2}},
                           ["cluster={num_cpus: 4}"], registry=registry)
    assert (cfg.cluster.num_cpus, cfg.cluster.max_restarts) == (4, 3)
    with pytest.raises(ConfigError) as info:
        load_config_dict(MINIMAL, ["cluster={mod: ray}"], registry=registry)
    assert info.value.problems[0].startswith("cluster.mod: unknown key (did you mean 'mode'?)")


def test_a_mapping_override_does_not_alias_between_uses(registry):
    """Two configs from the same override list: each gets its own data."""
    overrides = ["policy.params={hidden: [3]}"]
    a = load_config_dict(MINIMAL, overrides, registry=registry)
    b = load_config_dict(MINIMAL, [*overrides, "policy.params.hidden[0]=5"], registry=registry)
    assert (a.policy.params.hidden, b.policy.params.hidden) == ([3], [5])
