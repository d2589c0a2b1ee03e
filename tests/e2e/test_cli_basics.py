"""The ``rlightning`` command as a user runs it: a subprocess of the installed console script, with test
plugin distributions on ``PYTHONPATH``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlightning_core import __version__
from rlightning_core.config import load_config

REPO = Path(__file__).resolve().parents[2]
GOOD = "tests/fixtures/configs/good.yaml"

COMMANDS_PLUGIN = '''
import click

from rlightning_core import hookimpl

RLIGHTNING_PLUGIN_API = ">=2,<3"


@hookimpl
def register_commands(cli):
    @cli.command("hello")
    @click.option("--name", default="world")
    def hello(name):
        """Say hello (added by a plugin)."""
        click.echo(f"hello, {name}, from a plugin")

    @cli.command("crash")
    def crash():
        """Fail the way a buggy plugin command does."""
        raise RuntimeError("plugin bug in crash")
'''

BROKEN_PLUGIN = '''
import rlt_cli_missing_dependency

from rlightning_core import hookimpl
'''

BAD_COMMANDS_PLUGIN = '''
from rlightning_core import hookimpl


@hookimpl
def register_commands(cli):
    raise RuntimeError("cannot add commands")
'''

# A heavy import at module top, which `list-plugins --check` reports. Ray is as real an offender as torch and
# imports several times faster, which keeps this test quick.
HEAVY_PLUGIN = '''
import torch

from rlightning_core import hookimpl

RLIGHTNING_PLUGIN_API = ">=2,<3"


@hookimpl
def register_envs(register):
    register("heavy-env", lambda **kw: torch.zeros(1))
'''

LIGHT_PLUGIN = '''
from rlightning_core import hookimpl

RLIGHTNING_PLUGIN_API = ">=2,<3"


@hookimpl
def register_envs(register):
    def make_light_env(**kw):
        import ray  # heavy imports belong inside factories

        return ray.is_initialized()

    register("light-env", make_light_env)
'''

HEAVY_IMPORT_PROBE = """
import sys
from rlightning_cli.main import main
code = 0
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
heavy = [m for m in ("torch", "ray") if m in sys.modules]
print("PROBE", code, ",".join(heavy) or "-", file=sys.stderr)
"""

PLUGIN_ROW_KEYS = {
    "name", "distribution", "version", "entry_point", "status", "error", "warnings", "api", "hooks", "provides",
}
COMPONENT_KEYS = {
    "kind", "name", "qualified_name", "plugin", "distribution", "version", "description", "config",
    "defaults", "docs",
}


@pytest.fixture(scope="module")
def site(plugin_site_factory):
    dists = plugin_site_factory("cli-site")
    dists.add_dummy_plugins()
    dists("rlt-cli-commands", "0.2", "rlt_cli_commands", COMMANDS_PLUGIN, entry_name="commands")
    dists("rlt-cli-broken", "0.1", "rlt_cli_broken", BROKEN_PLUGIN)
    dists("rlt-cli-badcmds", "0.1", "rlt_cli_badcmds", BAD_COMMANDS_PLUGIN)
    return dists


DEFAULT_ALLOW = ["rlightning-test-dummy", "rlightning-test-twin", "rlt-cli-commands", "rlt-cli-broken"]


@pytest.fixture
def cli(site, rlightning_cli):
    def run(*args, allow=DEFAULT_ALLOW, **env):
        return rlightning_cli(list(args), pythonpath=site.pythonpath, allow=allow, **env)

    return run


def assert_clean(result, code=0):
    assert result.returncode == code, result.output
    assert "Traceback" not in result.output


# ---------------------------------------------------------------------------------------------- help, version


def test_help_lists_core_and_plugin_commands(cli):
    result = cli("--help")
    assert_clean(result)
    assert "Usage: rlightning" in result.stdout
    for command in ("list-plugins", "config", "hello", "crash"):
        assert command in result.stdout
    assert "Say hello (added by a plugin)." in result.stdout
    assert cli("config", "-h").stdout.count("validate") >= 1


def test_env_client_help_keeps_its_examples_one_per_line(cli):
    result = cli("env-client", "--help")
    assert_clean(result)
    assert "\\b" not in result.stdout  # click's no-rewrap marker is markup, never printed
    lines = result.stdout.splitlines()
    assert "    rlightning env-client --connect 127.0.0.1:5555 --num-envs 8 gymnasium:CartPole-v1" in lines
    assert ("    RLIGHTNING_ENV_TOKEN=... rlightning env-client --connect 10.0.0.5:5555 "
            "examples/cartpole_ppo_remote.yaml") in lines


def test_version_lists_plugins(cli):
    result = cli("--version", RLIGHTNING_DISABLE_PLUGINS="rlightning-test-twin")
    assert_clean(result)
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"rlightning {__version__} (plugin API 2.0, Python ")
    assert "  builtin: rlightning " + __version__ in lines
    assert "  rlightning-test-dummy: rlightning-test-dummy 1.0" in lines
    assert "  commands: rlt-cli-commands 0.2" in lines
    assert "  rlt-cli-broken: rlt-cli-broken 0.1 [error]" in lines
    assert "  rlightning-test-twin: rlightning-test-twin 1.0 [disabled]" in lines


# ---------------------------------------------------------------------------------------------- list-plugins


def test_list_plugins_table(cli):
    result = cli("list-plugins")
    assert_clean(result)
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["PLUGIN", "DISTRIBUTION", "VERSION", "STATUS", "COMPONENTS", "HOOKS"]
    table = lines[1:lines.index("")]  # the table, then a blank line before each plugin's error
    rows = {line.split()[0]: line for line in table}
    assert rows["builtin"].split()[1:4] == ["rlightning", __version__, "loaded"]
    dummy = rows["rlightning-test-dummy"]
    assert "env: dummy-env, shared-env; policy: dummy-policy; buffer: dummy-buffer" in dummy
    assert "register_envs, register_policies" in dummy
    assert rows["commands"].split()[1:4] == ["rlt-cli-commands", "0.2", "loaded"]
    assert rows["commands"].rstrip().endswith("register_commands")
    assert rows["rlt-cli-broken"].split()[1:4] == ["rlt-cli-broken", "0.1", "error"]
    assert ("rlt-cli-broken (rlt-cli-broken 0.1) error: import failed: ModuleNotFoundError: "
            "No module named 'rlt_cli_missing_dependency'") in result.stdout


def test_list_plugins_json_schema(cli):
    result = cli("list-plugins", "--json")
    assert_clean(result)
    payload = json.loads(result.stdout)
    assert set(payload) == {"plugins", "components"}
    for row in payload["plugins"]:
        assert set(row) == PLUGIN_ROW_KEYS
        for key in ("name", "distribution", "version", "entry_point", "status"):
            assert isinstance(row[key], str)
        assert row["status"] in {"loaded", "warning", "error", "incompatible", "disabled"}
        assert isinstance(row["warnings"], list)
        if row["status"] in ("loaded", "warning"):
            assert bool(row["warnings"]) == (row["status"] == "warning")
        assert isinstance(row["hooks"], list)
        assert isinstance(row["provides"], dict)
        assert all(isinstance(v, list) for v in row["provides"].values())
        assert (row["error"] is None) == (row["status"] in ("loaded", "warning", "disabled"))
    rows = {row["name"]: row for row in payload["plugins"]}
    assert rows["builtin"]["distribution"] == "rlightning"
    dummy = rows["rlightning-test-dummy"]
    assert dummy == {
        "name": "rlightning-test-dummy", "distribution": "rlightning-test-dummy", "version": "1.0",
        "entry_point": "rlightning_test_dummy", "status": "loaded", "error": None, "warnings": [], "api": ">=2,<3",
        "hooks": ["register_envs", "register_policies", "register_buffers", "register_preprocessors",
                  "register_engines", "register_loggers"],
        "provides": {"env": ["dummy-env", "shared-env"], "policy": ["dummy-policy"],
                     "buffer": ["dummy-buffer"], "preprocessor": ["dummy-norm"], "engine": ["dummy-engine"],
                     "logger": ["dummy-logger"]},
    }
    assert rows["commands"]["hooks"] == ["register_commands"]
    assert rows["rlt-cli-broken"]["status"] == "error"
    assert rows["rlt-cli-broken"]["error"].startswith("import failed: ModuleNotFoundError")

    for comp in payload["components"]:
        assert set(comp) == COMPONENT_KEYS
    comps = {(c["kind"], c["qualified_name"]): c for c in payload["components"]}
    policy = comps[("policy", "rlightning-test-dummy:dummy-policy")]
    assert policy["config"] == "rlightning_test_dummy.DummyPolicyParams"
    assert policy["defaults"] == {"lr": 0.001, "gamma": 0.99, "hidden": [64, 64], "activation": "tanh"}
    assert policy["description"] == "A dummy policy."
    assert comps[("engine", "rlightning-test-dummy:dummy-engine")]["defaults"] is None
    assert ("env", "rlightning-test-twin:shared-env") in comps
    assert ("logger", "rlightning:jsonl") in comps


def test_list_plugins_kind_filter(cli):
    result = cli("list-plugins", "--json", "--kind", "policy")
    assert_clean(result)
    payload = json.loads(result.stdout)
    names = [row["name"] for row in payload["plugins"] if row["name"] != "builtin" and row["status"] == "loaded"]
    assert names == ["rlightning-test-dummy"]
    # plugins that failed to load stay listed under any kind: they may be what should have provided it
    assert {row["name"] for row in payload["plugins"] if row["status"] == "error"} == {"rlt-cli-broken"}
    assert {c["kind"] for c in payload["components"]} == {"policy"}
    assert [c["name"] for c in payload["components"] if c["distribution"] != "rlightning"] == ["dummy-policy"]

    table = cli("list-plugins", "--kind", "env")
    assert_clean(table)
    rows = [line.split() for line in table.stdout.splitlines()[1:] if line.strip()]
    names = [r[0] for r in rows if len(r) > 3 and r[3] == "loaded"]
    assert [n for n in names if n != "builtin"] == ["rlightning-test-dummy", "rlightning-test-twin"]

    bad = cli("list-plugins", "--kind", "model")
    assert_clean(bad, 2)
    assert "Invalid value for '--kind'" in bad.stderr


def test_list_plugins_verbose_shows_components_and_defaults(cli):
    result = cli("list-plugins", "--verbose")
    assert_clean(result)
    out = result.stdout
    assert "\nComponents:\n" in out
    assert "  policy dummy-policy (rlightning-test-dummy 1.0): A dummy policy." in out
    assert "      config: rlightning_test_dummy.DummyPolicyParams" in out
    assert "        lr = 0.001" in out
    assert "        hidden = [64, 64]" in out
    assert "  env shared-env (rlightning-test-twin 1.0): The twin's env." in out


def test_list_plugins_check_healthy(dummy_site, rlightning_cli):
    # --check imports every listed plugin; --kind keeps the list to the test plugins (others may be
    # installed in this environment).
    result = rlightning_cli(["list-plugins", "--check", "--json", "--kind", "env"],
                            pythonpath=dummy_site.pythonpath, allow=dummy_site.dists)
    assert_clean(result)
    checks = json.loads(result.stdout)["checks"]
    assert set(checks) == {"builtin", "rlightning-test-dummy", "rlightning-test-twin"}  # builtin: env 'remote'
    for name, check in checks.items():
        assert check["ok"], (name, check)
        assert check["status"] == "loaded"
        assert check["heavy_imports"] == []


def test_list_plugins_check_reports_heavy_imports(make_plugin_dist, rlightning_cli):
    make_plugin_dist("rlt-cli-heavy", "0.1", "rlt_cli_heavy", HEAVY_PLUGIN)
    make_plugin_dist("rlt-cli-light", "0.1", "rlt_cli_light", LIGHT_PLUGIN)
    result = rlightning_cli(["list-plugins", "--check", "--kind", "env"],
                            pythonpath=make_plugin_dist.pythonpath, allow=["rlt-cli-heavy", "rlt-cli-light"])
    assert result.returncode == 1, result.output
    assert "Traceback" not in result.output
    assert ("check rlt-cli-heavy: FAILED (imports torch while loading, which every rlightning command then pays "
            "for (import heavy libraries inside the factories))" in result.stdout)
    assert "check rlt-cli-light: ok" in result.stdout


def test_disable_plugins_from_the_environment(cli):
    result = cli("list-plugins", "--json", RLIGHTNING_DISABLE_PLUGINS="rlightning-test-twin,commands")
    assert_clean(result)
    rows = {row["name"]: row for row in json.loads(result.stdout)["plugins"]}
    assert rows["rlightning-test-twin"]["status"] == "disabled"
    assert rows["commands"]["status"] == "disabled"
    assert rows["rlightning-test-dummy"]["status"] == "loaded"
    assert "hello" not in cli("--help", RLIGHTNING_DISABLE_PLUGINS="commands").stdout


def test_strict_plugins_is_a_clean_user_error(cli):
    result = cli("list-plugins", RLIGHTNING_STRICT_PLUGINS="1")
    assert_clean(result, 2)
    assert "Error: plugins failed to load (RLIGHTNING_STRICT_PLUGINS=1):" in result.stderr
    assert "rlt-cli-broken (rlt-cli-broken 0.1): import failed" in result.stderr


# ---------------------------------------------------------------------------------------------- config


def test_config_validate_good_file(cli):
    result = cli("config", "validate", GOOD, "engine.total_steps=5000")
    assert_clean(result)
    assert result.stdout.splitlines()[0] == f"{GOOD}: valid"
    assert "  policy: policy 'dummy-policy' from rlightning-test-dummy 1.0" in result.stdout
    assert "  env[1]: env 'shared-env' from rlightning-test-twin 1.0" in result.stdout


def test_config_show_prints_yaml_that_loads_back(cli, dummy_plugins, tmp_path):
    result = cli("config", "show", GOOD, "policy.params.lr=1e-3", "run_dir=123")
    assert_clean(result)
    data = yaml.safe_load(result.stdout)
    assert data["policy"]["params"]["lr"] == 1e-3
    assert data["run_dir"] == "123"
    assert data["engine"]["total_steps"] == 1_000_000
    shown = tmp_path / "shown.yaml"
    shown.write_text(result.stdout, encoding="utf-8")
    expected = load_config(REPO / GOOD, ["policy.params.lr=1e-3", "run_dir=123"],
                           registry=dummy_plugins.registry)
    assert load_config(shown, registry=dummy_plugins.registry) == expected


def test_config_error_names_broken_plugins(cli, tmp_path):
    config = tmp_path / "ppo.yaml"
    config.write_text("env: {type: dummy-env}\npolicy: {type: ppo}\nbuffer: {type: dummy-buffer}\n"
                      "engine: {type: dummy-engine}\n", encoding="utf-8")
    result = cli("config", "validate", str(config))
    assert_clean(result, 2)
    assert f"invalid configuration in {config} (1 problem):" in result.stderr
    assert "policy.type: unknown policy 'ppo'. Available policy names: " in result.stderr
    assert "dummy-policy" in result.stderr
    assert ("Plugins that failed to load and might provide it: rlt-cli-broken from rlt-cli-broken"
            in result.stderr)


# ---------------------------------------------------------------------------------------------- exit codes


def test_plugin_subcommand_runs(cli):
    result = cli("hello", "--name", "rl")
    assert_clean(result)
    assert result.stdout == "hello, rl, from a plugin\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["no-such-command"], "No such command 'no-such-command'"),
        (["list-plugins", "--bogus"], "--bogus"),
        (["config", "validate"], "Missing argument 'CONFIG'"),
        (["hello", "--nme", "x"], "--nme"),
    ],
    ids=["command", "option", "argument", "plugin-command-option"],
)
def test_bad_arguments_exit_2(cli, args, message):
    result = cli(*args)
    assert_clean(result, 2)
    assert message in result.stderr
    assert result.stderr.startswith("Usage: rlightning")


def test_unexpected_crash_exits_1_with_a_traceback(cli):
    result = cli("crash")
    assert result.returncode == 1, result.output
    assert "Traceback" in result.stderr
    assert "RuntimeError: plugin bug in crash" in result.stderr
    assert "rlightning hit an unexpected error" in result.stderr


def test_a_plugin_failing_to_add_commands_does_not_break_the_cli(cli):
    result = cli("--help", allow=[*DEFAULT_ALLOW, "rlt-cli-badcmds"])
    assert_clean(result)
    assert ("warning: plugin 'rlt-cli-badcmds' failed to add its commands: cannot add commands"
            in result.stderr)
    assert "hello" in result.stdout  # the other plugins' commands are still there


# ---------------------------------------------------------------------------------------------- import weight


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["list-plugins", "--json"], ["config", "validate", GOOD]],
    ids=["help", "list-plugins", "config-validate"],
)
def test_light_commands_never_import_torch_or_ray(site, cli_environment, argv):
    proc = subprocess.run([sys.executable, "-c", HEAVY_IMPORT_PROBE, *argv], capture_output=True, text=True,
                          env=cli_environment(site.pythonpath, DEFAULT_ALLOW), cwd=REPO, timeout=120,
                          check=False)
    probe = proc.stderr.strip().splitlines()[-1]
    assert probe == "PROBE 0 -", proc.stdout + proc.stderr
