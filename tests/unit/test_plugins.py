"""The plugin manager against real installed distributions: discovery, broken plugins, API ranges,
selection."""

from __future__ import annotations

import importlib.metadata
import sys
import types

import pytest

import rlightning_core
from rlightning_core import hookimpl
from rlightning_core.errors import DuplicateComponentError, PluginLoadError, UnknownComponentError
from rlightning_core.plugins import PluginInfo, get_plugins, load_plugins, reset_plugins


def env_plugin(*names: str, api: str | None = ">=2,<3", header: str = "") -> str:
    """Source of a plugin module registering one env per name (factories return the name)."""
    api_line = f"RLIGHTNING_PLUGIN_API = {api!r}" if api is not None else ""
    lines = "\n".join(
        f"    register({n!r}, lambda **kw: {n!r}, description='env {n}')" for n in names
    ) or "    pass"
    return f"""
{header}
from rlightning_core import hookimpl
{api_line}

@hookimpl
def register_envs(register):
{lines}
"""


def external_envs(plugin_set) -> list[str]:
    """Env names registered by plugins other than core's builtin one."""
    return sorted({s.name for s in plugin_set.registry.specs("env") if s.distribution != "rlightning"})


def info(plugin_set, name: str) -> PluginInfo:
    matches = [p for p in plugin_set.plugins if p.name == name]
    assert len(matches) == 1, [p.name for p in plugin_set.plugins]
    return matches[0]


# ---------------------------------------------------------------------------------------------- discovery


def test_discovers_an_installed_distribution(make_plugin_dist):
    make_plugin_dist("rlt-alpha", "2.3.1", "rlt_alpha", env_plugin("alpha-env"), entry_name="alpha")
    # importlib.metadata itself sees the distribution: nothing is mocked.
    assert importlib.metadata.version("rlt-alpha") == "2.3.1"

    ps = load_plugins()  # no allowlist: every installed plugin, as a user's process would load them

    assert ps.plugins[0].name == "builtin"
    assert ps.plugins[0].distribution == "rlightning"
    alpha = info(ps, "alpha")
    assert alpha.distribution == "rlt-alpha"
    assert alpha.version == "2.3.1"
    assert alpha.entry_point == "rlt_alpha"
    assert alpha.status == "loaded"
    assert alpha.error is None
    assert alpha.api == ">=2,<3"
    assert alpha.hooks == ["register_envs"]
    assert alpha.provides == {"env": ["alpha-env"]}

    spec = ps.registry.resolve("env", "alpha-env")
    assert (spec.distribution, spec.version, spec.plugin) == ("rlt-alpha", "2.3.1", "alpha")
    assert spec.qualified_name == "rlt-alpha:alpha-env"
    assert spec.description == "env alpha-env"
    assert spec.build() == "alpha-env"
    assert "alpha-env" in ps.registry.names("env")
    assert ps.pm.get_plugin("alpha") is sys.modules["rlt_alpha"]


def test_plugin_row_is_json_ready(make_plugin_dist):
    make_plugin_dist("rlt-alpha", "1.0", "rlt_alpha_json", env_plugin("alpha-env"))
    row = info(load_plugins(allow=["rlt-alpha"]), "rlt-alpha").to_json()
    assert set(row) == {"name", "distribution", "version", "entry_point", "status", "error", "warnings", "api",
                        "hooks", "provides"}
    assert row["provides"] == {"env": ["alpha-env"]}


def test_same_distribution_visible_twice_is_listed_once(make_plugin_dist):
    for _ in range(2):
        make_plugin_dist("rlt-echo", "1.0", "rlt_echo", env_plugin("echo-env"))
    ps = load_plugins(allow=["rlt-echo"])
    assert [p.name for p in ps.plugins].count("rlt-echo") == 1
    assert ps.registry.resolve("env", "echo-env").distribution == "rlt-echo"


def test_description_defaults_to_the_factory_docstring(make_plugin_dist):
    source = '''
    from rlightning_core import hookimpl

    def make(**kwargs):
        """Builds the documented env.

        More detail that is not part of the one-line description.
        """

    @hookimpl
    def register_envs(register):
        register("documented", make)
    '''
    make_plugin_dist("rlt-doc", "1.0", "rlt_doc", source)
    ps = load_plugins(allow=["rlt-doc"])
    assert ps.registry.resolve("env", "documented").description == "Builds the documented env."


