"""``rlightning enjoy RUN_DIR``: the trained policy plays episodes into an MP4 and prints their returns."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("training_plugins")

ROOT = Path(__file__).resolve().parents[2]
#: No display in the tests: enjoy writes an MP4 (never a window).
HEADLESS = {"DISPLAY": "", "WAYLAND_DISPLAY": ""}
EPISODE = re.compile(r"^episode (\d+): return (-?[\d.]+) length (\d+)$", re.MULTILINE)


def _train(run_dir: Path, *overrides: str) -> None:
    from rlightning_core import train

    train(ROOT / "examples" / "cartpole_ppo.yaml", run_dir, overrides=[
        "logging.progress=false", "env[0].num_envs=4", "preprocessors=[{type: normalize_obs}]",
        "engine.eval_every=2", "engine.eval_episodes=4", "engine.target_eval_return=null", "checkpoint.every=2",
        *overrides])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A short CartPole PPO run with observation normalization, evaluated and checkpointed every 2 iterations."""
    path = tmp_path_factory.mktemp("enjoy") / "run"
    _train(path, "engine.total_steps=1024")
    return path


def _direct_returns(run_dir: Path, seeds: list[int], *, best: bool = False) -> list[tuple[float, int]]:
    """What ``load_policy`` + a plain Gymnasium rollout give: episode ``i`` from ``reset(seed=seeds[i])``."""
    import gymnasium as gym

    from rlightning_core import load_policy

    policy = load_policy(run_dir, best=best)
    env = gym.make("CartPole-v1")
    out = []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        total, length, done = 0.0, 0, False
        while not done:
            action, _ = policy.predict(obs)
            obs, reward, terminated, truncated, _ = env.step(int(action))
            total += float(reward)
            length += 1
            done = terminated or truncated
        out.append((total, length))
    env.close()
    return out


def _episodes(output: str) -> list[tuple[float, int]]:
    rows = EPISODE.findall(output)
    assert [int(i) for i, _, _ in rows] == list(range(len(rows))), output
    return [(float(r), int(n)) for _, r, n in rows]


def test_enjoy_writes_an_mp4_of_the_printed_episodes(run_dir, tmp_path, rlightning_cli):
    import imageio_ffmpeg

    video = tmp_path / "out.mp4"
    result = rlightning_cli(["enjoy", str(run_dir), "-n", "2", "--seed", "7", "--video", str(video)], **HEADLESS)
    assert result.returncode == 0, result.output
    episodes = _episodes(result.stdout)
    assert len(episodes) == 2
    assert episodes == _direct_returns(run_dir, [7, 8])  # the env's own returns, the seeds documented
    mean = sum(r for r, _ in episodes) / 2
    assert f"mean return: {mean:.2f} over 2 episodes" in result.stdout
    assert video.stat().st_size > 0
    frames, _secs = imageio_ffmpeg.count_frames_and_secs(str(video))
    assert frames == sum(n for _, n in episodes)  # one frame per step: the state each action was taken in
    assert f"video: {video} ({frames} frames)" in result.stdout


def test_without_a_display_the_video_goes_into_the_run_dir(run_dir, rlightning_cli):
    result = rlightning_cli(["enjoy", str(run_dir)], **HEADLESS)
    assert result.returncode == 0, result.output
    video = run_dir / "videos" / "enjoy.mp4"
    assert f"video: {video}" in result.stdout and video.stat().st_size > 0
    config_seed = 1  # examples/cartpole_ppo.yaml's seed: the default
    assert _episodes(result.stdout) == _direct_returns(run_dir, [config_seed])


def test_stochastic_samples_reproducibly_from_the_same_env_seeds(run_dir, tmp_path, rlightning_cli):
    args = ["enjoy", str(run_dir), "-n", "3", "--seed", "5"]
    det = _episodes(rlightning_cli([*args, "--video", str(tmp_path / "d.mp4")], **HEADLESS).stdout)
    sto = [_episodes(rlightning_cli([*args, "--stochastic", "--video", str(tmp_path / f"s{i}.mp4")],
                                    **HEADLESS).stdout) for i in range(2)]
    assert len(det) == len(sto[0]) == 3
    assert sto[0] == sto[1]  # torch is seeded with --seed: a stochastic replay repeats
    assert sto[0] != det  # sampled actions, not the mode
    assert det == _direct_returns(run_dir, [5, 6, 7])


