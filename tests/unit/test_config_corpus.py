"""The bad-config corpus: every file under tests/configs_bad/ (and a few bad paths and overrides) goes
through the real ``rlightning config validate`` in a subprocess and must fail cleanly: exit code 2, no
traceback, and a message naming the dotted key path (or the file) of each problem.

The subprocesses run in parallel, once each, in a module-scoped fixture; each case then checks its result.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

BAD_DIR = Path(__file__).resolve().parents[1] / "configs_bad"
REL = "tests/configs_bad"  # the CLI runs from the repository root, so messages show this path

# file -> fragments the output must contain (dotted paths first). Every file in BAD_DIR must be listed here.
FILE_CASES: dict[str, list[str]] = {
    "malformed.yaml": [f"{REL}/malformed.yaml", "malformed YAML: line 3, column 1"],
    "bad_indentation.yaml": [f"{REL}/bad_indentation.yaml", "malformed YAML: line 3"],
    "top_level_list.yaml": [f"{REL}/top_level_list.yaml", "top level must be a mapping", "got list"],
    "top_level_scalar.yaml": [f"{REL}/top_level_scalar.yaml", "top level must be a mapping", "got str"],
    "empty.yaml": ["env: required key is missing", "policy: required key is missing"],
    "missing_policy.yaml": ["policy: required key is missing"],
    "missing_component_type.yaml": ["policy.type: required key is missing"],
    "unknown_top_level_key.yaml": ["engin: unknown key (did you mean 'engine'?)"],
    "unknown_cluster_key.yaml": ["cluster.num_cpu: unknown key (did you mean 'num_cpus'?)"],
    "total_steps_not_a_number.yaml": ["engine.total_steps: expected int, got 'lots'"],
    "total_steps_zero.yaml": ["engine.total_steps: must be >= 1, got 0"],
    "total_steps_fractional.yaml": ["engine.total_steps: expected int, got 1500.5",
                                    "engine.time_limit_s: must be > 0"],
    "seed_is_bool.yaml": ["seed: expected int, got True"],
    "cluster_mode_choice.yaml": ["cluster.mode: must be one of 'local', 'ray'; got 'kubernetes'"],
    "dashboard_yaml11_bool.yaml": ["cluster.dashboard: expected bool (true or false), got 'yes'"],
    "policy_device.yaml": ["policy.device: must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'; got 'gpu0'"],
    "env_is_a_string.yaml": ["env: expected a list, got 'CartPole-v1'"],
    "env_item_num_envs.yaml": ["env[1].num_envs: must be >= 1, got 0"],
    "unknown_env_type.yaml": ["env[0].type: unknown env 'dumy-env'. Did you mean 'dummy-env'?",
                              "Available env names: ", "shared-env"],
    "unknown_policy_type.yaml": ["policy.type: unknown policy 'ppo'. Available policy names: ",
                                 "dummy-policy"],
    "ambiguous_env_name.yaml": ["env[0].type: env 'shared-env' is provided by more than one",
                                "'rlightning-test-dummy:shared-env' or 'rlightning-test-twin:shared-env'"],
    "wrong_qualified_name.yaml": ["env[0].type: no env named 'shared-env' is provided by distribution or "
                                  "plugin 'rlightning-test-nobody'"],
    "policy_lr_not_a_float.yaml": ["policy.params.lr: expected float, got 'abc'"],
    "policy_lr_quoted.yaml": ["policy.params.lr: expected float, got '0.001'"],
    "policy_lr_negative.yaml": ["policy.params.lr: must be > 0, got -0.1"],
    "policy_params_unknown_key.yaml": ["policy.params.lrr: unknown key (did you mean 'lr'?)"],
    "policy_params_not_mapping.yaml": ["policy.params: expected a mapping"],
    "policy_hidden_not_list.yaml": ["policy.params.hidden: expected a list, got 64",
                                    "policy.params.activation: must be one of 'tanh', 'relu'"],
    "engine_takes_no_params.yaml": ["engine.params: engine 'dummy-engine' takes no params, "
                                    "got update_epochs"],
    "buffer_capacity_zero.yaml": ["buffer.params.capacity: must be >= 1, got 0"],
    "loggers_not_a_list.yaml": ["logging.loggers: expected a list, got a mapping"],
    "logger_params_unknown_key.yaml": ["logging.loggers[0].params.file: unknown key "
                                       "(did you mean 'filename'?)"],
    "preprocessor_unknown.yaml": ["preprocessors[0].params.clip: must be > 0",
                                  "preprocessors[1].type: unknown preprocessor 'dummy-nrom'. "
                                  "Did you mean 'dummy-norm'?"],
    "checkpoint_keep_last.yaml": ["checkpoint.every: expected int, got 'ten'",
                                  "checkpoint.keep_last: must be >= 1, got 0"],
    "many_problems.yaml": ["(4 problems)", "env[0].num_workers: must be >= 1",
                           "engine.total_steps: must be >= 1",
                           "cluster.num_learners: expected int, got 'many'",
                           "logging.level: must be one of"],
    "types.toml": ["engine.total_steps: expected int, got '1e6'",
                   "engine.eval_evry: unknown key (did you mean 'eval_every'?)"],
    "malformed.toml": [f"{REL}/malformed.toml", "malformed TOML"],
    "params.json": ["env[0].params.size: must be >= 1, got 0",
                    "policy.params.gamma: must be between 0 and 1"],
    "malformed.json": [f"{REL}/malformed.json", "malformed JSON: line 1, column 66"],
    "top_level_array.json": [f"{REL}/top_level_array.json", "top level must be a mapping"],
    "not_utf8.yaml": [f"{REL}/not_utf8.yaml", "cannot read the file"],
}

# A valid file given bad overrides: each override's problem names its key path.
OVERRIDE_BASE = "valid_for_overrides.yaml"
OVERRIDE_CASES: dict[str, tuple[list[str], list[str]]] = {
    "override-no-equals": (["policy.params.lr"], ["override 'policy.params.lr' is not KEY=VALUE"]),
    "override-empty-segment": (["engine..total_steps=1"],
                               ["override 'engine..total_steps=1': bad key segment"]),
    "override-index-out-of-range": (["env[5].num_envs=2"], ["'env[5].num_envs=2': index 5 is out of range"]),
    "override-list-without-index": (["env.num_envs=2"],
                                    ["env is a list; address an item, e.g. env[0].num_envs"]),
    "override-wrong-type": (["engine.total_steps=abc"], ["engine.total_steps: expected int, got 'abc'"]),
    "override-unknown-param": (["policy.params.lrr=1"],
                               ["policy.params.lrr: unknown key (did you mean 'lr'?)"]),
    "override-bad-plugin-param": (["env[1].params.size=0"], ["env[1].params.size: must be >= 1, got 0"]),
    "override-scalar-into-mapping": (["seed.x=1"], ["seed: expected int, got a mapping"]),
    "override-several": (["cluster.mode=cloud", "seed=-3", "engine.total_steps=0"],
                         ["(3 problems)", "cluster.mode: must be one of", "seed: must be >= 0, got -3",
                          "engine.total_steps: must be >= 1"]),
    "override-several-plugin-params": (
        ["policy.params.lr=[1]", "policy.params.gamma=2", "env[0].params.size=x"],
        ["(3 problems)", "policy.params.lr: expected float, got a list",
         "policy.params.gamma: must be between 0 and 1", "env[0].params.size: expected int, got 'x'"],
    ),
}

# Paths that are not readable config files.
PATH_CASES: dict[str, tuple[str, list[str]]] = {
    "path-missing": (f"{REL}/does_not_exist.yaml", [f"{REL}/does_not_exist.yaml", "file not found"]),
    "path-directory": (REL, [f"'{REL}' is a directory"]),
}


def _all_cases() -> dict[str, list[str]]:
    """case id -> argv after ``config validate``."""
    cases = {name: [f"{REL}/{name}"] for name in FILE_CASES}
    cases.update({cid: [f"{REL}/{OVERRIDE_BASE}", *ovr] for cid, (ovr, _) in OVERRIDE_CASES.items()})
    cases.update({cid: [path] for cid, (path, _) in PATH_CASES.items()})
    return cases


def _expected(case: str) -> list[str]:
    if case in FILE_CASES:
        return FILE_CASES[case]
    if case in OVERRIDE_CASES:
        return OVERRIDE_CASES[case][1]
    return PATH_CASES[case][1]


@pytest.fixture(scope="module")
def corpus_results(dummy_site, rlightning_cli):
    cases = _all_cases()
    allow = list(dummy_site.dists)

    def run(argv):
        return rlightning_cli(["config", "validate", *argv], pythonpath=dummy_site.pythonpath, allow=allow)

    with ThreadPoolExecutor(max_workers=min(8, 2 * (os.cpu_count() or 1))) as pool:
        results = dict(zip(cases, pool.map(run, cases.values()), strict=True))
    return results


def test_corpus_is_large_and_fully_listed():
    on_disk = {p.name for p in BAD_DIR.iterdir()}
    assert on_disk == {*FILE_CASES, OVERRIDE_BASE}
    assert len(_all_cases()) >= 25
    assert {p.suffix for p in BAD_DIR.iterdir()} == {".yaml", ".toml", ".json"}


def test_override_base_is_valid(dummy_site, rlightning_cli):
    result = rlightning_cli(["config", "validate", f"{REL}/{OVERRIDE_BASE}"],
                            pythonpath=dummy_site.pythonpath, allow=dummy_site.dists)
    assert result.returncode == 0, result.output
    assert f"{REL}/{OVERRIDE_BASE}: valid" in result.stdout


@pytest.mark.parametrize("case", list(_all_cases()))
def test_bad_config_fails_cleanly(corpus_results, case):
    result = corpus_results[case]
    assert result.returncode == 2, result.output
    assert "Traceback" not in result.output
    assert result.stdout == ""  # errors go to stderr
    for fragment in _expected(case):
        assert fragment in result.stderr, f"{fragment!r} not in:\n{result.stderr}"