def test_plugin_without_api_declaration_loads_with_a_warning(make_plugin_dist):
    make_plugin_dist("rlt-noapi", "1.0", "rlt_noapi", env_plugin("noapi-env", api=None))
    ps = load_plugins(allow=["rlt-noapi"])
    noapi = info(ps, "rlt-noapi")
    assert noapi.status == "warning" and noapi.loaded
    assert noapi.api is None
    assert noapi.warnings == ["declares no RLIGHTNING_PLUGIN_API, so rlightning cannot tell which plugin API it "
                              'was written for (add RLIGHTNING_PLUGIN_API = ">=2,<3" to module rlt_noapi)']
    assert ps.registry.resolve("env", "noapi-env").distribution == "rlt-noapi"  # its components still load
    assert "rlt-noapi" in ps.selection()


def test_extra_plugins_register_like_entry_points():
    class Inline:
        @hookimpl
        def register_loggers(self, register):
            register("inline-logger", lambda **kw: "inline")

    ps = load_plugins(allow=[], extra=[("inline", Inline())])
    assert info(ps, "inline").provides == {"logger": ["inline-logger"]}
    assert ps.registry.resolve("logger", "inline-logger").distribution == "inline"
    assert ps.registry.resolve("logger", "inline:inline-logger").plugin == "inline"


# ------------------------------------------------------------------------------------------ broken plugins


def test_plugin_failing_on_import_is_recorded_and_others_load(make_plugin_dist):
    make_plugin_dist("rlt-good", "1.0", "rlt_good", env_plugin("good-env"))
    make_plugin_dist("rlt-noimport", "0.4", "rlt_noimport",
                     env_plugin("never-env", header="import rlt_missing_dependency_xyz"))
    make_plugin_dist("rlt-multiline", "0.5", "rlt_multiline",
                     env_plugin("never-env2", header="raise RuntimeError('first line\\nsecond line')"))
    make_plugin_dist("rlt-exits", "0.6", "rlt_exits", env_plugin("never-env3", header="raise SystemExit(3)"))

    ps = load_plugins(allow=["rlt-good", "rlt-noimport", "rlt-multiline", "rlt-exits"])

    broken = info(ps, "rlt-noimport")
    assert (broken.status, broken.distribution, broken.version, broken.entry_point) == (
        "error", "rlt-noimport", "0.4", "rlt_noimport")
    assert broken.error.startswith("import failed: ModuleNotFoundError:")
    assert "rlt_missing_dependency_xyz" in broken.error
    assert info(ps, "rlt-multiline").error == "import failed: RuntimeError: first line"
    assert info(ps, "rlt-exits").error == "import failed: SystemExit: 3"
    for p in ps.errors():
        assert "\n" not in p.error
    assert {p.name for p in ps.errors()} == {"rlt-noimport", "rlt-multiline", "rlt-exits"}
    assert info(ps, "rlt-good").status == "loaded"
    assert ps.registry.resolve("env", "good-env").build() == "good-env"
    assert "never-env" not in ps.registry.names("env")


def test_registration_hook_raising_breaks_only_that_plugin(make_plugin_dist):
    source = """
    from rlightning_core import hookimpl

    @hookimpl
    def register_policies(register):
        raise RuntimeError("policy table missing\\nmore detail")

    @hookimpl
    def on_metrics(step, metrics):
        raise AssertionError("a broken plugin must not observe anything")
    """
    make_plugin_dist("rlt-good", "1.0", "rlt_good2", env_plugin("good-env"))
    make_plugin_dist("rlt-badhook", "1.1", "rlt_badhook", source)

    ps = load_plugins(allow=["rlt-good", "rlt-badhook"])

    bad = info(ps, "rlt-badhook")
    assert bad.status == "error"
    assert bad.error == "registration failed: RuntimeError: policy table missing"
    assert bad.provides == {}
    assert ps.pm.get_plugin("rlt-badhook") is None  # unregistered: its other hooks are never called
    ps.call_each("on_metrics", step=1, metrics={})
    assert ps.registry.resolve("env", "good-env").plugin == "rlt-good"


