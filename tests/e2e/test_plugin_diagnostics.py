"""What a plugin author sees when a plugin is wrong: load errors and warnings in ``list-plugins`` and ``train``,
and runtime errors that name the component, its plugin and distribution. Real plugin distributions on
``PYTHONPATH``, the installed ``rlightning`` console script in a subprocess."""

from __future__ import annotations

import json

import pytest

# Works, except where a component's name says it does not. Built on the shipped test doubles.
DIAG_PLUGIN = '''
from rlightning_core import hookimpl
from rlightning_core.testing.doubles import (
    SpaceEnv, SpaceEnvParams, TinyPolicy, TinyPolicyParams, default_spaces, make_space_env, make_tiny_policy,
)

RLIGHTNING_PLUGIN_API = ">=2,<3"


class StepBomb(SpaceEnv):
    def step(self, actions):
        if self._t.max() >= 3:
            raise ZeroDivisionError("step bomb")
        return super().step(actions)


def make_step_bomb(*, num_envs, seed, worker_index=0, render_mode=None):
    return StepBomb(*default_spaces(), num_envs=num_envs, seed=seed)


def make_build_bomb(*, num_envs, seed, worker_index=0, render_mode=None):
    raise RuntimeError("cannot build the bomb")


class LearnBombPolicy(TinyPolicy):
    def learn(self, buffer, *, progress=0.0):
        return {"loss/policy": helper_that_fails()}


def helper_that_fails():
    return 1 / 0


@hookimpl
def register_envs(register):
    register("ok-env", make_space_env, config=SpaceEnvParams)
    register("step-bomb", make_step_bomb)
    register("build-bomb", make_build_bomb)


@hookimpl
def register_policies(register):
    register("tiny", make_tiny_policy, config=TinyPolicyParams)
    register("learn-bomb", lambda params, **kw: LearnBombPolicy(params, **kw), config=TinyPolicyParams)
'''

# Issue #22, item 1: the factory takes no num_envs.
BAD_SIGNATURE_PLUGIN = '''
from attrs import define

from rlightning_core import hookimpl

RLIGHTNING_PLUGIN_API = ">=2,<3"


@define(frozen=True)
class BadParams:
    size: int = 3


def make_bad(params, *, seed, worker_index=0):
    return None


@hookimpl
def register_envs(register):
    register("bad-env", make_bad, config=BadParams)
'''

# Item 2: registered without config=, but its factory takes params.
TSV_PLUGIN = '''
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

# Item 3: plugins that load but are wrong in ways that were silent.
EMPTY_PLUGIN = 'RLIGHTNING_PLUGIN_API = ">=2,<3"\n'
NOAPI_PLUGIN = '''
from rlightning_core import hookimpl


@hookimpl
def register_envs(register):
    register("noapi-env", lambda **kw: None)
'''
TORCHY_PLUGIN = '''
import torch

from rlightning_core import hookimpl

RLIGHTNING_PLUGIN_API = ">=2,<3"


@hookimpl
def register_envs(register):
    register("torchy-env", lambda **kw: torch.zeros(1))