def test_library_enjoy_matches_the_cli(run_dir, tmp_path, monkeypatch):
    from rlightning_core.enjoy import enjoy

    for name in HEADLESS:
        monkeypatch.delenv(name, raising=False)
    seen = []
    result = enjoy(run_dir, episodes=2, seed=7, video=tmp_path / "lib.mp4",
                   on_episode=lambda i, r, n: seen.append((i, r, n)))
    assert result.render_mode == "rgb_array" and result.video == tmp_path / "lib.mp4"
    assert list(zip(result.returns, result.lengths, strict=True)) == _direct_returns(run_dir, [7, 8])
    assert seen == [(i, r, n) for i, (r, n) in enumerate(zip(result.returns, result.lengths, strict=True))]
    assert result.frames == sum(result.lengths)


def test_best_uses_the_best_checkpoint(tmp_path, rlightning_cli):
    run = tmp_path / "run"
    # A learning rate too high to hold on to what the policy learns: its evaluation peaks early, then drops.
    _train(run, "engine.total_steps=2048", "policy.params.lr=0.03", "policy.params.anneal_lr=false")
    index = json.loads((run / "checkpoints" / "index.json").read_text())
    assert index["best"] != index["latest"], index
    best = rlightning_cli(["enjoy", str(run), "--best", "-n", "2", "--video", str(tmp_path / "b.mp4")],
                          **HEADLESS)
    latest = rlightning_cli(["enjoy", str(run), "-n", "2", "--video", str(tmp_path / "l.mp4")], **HEADLESS)
    assert best.returncode == 0 and latest.returncode == 0, best.output + latest.output
    assert f"checkpoint: {run / 'checkpoints' / index['best']}" in best.stdout
    assert f"checkpoint: {run / 'checkpoints' / index['latest']}" in latest.stdout
    assert _episodes(best.stdout) == _direct_returns(run, [1, 2], best=True)


@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_a_missing_or_empty_run_dir_exits_2_naming_it(tmp_path, rlightning_cli, kind):
    path = tmp_path / "run"
    if kind == "empty":
        path.mkdir()
    result = rlightning_cli(["enjoy", str(path)], **HEADLESS)
    assert result.returncode == 2, result.output
    assert str(path) in result.output and "Traceback" not in result.output
    assert ("does not exist" if kind == "missing" else "checkpoint") in result.output


def test_without_moviepy_mp4_mode_names_the_extra(run_dir, rlightning_cli):
    blocker = ROOT / "tests" / "fixtures" / "block_modules"
    result = rlightning_cli(["enjoy", str(run_dir), "--video", "x.mp4"], pythonpath=str(blocker),
                           RLIGHTNING_TEST_BLOCK_MODULES="moviepy", **HEADLESS)
    assert result.returncode == 2, result.output
    assert "Traceback" not in result.output
    assert "needs the Python module 'moviepy'" in result.stderr and "pip install 'rlightning[video]'" in result.stderr


def test_with_a_display_the_env_renders_in_a_window(run_dir, monkeypatch):
    """Human mode on SDL's dummy video driver (a real pygame window, drawn nowhere): no video, same returns."""
    from rlightning_core.enjoy import enjoy, has_display

    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    monkeypatch.setenv("DISPLAY", ":99")
    assert has_display()
    before = set((run_dir / "videos").glob("*")) if (run_dir / "videos").exists() else set()
    result = enjoy(run_dir, episodes=1, seed=3)
    assert result.render_mode == "human" and result.video is None and result.frames == 0
    assert list(zip(result.returns, result.lengths, strict=True)) == _direct_returns(run_dir, [3])
    after = set((run_dir / "videos").glob("*")) if (run_dir / "videos").exists() else set()
    assert after == before
    monkeypatch.setenv("DISPLAY", "")
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert not has_display()