def test_registration_is_all_or_nothing(make_plugin_dist):
    source = """
    from rlightning_core import hookimpl

    @hookimpl
    def register_envs(register):
        register("half-env", lambda **kw: None)

    @hookimpl
    def register_policies(register):
        register("half-policy", lambda **kw: None)
        raise ValueError("second hook fails")
    """
    make_plugin_dist("rlt-half", "1.0", "rlt_half", source)
    ps = load_plugins(allow=["rlt-half"])
    half = info(ps, "rlt-half")
    assert half.status == "error"
    assert "second hook fails" in half.error
    assert "half-env" not in ps.registry.names("env")
    assert "half-policy" not in ps.registry.names("policy")
    assert half.provides == {}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('register("bad:name", lambda **kw: None)', "':' is reserved"),
        ('register("", lambda **kw: None)', "non-empty string"),
        ('register("not-callable", 42)', "factory must be callable"),
        ('register("plain-config", lambda **kw: None, config=dict)', "config must be an attrs class"),
        ('register("twice", lambda **kw: None)\n        register("twice", lambda **kw: None)',
         "registered twice"),
        ('register("with-rollout", lambda **kw: None, rollout=lambda **kw: None)',
         "unexpected keyword argument 'rollout'"),
    ],
    ids=["colon", "empty", "not-callable", "non-attrs-config", "twice", "removed-rollout-keyword"],
)
def test_invalid_registration_breaks_the_plugin(make_plugin_dist, body, expected):
    source = f"""
    from rlightning_core import hookimpl

    @hookimpl
    def register_envs(register):
        register("valid-first", lambda **kw: None)
        {body}
    """
    make_plugin_dist("rlt-invalid", "1.0", "rlt_invalid", source)
    ps = load_plugins(allow=["rlt-invalid"])
    bad = info(ps, "rlt-invalid")
    assert bad.status == "error"
    assert bad.error.startswith("registration failed:")
    assert expected in bad.error
    assert "valid-first" not in ps.registry.names("env")


def test_unknown_hook_name_is_an_error_with_a_suggestion(make_plugin_dist):
    source = """
    from rlightning_core import hookimpl

    @hookimpl
    def register_env(register):
        register("typo-env", lambda **kw: None)
    """
    make_plugin_dist("rlt-typo", "1.0", "rlt_typo", source)
    make_plugin_dist("rlt-good", "1.0", "rlt_good3", env_plugin("good-env"))
    ps = load_plugins(allow=["rlt-typo", "rlt-good"])
    typo = info(ps, "rlt-typo")
    assert typo.status == "error"
    assert "unknown hooks" in typo.error
    assert "'register_env'" in typo.error
    assert "did you mean 'register_envs'?" in typo.error
    assert "typo-env" not in ps.registry.names("env")
    assert info(ps, "rlt-good").status == "loaded"


def test_hook_argument_not_in_the_spec_is_an_error(make_plugin_dist):
    source = """
    from rlightning_core import hookimpl

    @hookimpl
    def on_metrics(step, metricz):
        pass
    """
    make_plugin_dist("rlt-badargs", "1.0", "rlt_badargs", source)
    ps = load_plugins(allow=["rlt-badargs"])
    bad = info(ps, "rlt-badargs")
    assert bad.status == "error"
    assert "metricz" in bad.error
    assert "\n" not in bad.error


# ---------------------------------------------------------------------------------------- plugin API range


def test_a_plugin_written_for_plugin_api_1_is_refused_with_what_to_do(make_plugin_dist):
    # API 2 renamed PolicyRole's members and took engine.runners / engine.buffer away (the execution contract):
    # a plugin written for API 1 would fail mid-run, so it is refused at load time instead
    make_plugin_dist("rlt-old", "0.3", "rlt_old", env_plugin("old-env", api=">=1,<2"))
    ps = load_plugins(allow=["rlt-old"])
    old = info(ps, "rlt-old")
    assert old.status == "incompatible"
    assert old.error == ("written for plugin API >=1,<2, this core provides 2.0 "
                         f"(rlightning {rlightning_core.__version__}); upgrade the plugin or rlightning")
    assert "old-env" not in ps.registry.names("env")


def test_incompatible_plugin_api_is_listed_and_not_loaded(make_plugin_dist):
    source = env_plugin("future-env", api=">=3,<4") + """
@hookimpl
def on_metrics(step, metrics):
    raise AssertionError("an incompatible plugin must not be called")
"""
    make_plugin_dist("rlt-future", "9.0", "rlt_future", source)
    ps = load_plugins(allow=["rlt-future"])
    future = info(ps, "rlt-future")
    assert future.status == "incompatible"
    assert future.api == ">=3,<4"
    assert ">=3,<4" in future.error
    assert "2.0" in future.error  # the API this core provides
    assert future.provides == {}
    assert future.hooks == []
    assert ps.pm.get_plugin("rlt-future") is None
    assert "future-env" not in ps.registry.names("env")
    assert ps.errors() == [future]
    ps.call_each("on_metrics", step=0, metrics={})


