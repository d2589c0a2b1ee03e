"""A missing optional dependency is a user error: exit 2, no traceback, the module and the pip command.

"Not installed" is real here: the CLI runs in a subprocess whose ``sitecustomize``
(tests/fixtures/block_modules) hides the named top-level modules from every import finder, so ``import mujoco``
raises ``ModuleNotFoundError`` and ``importlib.util.find_spec`` returns ``None`` exactly as when the package is
absent. Some packages (pymunk, Box2D, swanboard) are not in the dev environment at all; they are
blocked as well, so the tests mean the same on a machine that has them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BLOCKER = REPO / "tests" / "fixtures" / "block_modules"

CARTPOLE = """
env: {{type: gymnasium, params: {{id: {env_id}}}}}
policy: {{type: ppo}}
engine: {{type: sync, total_steps: 2048}}
"""

ATARI_PRESET = """
env: {type: gymnasium, params: {id: ALE/Breakout-v5, preset: atari}}
policy: {type: ppo}
engine: {type: sync, total_steps: 2048}
"""

LOGGER = """
env: {{type: gymnasium, params: {{id: CartPole-v1}}}}
policy: {{type: ppo}}
engine: {{type: sync, total_steps: 2048}}
logging:
  loggers: [{{type: {logger}, params: {params}}}]
"""

PISTONBALL = """
env: {type: pettingzoo, params: {env: pettingzoo.butterfly.pistonball_v6}, num_envs: 20}
policy: {type: ppo}
"""

VIDEO = """
env: {type: gymnasium, params: {id: CartPole-v1}}
policy: {type: ppo}
engine: {type: sync, total_steps: 2048}
logging: {video_every: 1}
"""

#: (case id, modules hidden, config file text or an example's path, the module named, the pip command shown).
CASES = [
    ("mujoco", "mujoco", "examples/inverted_pendulum_ppo.yaml", "mujoco",
     "pip install 'rlightning-gymnasium[mujoco]'"),
    ("box2d", "Box2D", CARTPOLE.format(env_id="LunarLander-v3"), "Box2D",
     "pip install 'rlightning-gymnasium[box2d]'"),
    ("atari-namespace", "ale_py", CARTPOLE.format(env_id="ALE/Pong-v5"), "ale_py",
     "pip install 'rlightning-gymnasium[atari]'"),
    ("atari-module", "ale_py", CARTPOLE.format(env_id="'ale_py:ALE/Pong-v5'"), "ale_py",
     "pip install 'rlightning-gymnasium[atari]'"),
    ("atari-v4", "ale_py", CARTPOLE.format(env_id="BreakoutNoFrameskip-v4"), "ale_py",
     "pip install 'rlightning-gymnasium[atari]'"),
    ("atari-preset", "ale_py", ATARI_PRESET, "ale_py", "pip install 'rlightning-gymnasium[atari]'"),
    ("atari-preset-opencv", "cv2", ATARI_PRESET, "cv2", "pip install 'rlightning-gymnasium[atari]'"),
    ("envpool", "envpool", CARTPOLE.format(env_id="Hopper-v5, vectorization: envpool"), "envpool",
     "pip install envpool"),
    ("ray", "ray", "examples/cartpole_ppo_ray.yaml", "ray", "pip install 'rlightning[ray]'"),
    ("moviepy", "moviepy", VIDEO, "moviepy", "pip install 'rlightning[video]'"),
    ("pettingzoo-family", "pymunk", PISTONBALL, "pymunk", "pip install 'rlightning-pettingzoo[butterfly]'"),
    ("mpe2-requirement", "pygame", "examples/simple_spread_ppo.yaml", "pygame", "pip install pygame-ce"),
    ("rsl-rl", "rsl_rl", "examples/inverted_pendulum_rsl_rl.yaml", "rsl_rl", "pip install 'rsl-rl-lib>=5.0,<6'"),
    ("wandb", "wandb", LOGGER.format(logger="wandb", params="{}"), "wandb", "pip install 'wandb>=0.19'"),
    ("mlflow", "mlflow", LOGGER.format(logger="mlflow", params="{}"), "mlflow",
     "pip install 'mlflow-skinny>=2.12'"),
    ("swanlab", "swanlab", LOGGER.format(logger="swanlab", params="{}"), "swanlab",
     "pip install 'swanlab>=0.10'"),
    ("swanlab-local", "swanboard", LOGGER.format(logger="swanlab", params="{mode: local}"), "swanboard",
     "pip install 'rlightning-swanlab[dashboard]'"),
    ("tensorboard", "tensorboard", LOGGER.format(logger="tensorboard", params="{}"), "tensorboard",
     "pip install 'tensorboard>=2.10'"),
]


def blocked_env(modules: str) -> dict[str, str]:
    """Environment variables that make ``modules`` (comma-separated top-level names) not installed."""
    return {"PYTHONPATH": str(BLOCKER), "RLIGHTNING_TEST_BLOCK_MODULES": modules}


@pytest.fixture
def run_without(rlightning_cli: Any) -> Any:
    """``run_without(modules, args)``: ``rlightning ARGS`` in a subprocess where ``modules`` cannot be imported."""

    def run(modules: str, args: list[str], *, pythonpath: str = "", timeout: float = 120) -> Any:
        env = blocked_env(modules)
        return rlightning_cli(args, pythonpath=os.pathsep.join(p for p in (env["PYTHONPATH"], pythonpath) if p),
                              timeout=timeout, RLIGHTNING_TEST_BLOCK_MODULES=env["RLIGHTNING_TEST_BLOCK_MODULES"])

    return run


def config_path(tmp_path: Path, source: str) -> str:
    """An example's path as is, or the config text written to a file."""
    if source.startswith("examples/"):
        return str(REPO / source)
    path = tmp_path / "config.yaml"
    path.write_text(source, encoding="utf-8")
    return str(path)


