"""What ``config show``, ``config validate`` and ``train --dry-run`` accept and refuse, as a user runs them.

Real subprocesses of the installed console script, the example configs and the installed plugins.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CARTPOLE = str(ROOT / "examples" / "cartpole_ppo.yaml")
REMOTE = str(ROOT / "examples" / "cartpole_ppo_remote.yaml")
SPREAD = str(ROOT / "examples" / "simple_spread_ppo.yaml")


@pytest.fixture(scope="module", autouse=True)
def _needs_the_plugins():
    from rlightning_core.plugins import get_plugins

    registry = get_plugins().registry
    if "gymnasium" not in registry.names("env") or "ppo" not in registry.names("policy"):
        pytest.skip("needs the rlightning-gymnasium and rlightning-ppo plugins installed")


def refused(result, *lines: str) -> None:
    assert result.returncode == 2, result
    assert "Traceback" not in result.output
    for line in lines:
        assert line in result.output, result.output


# ------------------------------------------------------------------------------------ mapping overrides


def test_config_show_structures_a_params_mapping_override(rlightning_cli):
    result = rlightning_cli(["config", "show", CARTPOLE, "policy.params={lr: 0.1}", "policy.params.gamma=0.9"])
    assert result.returncode == 0, result
    params = yaml.safe_load(result.stdout)["policy"]["params"]
    assert (params["lr"], params["gamma"]) == (0.1, 0.9)
    assert params["hidden_sizes"] == [64, 64] and params["epochs"] == 10  # PPO's defaults, not the file's 2
    assert "text" not in params and "value" not in params


@pytest.mark.parametrize(("overrides", "line"), [
    (["policy.params={lrr: 0.1}"], "policy.params.lrr: unknown key (did you mean 'lr'?)"),
    (["policy.params={lr: fast}"], "policy.params.lr: expected float, got 'fast'"),
    (["env.params={}"], "env[0].params.id: required key is missing"),
    (["engine.params={rollout_stepz: 8}"], "engine.params.rollout_stepz: unknown key (did you mean 'rollout_steps'?)"),
    (["policy.params.hidden_sizes=[64, wide]"], "policy.params.hidden_sizes[1]: expected int, got 'wide'"),
])
def test_config_validate_refuses_a_bad_mapping_override(rlightning_cli, overrides, line):
    refused(rlightning_cli(["config", "validate", CARTPOLE, *overrides]), line)


def test_train_runs_with_a_params_mapping_override(rlightning_cli, tmp_path):
    run = tmp_path / "run"
    result = rlightning_cli(["train", CARTPOLE, "policy.params={hidden_sizes: [16], lr: 0.01}",
                             "engine.params={rollout_steps: 16}", "engine.total_steps=256", "engine.eval_every=0",
                             "engine.eval_episodes=1", "--run-dir", str(run)], timeout=300)
    assert result.returncode == 0, result
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["policy"]["params"]["hidden_sizes"] == [16]
    assert saved["engine"]["params"]["rollout_steps"] == 16


# ------------------------------------------------------------------------------------ renamed keys


@pytest.mark.parametrize(("old", "new", "value"), [
    ("train_workers", "num_learners", 0),
    ("eval_workers", "num_inference_servers", 2),
    ("rollout_num_cpus", "inference_server_num_cpus", 2.0),
    ("rollout_num_gpus", "inference_server_num_gpus", 0.5),
])
def test_a_renamed_key_is_refused_naming_its_new_name_from_a_file_and_an_override(rlightning_cli, tmp_path, old,
                                                                                   new, value):
    line = f"cluster.{old}: was renamed to cluster.{new}; set cluster.{new} instead"
    data = yaml.safe_load(Path(CARTPOLE).read_text())
    data.setdefault("cluster", {})[old] = value
    config = tmp_path / "old_keys.yaml"
    config.write_text(yaml.safe_dump(data))
    refused(rlightning_cli(["config", "validate", str(config)]), line, str(config))
    refused(rlightning_cli(["config", "validate", CARTPOLE, f"cluster.{old}={value}"]), line)
    result = rlightning_cli(["train", CARTPOLE, f"cluster.{old}={value}", "--dry-run"])
    refused(result, line)
    assert "unknown key" not in result.output


# ------------------------------------------------------------------------------------ refused before start


@pytest.mark.parametrize(("overrides", "line"), [
    (["cluster.mode=ray", "cluster.weight_sync=local"], "cluster.weight_sync: 'local' copies weights inside one"),
    (["cluster.mode=ray", "cluster.topology=inference_server"],
     "cluster.num_inference_servers: the inference_server topology needs at least 1 inference server"),
    (["cluster.mode=ray", "cluster.topology=inference_server", "cluster.num_inference_servers=1",
      "cluster.weight_sync=double_buffer"], "cluster.weight_sync: double_buffer swaps weights"),
    (["cluster.mode=ray", "cluster.num_learners=3"], "env[0].num_envs: 8 envs per worker cannot be split evenly"),
    (["cluster.mode=ray", "cluster.num_learners=0", "engine.type=async"], "engine.type: 'async' with cluster"),
    (["cluster.mode=ray", "policy.device=cuda"], "policy.device: 'cuda' puts the learner on a GPU, but its actor"),
    (["cluster.mode=ray", "cluster.placement=manual"], "env[0].bundle: placement 'manual' needs a bundle index"),
    (["cluster.num_learners=2"], "cluster.num_learners: 2 learners need cluster.mode: ray"),
])
def test_impossible_combinations_are_refused_by_validate_and_dry_run(rlightning_cli, overrides, line):
    refused(rlightning_cli(["config", "validate", CARTPOLE, *overrides]), line)
    refused(rlightning_cli(["train", CARTPOLE, *overrides, "--dry-run"]), line)


def test_train_refuses_an_impossible_combination_before_ray_starts(rlightning_cli, tmp_path):
    run = tmp_path / "run"
    result = rlightning_cli(["train", CARTPOLE, "cluster.mode=ray", "cluster.weight_sync=local",
                             "--run-dir", str(run)])
    refused(result, "cluster.weight_sync: 'local'")
    assert "Run directory" not in result.output and not run.exists()  # nothing started, nothing written


# ------------------------------------------------------------------------------------ nested configs


def test_validate_resolves_the_remote_envs_local_env(rlightning_cli):
    refused(rlightning_cli(["config", "validate", REMOTE, "env.params.local_env.type=gymnasiux"]),
            "env[0].params.local_env.type: unknown env 'gymnasiux'. Did you mean 'gymnasium'?")
    refused(rlightning_cli(["config", "validate", REMOTE, "env.params.local_env.params.idd=CartPole-v1"]),
            "env[0].params.local_env.params.idd: unknown key (did you mean 'id'?)")
    shown = rlightning_cli(["config", "show", REMOTE])
    assert shown.returncode == 0, shown
    local = yaml.safe_load(shown.stdout)["env"][0]["params"]["local_env"]
    assert local["params"]["vectorization"] == "sync"  # structured: the gymnasium env's defaults are filled in


def test_validate_checks_pettingzoo_kwargs_against_the_env(rlightning_cli):
    pytest.importorskip("mpe2")
    refused(rlightning_cli(["config", "validate", SPREAD, "env.params.kwargs.max_cycles=not-a-number"]),
            "env[0].params.kwargs: max_cycles: expected int, got 'not-a-number'")
    refused(rlightning_cli(["config", "validate", SPREAD, "env.params.kwargs.max_cycle=30"]),
            "env[0].params.kwargs: max_cycle: not an argument of mpe2.simple_spread_v3 (did you mean "
            "'max_cycles'?)")
    assert rlightning_cli(["config", "validate", SPREAD, "env.params.kwargs.max_cycles=30"]).returncode == 0


def test_validate_checks_gymnasium_make_kwargs_against_the_env(rlightning_cli):
    refused(rlightning_cli(["config", "validate", CARTPOLE, "env.params.kwargs.sutton_barto_rewrd=true"]),
            "env[0].params.kwargs: sutton_barto_rewrd: not an argument of CartPole-v1 (CartPoleEnv) (did you mean "
            "'sutton_barto_reward'?)")
    refused(rlightning_cli(["config", "validate", CARTPOLE, "env.params.kwargs.sutton_barto_reward=1"]),
            "env[0].params.kwargs: sutton_barto_reward: expected bool (true or false), got 1")
    ok = rlightning_cli(["config", "validate", CARTPOLE, "env.params.kwargs={sutton_barto_reward: true, "
                                                         "disable_env_checker: true}"])
    assert ok.returncode == 0, ok  # the env's own argument, and one of gymnasium.make's


def test_a_bad_value_in_a_mapping_of_a_list_is_reported_by_key(rlightning_cli):
    refused(rlightning_cli(["config", "validate", CARTPOLE, "cluster.bundles=[{CPU: 1}, {CPU: many}]"]),
            "cluster.bundles[1].CPU: expected float, got 'many'")


def test_params_checks_against_the_run_are_made_at_validation(rlightning_cli):
    """A params class's run_problems: the remote env's num_envs / num_clients split, rsl_rl's data-parallel rule."""
    refused(rlightning_cli(["config", "validate", REMOTE, "env.num_envs=7"], RLIGHTNING_ENV_TOKEN="t"),
            "env[0].num_envs: 7 must be a multiple of params.num_clients (2)")
    from rlightning_core.plugins import get_plugins

    if "rsl_rl_ppo" in get_plugins().registry.names("policy"):
        rsl = str(ROOT / "examples" / "inverted_pendulum_rsl_rl.yaml")
        refused(rlightning_cli(["config", "validate", rsl, "cluster.mode=ray", "cluster.num_learners=2",
                                "policy.params.obs_normalization=true"]),
                "policy.params.obs_normalization: not supported with data-parallel learners (cluster.num_learners: 2")


# ------------------------------------------------------------------------------------ removed keys


def test_config_validate_refuses_a_file_setting_a_removed_key_and_says_what_to_do(rlightning_cli, tmp_path):
    data = yaml.safe_load(Path(CARTPOLE).read_text())
    data.setdefault("cluster", {})["early_rollout"] = False
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(data))
    result = rlightning_cli(["config", "validate", str(path)])
    refused(result, "cluster.early_rollout: this key was removed together with the early-rollout helper process "
            "(the first rollout starts once the learner is built); delete it from the config")
    assert "unknown key" not in result.output  # removed, not merely unknown


@pytest.mark.parametrize(("override", "key"), [
    ("cluster.local_channel=false", "cluster.local_channel"),
    ("policy.rollout_impl=torch", "policy.rollout_impl"),
])
def test_an_override_setting_a_removed_key_is_refused_naming_it(rlightning_cli, override, key):
    refused(rlightning_cli(["train", CARTPOLE, override, "--dry-run"]), f"{key}: this key was removed together with ",
            "; delete it from the config")