def test_plugin_api_that_is_not_a_range_is_an_error(make_plugin_dist):
    make_plugin_dist("rlt-api-typo", "1.0", "rlt_api_typo", env_plugin("x-env", api="version one"))
    ps = load_plugins(allow=["rlt-api-typo"])
    bad = info(ps, "rlt-api-typo")
    assert bad.status == "error"
    assert "'version one' is not a version range" in bad.error


# ---------------------------------------------------------------------------------------------- names


def test_duplicate_names_from_two_distributions(make_plugin_dist):
    make_plugin_dist("rlt-dup-a", "1.0", "rlt_dup_a", env_plugin("twin-env", "only-a"), entry_name="dupa")
    make_plugin_dist("rlt-dup-b", "2.0", "rlt_dup_b", env_plugin("twin-env"), entry_name="dupb")
    ps = load_plugins(allow=["rlt-dup-a", "rlt-dup-b"])

    # Both load: the ambiguity is only an error when someone asks for the bare name.
    assert info(ps, "dupa").status == info(ps, "dupb").status == "loaded"
    with pytest.raises(DuplicateComponentError) as exc_info:
        ps.registry.resolve("env", "twin-env")
    message = str(exc_info.value)
    assert "rlt-dup-a 1.0" in message
    assert "rlt-dup-b 2.0" in message
    assert "'rlt-dup-a:twin-env'" in message
    assert "'rlt-dup-b:twin-env'" in message
    assert (exc_info.value.kind, exc_info.value.name) == ("env", "twin-env")

    assert ps.registry.resolve("env", "rlt-dup-a:twin-env").build() == "twin-env"
    assert ps.registry.resolve("env", "rlt-dup-a:twin-env").distribution == "rlt-dup-a"
    assert ps.registry.resolve("env", "rlt-dup-b:twin-env").distribution == "rlt-dup-b"
    assert ps.registry.resolve("env", "RLT_Dup_B:twin-env").distribution == "rlt-dup-b"  # PEP 503 spelling
    assert ps.registry.resolve("env", "dupb:twin-env").distribution == "rlt-dup-b"  # entry-point name
    assert ps.registry.resolve("env", "only-a").distribution == "rlt-dup-a"
    with pytest.raises(UnknownComponentError, match="distribution or plugin 'rlt-dup-c'"):
        ps.registry.resolve("env", "rlt-dup-c:twin-env")


def test_unknown_name_lists_names_closest_match_and_broken_plugins(make_plugin_dist):
    make_plugin_dist("rlt-grid", "1.0", "rlt_grid", env_plugin("gridworld", "cartpole"))
    make_plugin_dist("rlt-broken-envs", "0.3", "rlt_broken_envs",
                     env_plugin("mujoco", header="import rlt_no_such_simulator"), entry_name="broken_envs")
    ps = load_plugins(allow=["rlt-grid", "rlt-broken-envs"])

    with pytest.raises(UnknownComponentError) as exc_info:
        ps.registry.resolve("env", "gridwrld")
    message = str(exc_info.value)
    assert "unknown env 'gridwrld'" in message
    assert "Did you mean 'gridworld'?" in message
    available = message.split("Available env names: ", 1)[1]
    assert "cartpole, " in available
    assert "gridworld" in available
    assert "broken_envs from rlt-broken-envs" in message
    assert "rlt_no_such_simulator" in message
    assert (exc_info.value.kind, exc_info.value.name) == ("env", "gridwrld")

    with pytest.raises(UnknownComponentError) as exc_info:
        ps.registry.resolve("policy", "ppo")
    assert "unknown policy 'ppo'" in str(exc_info.value)
    with pytest.raises(ValueError, match="unknown component kind 'envs'"):
        ps.registry.resolve("envs", "gridworld")


# ---------------------------------------------------------------------------------------------- selection


@pytest.fixture
def three_plugins(make_plugin_dist):
    make_plugin_dist("rlt-one", "1.0", "rlt_one", env_plugin("one-env"), entry_name="one")
    make_plugin_dist("rlt-two", "1.0", "rlt_two", env_plugin("two-env"), entry_name="two")
    make_plugin_dist("rlt-three", "1.0", "rlt_three", env_plugin("three-env", header="import rlt_nope"),
                     entry_name="three")
    return ["rlt-one", "rlt-two", "rlt-three"]