def assert_missing(result: Any, module: str, pip_command: str) -> None:
    assert result.returncode == 2, result
    assert "Traceback" not in result.output, result.output
    assert 'File "' not in result.output, result.output  # nor a traceback's frames (Ray's remote ones)
    assert f"needs the Python module {module!r}, which is not installed" in result.stderr, result.stderr
    assert pip_command in result.stderr, result.stderr


def test_the_blocker_hides_modules_as_if_they_were_not_installed():
    """Sanity: a blocked module is absent to ``import`` and ``find_spec``; the rest imports as usual."""
    code = ("import importlib.util, json, sys\n"
            "out = {'find_spec': importlib.util.find_spec('mujoco') is None}\n"
            "try:\n    import mujoco\nexcept ModuleNotFoundError as exc:\n    out['name'] = exc.name\n"
            "import gymnasium, numpy\n"
            "out['gymnasium'] = importlib.util.find_spec('gymnasium') is not None\n"
            "print(json.dumps(out))\n")
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **blocked_env("mujoco")}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == '{"find_spec": true, "name": "mujoco", "gymnasium": true}'


def test_without_the_block_the_example_is_valid(rlightning_cli, run_without):
    """Sanity: what the cases below refuse is accepted where the packages are installed (here: mujoco)."""
    pytest.importorskip("mujoco")
    result = rlightning_cli(["config", "validate", str(REPO / "examples/inverted_pendulum_ppo.yaml")])
    assert result.returncode == 0, result
    result = run_without("Box2D", ["config", "validate", str(REPO / "examples/inverted_pendulum_ppo.yaml")])
    assert result.returncode == 0, result  # blocking one package leaves the others alone


