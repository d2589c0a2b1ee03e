"""The registry on its own: specs, name validation, resolution and its error messages."""

from __future__ import annotations

import attrs
import pytest

from rlightning_core.errors import DuplicateComponentError, UnknownComponentError, UserError
from rlightning_core.registry import ComponentSpec, Registry, check_factory, normalize_dist_name, validate_registration
from rlightning_core.types import HOOK_FOR_KIND, KINDS


@attrs.define(frozen=True, kw_only=True)
class Params:
    size: int = 3


def spec(kind="env", name="grid", dist="rlt-a", plugin=None, factory=None, config=None) -> ComponentSpec:
    return ComponentSpec(kind=kind, name=name, factory=factory or (lambda *a, **kw: (a, kw)), config=config,
                         description="", plugin=plugin or dist, distribution=dist, version="1.0")


def test_every_kind_has_a_registration_hook():
    assert set(HOOK_FOR_KIND) == set(KINDS)
    assert all(hook.startswith("register_") for hook in HOOK_FOR_KIND.values())


@pytest.mark.parametrize(("raw", "normalized"), [
    ("rlightning", "rlightning"), ("Rlightning_PPO", "rlightning-ppo"), ("a.b__c--d", "a-b-c-d"),
])
def test_normalize_dist_name(raw, normalized):
    assert normalize_dist_name(raw) == normalized


def test_names_and_specs_are_sorted_per_kind():
    reg = Registry()
    for kind, name in [("env", "b"), ("env", "a"), ("policy", "ppo"), ("logger", "csv")]:
        reg.add(spec(kind=kind, name=name))
    assert reg.names("env") == ["a", "b"]
    assert reg.names("buffer") == []
    assert [(s.kind, s.name) for s in reg.specs()] == [("env", "a"), ("env", "b"), ("policy", "ppo"),
                                                       ("logger", "csv")]
    assert [s.name for s in reg.specs("env")] == ["a", "b"]
    with pytest.raises(ValueError, match="kinds are env, policy"):
        reg.names("model")


def test_same_distribution_cannot_register_a_name_twice():
    reg = Registry()
    reg.add(spec(dist="rlt-a"))
    with pytest.raises(ValueError, match="registered twice by distribution 'rlt_A'"):
        reg.check(spec(dist="rlt_A"))
    with pytest.raises(ValueError):
        reg.add(spec(dist="rlt_A"))
    reg.add(spec(kind="policy"))  # the same name of another kind is a different component
    reg.add(spec(dist="rlt-b"))  # another distribution may: then the name must be qualified
    assert len(reg.specs("env")) == 2


def test_resolve_unique_qualified_and_duplicate():
    reg = Registry()
    a, b = spec(dist="rlt-a", plugin="alpha"), spec(dist="rlt-b")
    reg.add(a)
    assert reg.resolve("env", "grid") is a
    reg.add(b)
    with pytest.raises(DuplicateComponentError) as exc_info:
        reg.resolve("env", "grid")
    assert isinstance(exc_info.value, UserError)
    assert "rlt-a 1.0 (plugin 'alpha')" in str(exc_info.value)
    assert "rlt-b 1.0 (plugin 'rlt-b')" in str(exc_info.value)
    assert "'rlt-a:grid' or 'rlt-b:grid'" in str(exc_info.value)
    assert reg.resolve("env", "rlt-a:grid") is a
    assert reg.resolve("env", "alpha:grid") is a
    assert reg.resolve("env", "rlt-b:grid") is b


def test_unknown_names():
    reg = Registry()
    reg.add(spec(name="gridworld"))
    reg.add(spec(name="cartpole"))
    with pytest.raises(UnknownComponentError) as exc_info:
        reg.resolve("env", "cartpol")
    assert isinstance(exc_info.value, UserError)
    assert str(exc_info.value) == ("unknown env 'cartpol'. Did you mean 'cartpole'? "
                                   "Available env names: cartpole, gridworld.")
    with pytest.raises(UnknownComponentError, match=r"Available policy names: \(none registered\)\.$"):
        reg.resolve("policy", "ppo")
    with pytest.raises(UnknownComponentError, match=r"no env named 'grid' is provided by .* 'rlt-a'"):
        reg.resolve("env", "rlt-a:grid")
    with pytest.raises(UnknownComponentError, match="must be a string, got 3"):
        reg.resolve("env", 3)  # type: ignore[arg-type]


def test_unknown_name_mentions_broken_plugins():
    reg = Registry()
    reg.broken = [("mujoco", "rlt-mujoco", "import failed: ModuleNotFoundError: No module named 'mujoco'")]
    with pytest.raises(UnknownComponentError) as exc_info:
        reg.resolve("env", "humanoid")
    assert ("Plugins that failed to load and might provide it: mujoco from rlt-mujoco "
            "(import failed: ModuleNotFoundError: No module named 'mujoco').") in str(exc_info.value)