def test_allowlist_from_the_environment(three_plugins, monkeypatch):
    monkeypatch.setenv("RLIGHTNING_LOAD_PLUGINS", "rlt-one, two")  # a distribution and an entry-point name
    ps = load_plugins()
    assert info(ps, "one").status == "loaded"
    assert info(ps, "two").status == "loaded"
    three = info(ps, "three")
    assert (three.status, three.error) == ("disabled", None)
    assert "rlt_three" not in sys.modules  # a plugin that is not selected is never imported
    assert external_envs(ps) == ["one-env", "two-env"]


def test_allowlist_is_normalized_like_distribution_names(three_plugins):
    ps = load_plugins(allow=["RLT_ONE"])
    assert info(ps, "one").status == "loaded"
    assert info(ps, "two").status == "disabled"


def test_empty_allowlist_loads_no_external_plugin(three_plugins, monkeypatch):
    monkeypatch.setenv("RLIGHTNING_LOAD_PLUGINS", "")
    ps = load_plugins()
    assert info(ps, "builtin").status == "loaded"
    for name in ("one", "two", "three"):
        assert info(ps, name).status == "disabled"
    assert external_envs(ps) == []
    assert ps.selection() == []
    assert "jsonl" in ps.registry.names("logger")


def test_denylist_from_the_environment(three_plugins, monkeypatch):
    monkeypatch.setenv("RLIGHTNING_DISABLE_PLUGINS", "three,rlt-two")
    ps = load_plugins(allow=three_plugins)
    assert info(ps, "one").status == "loaded"
    assert info(ps, "two").status == "disabled"
    assert info(ps, "three").status == "disabled"
    assert ps.errors() == []
    assert "rlt_three" not in sys.modules
    assert external_envs(ps) == ["one-env"]


def test_get_plugins_reads_the_environment_once_and_caches(three_plugins, monkeypatch):
    monkeypatch.setenv("RLIGHTNING_LOAD_PLUGINS", "one")
    monkeypatch.setenv("RLIGHTNING_DISABLE_PLUGINS", "rlt-one")
    first = get_plugins()
    assert info(first, "one").status == "disabled"  # the denylist wins over the allowlist
    monkeypatch.setenv("RLIGHTNING_DISABLE_PLUGINS", "")
    assert get_plugins() is first
    reset_plugins()
    assert info(get_plugins(), "one").status == "loaded"
    reset_plugins(first)
    assert get_plugins() is first


def test_strict_mode_turns_load_errors_into_a_failure(three_plugins, monkeypatch):
    monkeypatch.setenv("RLIGHTNING_STRICT_PLUGINS", "1")
    with pytest.raises(PluginLoadError) as exc_info:
        load_plugins(allow=three_plugins)
    message = str(exc_info.value)
    assert "RLIGHTNING_STRICT_PLUGINS=1" in message
    assert "three (rlt-three 1.0): import failed: ModuleNotFoundError" in message
    assert "rlt_nope" in message

    # Healthy plugins pass strict mode; an explicit argument overrides the variable.
    assert info(load_plugins(allow=["one", "two"]), "one").status == "loaded"
    assert info(load_plugins(allow=three_plugins, strict=False), "three").status == "error"
    with pytest.raises(PluginLoadError):
        get_plugins()


def test_strict_mode_counts_incompatible_plugins(make_plugin_dist):
    make_plugin_dist("rlt-future", "9.0", "rlt_future2", env_plugin("future-env", api=">=3"))
    with pytest.raises(PluginLoadError, match=r"rlt-future 9\.0"):
        load_plugins(allow=["rlt-future"], strict=True)


def test_selection_names_the_external_plugins_that_loaded(three_plugins):
    ps = load_plugins(allow=three_plugins)
    assert ps.selection() == ["one", "two"]  # not builtin, not the broken one
    assert [p.name for p in ps.errors()] == ["three"]

    again = load_plugins(allow=ps.selection())
    assert again.selection() == ps.selection()
    assert again.registry.names("env") == ps.registry.names("env")
    assert info(again, "three").status == "disabled"


def test_plugin_objects_are_reachable_by_name(three_plugins):
    from rlightning_core.plugins import plugin_module

    ps = load_plugins(allow=three_plugins)
    assert isinstance(plugin_module(ps, "one"), types.ModuleType)
    assert plugin_module(ps, "three") is None
    assert ps.hook is ps.pm.hook


# ------------------------------------------------------------------------------ diagnostics for plugin authors