@pytest.mark.parametrize(("blocked", "source", "module", "pip_command"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_config_validate_names_the_missing_package(tmp_path, run_without, blocked, source, module, pip_command):
    result = run_without(blocked, ["config", "validate", config_path(tmp_path, source)])
    assert_missing(result, module, pip_command)


@pytest.mark.parametrize(("blocked", "source", "module", "pip_command"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_dry_run_names_the_missing_package(tmp_path, run_without, blocked, source, module, pip_command):
    result = run_without(blocked, ["train", "--dry-run", config_path(tmp_path, source)])
    assert_missing(result, module, pip_command)


@pytest.mark.parametrize("case", ["mujoco", "ray", "rsl-rl"])
def test_train_refuses_before_the_run_starts(tmp_path, run_without, case):
    """The issue's report: ``train examples/inverted_pendulum_ppo.yaml`` without mujoco was a traceback."""
    _, blocked, source, module, pip_command = next(c for c in CASES if c[0] == case)
    run_dir = tmp_path / "run"
    result = run_without(blocked, ["train", config_path(tmp_path, source), "--run-dir", str(run_dir)])
    assert_missing(result, module, pip_command)
    assert not run_dir.exists()  # refused when the config was read: nothing was started


def test_rendering_a_classic_control_env_without_pygame(tmp_path, run_without):
    """pygame is needed only to render (videos): a run asking for videos stops before it trains."""
    pytest.importorskip("moviepy")
    run_dir = tmp_path / "run"
    result = run_without("pygame", ["train", config_path(tmp_path, VIDEO), "--run-dir", str(run_dir)])
    assert_missing(result, "pygame", "pip install 'rlightning[video]'")
    assert not (run_dir / "metrics.jsonl").exists() or not (run_dir / "metrics.jsonl").read_text().strip()


def test_plot_without_matplotlib(tmp_path, run_without):
    result = run_without("matplotlib", ["plot", str(tmp_path)])
    assert_missing(result, "matplotlib", "pip install 'rlightning[plot]'")


@pytest.mark.ray
def test_ray_mode_env_actor_without_the_package(tmp_path, run_without):
    """A package only the env's own module imports (not seen when the config is read) is missing where a Ray
    env-runner actor builds the env: the actor's error reaches the user as the same one-line user error.

    It used to kill the actor in its creation task; Ray reported that as ``ActorDiedError`` (the remote
    traceback as its message), a bug's traceback and exit 1."""
    pytest.importorskip("ray")
    (tmp_path / "rlt_needs_mujoco.py").write_text(
        "import gymnasium\n"
        "gymnasium.register('NeedsMujoco-v0', entry_point='rlt_needs_mujoco_impl:Env')\n", encoding="utf-8")
    (tmp_path / "rlt_needs_mujoco_impl.py").write_text("import mujoco  # noqa: F401\n", encoding="utf-8")
    run_dir = tmp_path / "run"
    args = ["train", str(REPO / "examples/cartpole_ppo_ray.yaml"), "env.params.id=rlt_needs_mujoco:NeedsMujoco-v0",
            "env.num_workers=1", "cluster.num_cpus=2", "--run-dir", str(run_dir)]
    result = run_without("mujoco", ["config", "validate", *args[1:4]], pythonpath=str(tmp_path))
    assert result.returncode == 0, result  # nothing tells this before the env is made
    result = run_without("mujoco", args, pythonpath=str(tmp_path), timeout=300)
    assert_missing(result, "mujoco", "pip install 'rlightning-gymnasium[mujoco]'")
    assert "env 'rlt_needs_mujoco:NeedsMujoco-v0' needs the Python module 'mujoco'" in result.stderr
    assert not (run_dir / "metrics.jsonl").exists() or not (run_dir / "metrics.jsonl").read_text().strip()


def test_sweep_without_optuna(tmp_path, run_without):
    space = tmp_path / "space.yaml"
    space.write_text("params:\n  policy.params.lr: {type: log_uniform, low: 1.0e-4, high: 1.0e-2}\n")
    sweep_dir = tmp_path / "sweep"
    result = run_without("optuna", ["sweep", str(REPO / "examples/cartpole_ppo.yaml"), "--space", str(space),
                                    "--trials", "2", "--sweep-dir", str(sweep_dir)])
    assert_missing(result, "optuna", "pip install 'rlightning[sweep]'")
    assert not sweep_dir.exists()
