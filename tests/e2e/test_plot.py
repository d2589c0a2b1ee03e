"""``rlightning plot``: learning curves from run directories, seeds of one config averaged, as a PNG."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from rlightning_cli.commands.plot import group_curve, group_runs, load_run

ROOT = Path(__file__).resolve().parents[2]
C0 = np.array([31, 119, 180])  # matplotlib's first colour: the first group's mean line
C1 = np.array([255, 127, 14])
BAND0 = np.array([199, 221, 236])  # C0 at alpha 0.25 over white: the first group's ± std band


def make_run(root: Path, name: str, seed: int, offset: float, *, lr: float = 1e-3, evals: bool = True) -> Path:
    run = root / f"{name}-s{seed}"
    run.mkdir(parents=True)
    config = {"env": [{"type": "gymnasium", "params": {"id": "CartPole-v1"}}],
              "policy": {"type": "ppo", "params": {"lr": lr}}, "seed": seed, "name": name, "run_dir": str(run)}
    (run / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    rows = []
    for i in range(1, 21):
        step = i * 1000
        rows.append({"step": step, "iteration": i, "rollout/episode_return_mean": step / 100 + offset - 5})
        if evals and i % 4 == 0:
            rows.append({"step": step, "eval/episode_return_mean": step / 100 + offset})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 21', encoding="utf-8")
    return run


def rl(*args: str, pre: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLIGHTNING_")}
    code = (f"{pre}\nimport sys\nfrom rlightning_cli.main import main\n"
            f"sys.argv = ['rlightning', *{list(args)!r}]\nmain()")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=120, check=False)


def pixels_near(img: np.ndarray, color: np.ndarray, tol: int = 12) -> int:
    return int(np.sum(np.all(np.abs(img[..., :3].astype(int) - color) <= tol, axis=-1)))


def test_seeds_of_one_config_are_grouped_and_averaged(tmp_path):
    runs = [load_run(make_run(tmp_path, "ppo", s, 10.0 * s)) for s in (0, 2)]
    runs.append(load_run(make_run(tmp_path, "ppo-fast", 0, 50.0, lr=1e-2)))
    groups = group_runs(runs)
    assert [len(g) for g in groups.values()] == [2, 1]
    steps, mean, std, count = group_curve(next(iter(groups.values())), "eval/episode_return_mean")
    assert steps.tolist() == [4000, 8000, 12000, 16000, 20000]
    assert mean.tolist() == pytest.approx([50.0, 90.0, 130.0, 170.0, 210.0])
    assert std.tolist() == pytest.approx([10.0] * 5) and count.tolist() == [2] * 5


def test_plot_draws_mean_and_spread(tmp_path):
    import matplotlib.image

    for seed in (0, 2):
        make_run(tmp_path, "ppo", seed, 10.0 * seed)
    other = make_run(tmp_path, "ppo-fast", 0, 50.0, lr=1e-2)
    out = tmp_path / "curves.png"
    proc = rl("plot", str(tmp_path / "ppo-s0"), str(tmp_path / "ppo-s2"), str(other), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "eval/episode_return_mean; 3 run(s) in 2 group(s)" in proc.stdout
    img = (matplotlib.image.imread(out) * 255).astype(np.uint8)
    assert img.shape[:2] == (480, 800)
    assert pixels_near(img, C0) > 300, "the mean line of the two seeds is missing"
    assert pixels_near(img, BAND0, tol=6) > 2000, "the ± std band of the two seeds is missing"
    assert pixels_near(img, C1) > 300, "the second config's line is missing"


def test_plot_falls_back_to_rollout_returns_and_explains_problems(tmp_path):
    run = make_run(tmp_path, "ppo", 0, 0.0, evals=False)
    out = tmp_path / "rollout.png"
    proc = rl("plot", str(run), "-o", str(out))
    assert proc.returncode == 0 and "rollout/episode_return_mean" in proc.stdout and out.is_file()
    missing = rl("plot", str(run), "--metric", "loss/policy")
    assert missing.returncode == 2 and "no run has metric 'loss/policy'; available: iteration" in missing.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "has no metrics.jsonl" in rl("plot", str(empty)).stderr


def test_plot_without_matplotlib_is_a_user_error(tmp_path):
    run = make_run(tmp_path, "ppo", 0, 0.0)
    proc = rl("plot", str(run), "-o", str(tmp_path / "x.png"), pre="import sys; sys.modules['matplotlib'] = None")
    assert proc.returncode == 2
    assert "rlightning plot needs the Python module 'matplotlib', which is not installed" in proc.stderr
    assert "pip install 'rlightning[plot]'" in proc.stderr