'''

CONFIG = """\
env: {type: ok-env, num_envs: 2}
policy: {type: tiny, device: cpu}
engine: {type: sync, total_steps: 64, params: {rollout_steps: 8}}
checkpoint: {every: 0, at_end: false}
cluster: {mode: local, max_restarts: 0}
"""

WARNED = ["rlt-empty", "rlt-noapi", "rlt-torchy"]
BROKEN = ["rlt-badsig", "rlt-tsv"]


@pytest.fixture(scope="module")
def site(plugin_site_factory):
    dists = plugin_site_factory("diagnostics")
    dists("rlt-diag", "1.0", "rlt_diag", DIAG_PLUGIN, entry_name="diag")
    dists("rlt-badsig", "1.0", "rlt_badsig", BAD_SIGNATURE_PLUGIN)
    dists("rlt-tsv", "1.0", "rlt_tsv", TSV_PLUGIN)
    dists("rlt-empty", "1.0", "rlt_empty", EMPTY_PLUGIN)
    dists("rlt-noapi", "1.0", "rlt_noapi", NOAPI_PLUGIN)
    dists("rlt-torchy", "1.0", "rlt_torchy", TORCHY_PLUGIN)
    return dists


@pytest.fixture
def cli(site, rlightning_cli):
    def run(*args, allow=("diag",)):
        return rlightning_cli(list(args), pythonpath=site.pythonpath, allow=list(allow))

    return run


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    return str(path)


EXPECTED_WARNINGS = {
    "rlt-empty": "implements no hooks, so it provides nothing (decorate its hook functions with "
                 "@rlightning_core.hookimpl)",
    "rlt-noapi": "declares no RLIGHTNING_PLUGIN_API, so rlightning cannot tell which plugin API it was written for "
                 '(add RLIGHTNING_PLUGIN_API = ">=2,<3" to module rlt_noapi)',
    "rlt-torchy": "imports torch while loading, which every rlightning command then pays for (import heavy "
                  "libraries inside the factories)",
}


# ---------------------------------------------------------------------------------------------- list-plugins


def test_list_plugins_marks_silent_problems_as_warnings_with_a_reason(cli):
    table = cli("list-plugins", allow=WARNED)
    assert table.returncode == 0, table.output  # warnings alone do not change the exit code
    assert "Traceback" not in table.output
    rows = table.stdout.split("\n\n")[0].splitlines()[1:]  # the table, up to the lines that explain it
    statuses = {line.split()[0]: line.split()[3] for line in rows}
    assert {name: statuses[name] for name in WARNED} == dict.fromkeys(WARNED, "warning")
    for name, reason in EXPECTED_WARNINGS.items():
        assert f"\n{name} ({name} 1.0) warning: {reason}\n" in table.stdout

    payload = json.loads(cli("list-plugins", "--json", allow=WARNED).stdout)
    rows = {row["name"]: row for row in payload["plugins"]}
    for name, reason in EXPECTED_WARNINGS.items():
        assert (rows[name]["status"], rows[name]["warnings"], rows[name]["error"]) == ("warning", [reason], None)
    assert rows["rlt-noapi"]["provides"] == {"env": ["noapi-env"]}  # a warning does not unregister anything


def test_list_plugins_check_fails_on_warnings(cli):
    result = cli("list-plugins", "--check", "--kind", "env", allow=["rlt-empty", "rlt-noapi"])
    assert result.returncode == 1, result.output
    assert f"check rlt-empty: FAILED ({EXPECTED_WARNINGS['rlt-empty']})" in result.stdout
    assert f"check rlt-noapi: FAILED ({EXPECTED_WARNINGS['rlt-noapi']})" in result.stdout


def test_a_plugin_whose_factory_the_core_cannot_call_fails_to_load(cli, config):
    table = cli("list-plugins", allow=BROKEN)
    assert table.returncode == 0, table.output
    assert ("rlt-badsig (rlt-badsig 1.0) error: registration failed: TypeError: env 'bad-env': factory "
            "make_bad(params, *, seed, worker_index=0) cannot be called the way the core calls env factories, "
            "factory(params, *, num_envs, seed, worker_index): got an unexpected keyword argument 'num_envs'"
            in table.stdout)
    assert ("rlt-tsv (rlt-tsv 1.0) error: registration failed: TypeError: logger 'tsv': factory "
            "TsvLogger(params, *, run_dir) cannot be called the way the core calls logger factories, "
            "factory(*, run_dir): missing a required argument: 'params'; it is registered without config=" in
            table.stdout)
    for args in (["config", "validate", config], ["train", config, "--dry-run"]):
        result = cli(*args, "env.type=bad-env", allow=["diag", *BROKEN])
        assert result.returncode == 2, result.output
        assert "Traceback" not in result.output
        assert "env[0].type: unknown env 'bad-env'" in result.stderr
        assert "Plugins that failed to load and might provide it: rlt-badsig from rlt-badsig" in result.stderr


# ---------------------------------------------------------------------------------------------- train


def test_train_prints_one_warning_line_per_plugin_that_failed_to_load(cli, config):
    result = cli("train", config, "--dry-run", allow=["diag", *BROKEN, *WARNED])
    assert result.returncode == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: plugin ")]
    assert [w.split("'")[1] for w in warnings] == BROKEN  # failures only: plugins with warnings did load
    assert warnings[0].startswith("warning: plugin 'rlt-badsig' (rlt-badsig 1.0) failed to load, its components "
                                  "are unavailable: registration failed: TypeError: env 'bad-env'")


def test_a_logger_that_cannot_be_built_stops_before_the_run_directory(cli, config, tmp_path):
    run_dir = tmp_path / "run"
    result = cli("train", config, "logging.loggers=[{type: tsv}]", "--run-dir", str(run_dir),
                 allow=["diag", "rlt-tsv"])
    assert result.returncode == 2, result.output
    assert "Traceback" not in result.output
    assert "unknown logger 'tsv'" in result.stderr and "registered without config=" in result.stderr
    assert not run_dir.exists()


@pytest.mark.parametrize(("overrides", "raised", "where"), [
    (["env.type=build-bomb"], "RuntimeError: cannot build the bomb",
     "env 'build-bomb' from plugin 'diag' (distribution rlt-diag 1.0), while building it"),
    (["policy.type=learn-bomb"], "ZeroDivisionError: division by zero",
     "policy 'learn-bomb' from plugin 'diag' (distribution rlt-diag 1.0), in LearnBombPolicy.learn"),
], ids=["factory", "method"])
def test_an_unexpected_error_in_a_plugin_names_the_component(cli, config, tmp_path, overrides, raised, where):
    result = cli("train", config, *overrides, "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 1, result.output
    assert "Traceback" in result.stderr and raised in result.stderr  # the original error, not swallowed
    assert result.stderr.rstrip().endswith(f"rlightning hit an unexpected error in {where}; the traceback is "
                                           "above.")
    if "building" in where:
        assert "raised while building env 'build-bomb' from plugin 'diag' (distribution rlt-diag 1.0)" in (
            result.stderr)


def test_a_failing_env_worker_names_its_component(cli, config, tmp_path):
    result = cli("train", config, "env.type=step-bomb", "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 1, result.output
    assert "cluster.max_restarts=0 worker restarts are used up" in result.stderr
    assert result.stderr.rstrip().endswith(
        "(raised in env 'step-bomb' from plugin 'diag' (distribution rlt-diag 1.0), in StepBomb.step)")