def test_build_passes_params_only_to_components_with_a_config():
    with_config = spec(config=Params)
    assert with_config.build(Params(), seed=1) == ((Params(),), {"seed": 1})
    without = spec()
    assert without.build(seed=1) == ((), {"seed": 1})


@pytest.mark.parametrize(("args", "error", "match"), [
    (("a:b", print, None, ""), ValueError, "reserved"),
    (("-leading", print, None, ""), ValueError, "starts with a letter or digit"),
    ((None, print, None, ""), ValueError, "non-empty string"),
    (("ok", "print", None, ""), TypeError, "factory must be callable, got str"),
    (("ok", print, dict, ""), TypeError, "config must be an attrs class"),
    (("ok", print, Params(), ""), TypeError, "config must be an attrs class"),
    (("ok", print, None, 3), TypeError, "description must be a string"),
])
def test_validate_registration_rejects(args, error, match):
    with pytest.raises(error, match=match):
        validate_registration("env", *args)


@pytest.mark.parametrize("name", ["CartPole-v1", "ppo", "my_env.v2", "org/env", "0x"])
def test_validate_registration_accepts(name):
    assert validate_registration("env", name, lambda params, **kw: None, Params, "fine") == []


# -- factory signatures: the core's call of each kind must bind (FACTORY_CALLS) ----------------------------------


class GoodEnv:
    def __init__(self, params, *, num_envs, seed, worker_index=0, render_mode=None):
        pass


class NoSeedEnv:
    def __init__(self, params, *, num_envs, worker_index=0):
        pass


def env_no_num_envs(params, *, seed, worker_index=0):
    return None


def logger_wants_params(params, *, run_dir):
    return None


def policy_kwargs(params, **kwargs):
    return None


def buffer_positional(params, spec):
    return None


def no_positional(*, num_envs, seed, worker_index, render_mode=None):
    return None


@pytest.mark.parametrize(("kind", "factory", "config"), [
    ("env", GoodEnv, Params),  # a class is checked through its __init__
    ("env", no_positional, None),
    ("policy", policy_kwargs, Params),  # **kwargs takes whatever the core passes
    ("buffer", buffer_positional, Params),  # keywords bind positional-or-keyword parameters too
    ("logger", lambda *, run_dir: None, None),
    ("engine", lambda params, *, config, env_group, policy_group, buffer, plugins=None: None, Params),
    ("preprocessor", lambda params, *, observation_space, num_envs: None, Params),
])
def test_factories_the_core_can_call_pass(kind, factory, config):
    assert check_factory(kind, "ok", factory, config) == []


@pytest.mark.parametrize(("kind", "factory", "config", "message"), [
    ("env", env_no_num_envs, Params,
     "env 'bad': factory env_no_num_envs(params, *, seed, worker_index=0) cannot be called the way the core calls "
     "env factories, factory(params, *, num_envs, seed, worker_index): got an unexpected keyword argument "
     "'num_envs'"),
    ("env", NoSeedEnv, Params, "factory NoSeedEnv(params, *, num_envs, worker_index=0) cannot be called the way "
                               "the core calls env factories, factory(params, *, num_envs, seed, worker_index): got "
                               "an unexpected keyword argument 'seed'"),
    ("logger", logger_wants_params, None,
     "logger 'bad': factory logger_wants_params(params, *, run_dir) cannot be called the way the core calls logger "
     "factories, factory(*, run_dir): missing a required argument: 'params'; it is registered without config=, so "
     "it receives no params: pass config=ParamsClass to register(), or drop that argument"),
    ("env", no_positional, Params,
     "worker_index): too many positional arguments; it is registered with config=Params, so its first "
     "positional argument is the structured params"),
    ("policy", lambda params, *, observation_space, action_space, seed: None, Params,
     "factory(params, *, observation_space, action_space, role, device, seed): got an unexpected keyword "
     "argument 'role'"),
])
def test_factories_the_core_cannot_call_are_refused_in_one_line(kind, factory, config, message):
    with pytest.raises(TypeError) as info:
        check_factory(kind, "bad", factory, config)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_optional_keywords_the_factory_cannot_take_are_warnings():
    (warning,) = check_factory("env", "novideo", lambda params, *, num_envs, seed, worker_index: None, Params)
    assert warning.startswith("env 'novideo': factory <lambda>(params, *, num_envs, seed, worker_index) does not "
                              "accept render_mode=, which the core passes to record episode videos")


def test_callables_without_a_signature_are_not_checked():
    assert check_factory("env", "builtin-callable", dict, None) == []  # dict() has no introspectable signature