BAD_SIGNATURES = '''
from attrs import define

from rlightning_core import hookimpl

RLIGHTNING_PLUGIN_API = ">=2,<3"


@define(frozen=True)
class Params:
    size: int = 3


def make_bad(params, *, seed, worker_index=0):
    return None


@hookimpl
def register_envs(register):
    register("bad-env", make_bad, config=Params)
'''

LOGGER_WITHOUT_CONFIG = '''
from rlightning_core import hookimpl

RLIGHTNING_PLUGIN_API = ">=2,<3"


class TsvLogger:
    def __init__(self, params, *, run_dir):
        self.run_dir = run_dir

    def log(self, step, metrics):
        pass

    def close(self):
        pass


@hookimpl
def register_loggers(register):
    register("tsv", TsvLogger)
'''


def test_a_factory_the_core_cannot_call_is_a_load_error_naming_the_plugin(make_plugin_dist):
    make_plugin_dist("rlt-badsig", "1.0", "rlt_badsig", BAD_SIGNATURES)
    make_plugin_dist("rlt-good", "1.0", "rlt_good_sig", env_plugin("good-env"))
    ps = load_plugins(allow=["rlt-badsig", "rlt-good"])
    bad = info(ps, "rlt-badsig")
    assert bad.status == "error"
    assert bad.error == (
        "registration failed: TypeError: env 'bad-env': factory make_bad(params, *, seed, worker_index=0) cannot "
        "be called the way the core calls env factories, factory(params, *, num_envs, seed, worker_index): got an "
        "unexpected keyword argument 'num_envs'")
    assert "bad-env" not in ps.registry.names("env")
    assert info(ps, "rlt-good").status == "loaded"  # the other plugins still load
    with pytest.raises(UnknownComponentError, match=r"Plugins that failed to load and might provide it: rlt-badsig "
                                                    r"from rlt-badsig \(registration failed: TypeError: env "
                                                    r"'bad-env': factory make_bad"):
        ps.registry.resolve("env", "bad-env")


def test_a_logger_without_config_whose_factory_takes_params_is_a_load_error(make_plugin_dist):
    make_plugin_dist("rlt-tsv", "1.0", "rlt_tsv", LOGGER_WITHOUT_CONFIG)
    tsv = info(load_plugins(allow=["rlt-tsv"]), "rlt-tsv")
    assert tsv.status == "error"
    assert tsv.error == (
        "registration failed: TypeError: logger 'tsv': factory TsvLogger(params, *, run_dir) cannot be called the "
        "way the core calls logger factories, factory(*, run_dir): missing a required argument: 'params'; it is "
        "registered without config=, so it receives no params: pass config=ParamsClass to register(), or drop "
        "that argument")


def test_an_env_factory_without_render_mode_loads_with_a_warning(make_plugin_dist):
    source = env_plugin(header="def make(*, num_envs, seed, worker_index):\n    return None\n").replace(
        "    pass", "    register('novideo', make)")
    make_plugin_dist("rlt-novideo", "1.0", "rlt_novideo", source)
    ps = load_plugins(allow=["rlt-novideo"])
    novideo = info(ps, "rlt-novideo")
    assert (novideo.status, novideo.error) == ("warning", None)
    assert novideo.warnings == [
        "env 'novideo': factory make(*, num_envs, seed, worker_index) does not accept render_mode=, which the core "
        "passes to record episode videos: eval --video, logging.video_every"]
    assert ps.registry.resolve("env", "novideo").plugin == "rlt-novideo"


def test_a_plugin_with_no_hooks_loads_with_a_warning(make_plugin_dist):
    make_plugin_dist("rlt-empty", "1.0", "rlt_empty", 'RLIGHTNING_PLUGIN_API = ">=2,<3"\n')
    make_plugin_dist("rlt-undecorated", "1.0", "rlt_undecorated",
                     'RLIGHTNING_PLUGIN_API = ">=2,<3"\n\ndef register_envs(register):\n    pass\n')
    ps = load_plugins(allow=["rlt-empty", "rlt-undecorated"])
    empty, undecorated = info(ps, "rlt-empty"), info(ps, "rlt-undecorated")
    assert (empty.status, empty.hooks, empty.provides) == ("warning", [], {})
    assert empty.warnings == ["implements no hooks, so it provides nothing (decorate its hook functions with "
                              "@rlightning_core.hookimpl)"]
    assert undecorated.warnings == ["implements no hooks, so it provides nothing: register_envs lacks the "
                                    "@rlightning_core.hookimpl decorator"]
    assert ps.errors() == []  # warnings are not load errors: strict mode and exit codes ignore them
    load_plugins(allow=["rlt-empty"], strict=True)
