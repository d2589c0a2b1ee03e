"""``rlightning new-plugin``: every kind's scaffold installs with pip and passes its own tests untouched."""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlightning_cli.commands.new_plugin import plan_files
from rlightning_core.types import KINDS

ROOT = Path(__file__).resolve().parents[2]


def rl(*args: str, python: str | Path = sys.executable, cwd: Path = ROOT, timeout: float = 120):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLIGHTNING_") and k != "PYTHONPATH"}
    return subprocess.run([str(python), "-m", "rlightning_cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=timeout, check=False)


@pytest.mark.parametrize("kind", KINDS)
def test_scaffold_files_are_complete_python(kind):
    dist, files = plan_files("my-thing", kind)
    assert dist == "rlightning-my-thing"
    assert {"pyproject.toml", "README.md", "rlightning_my_thing/plugin.py", "rlightning_my_thing/params.py",
            "tests/test_my_thing_conformance.py"} <= set(files)
    for path, text in files.items():
        assert "{{" not in text, f"{path}: unfilled placeholder"
        if path.endswith(".py"):
            ast.parse(text, filename=path)
    assert '[project.entry-points.rlightning]\nmy-thing = "rlightning_my_thing.plugin"' in files["pyproject.toml"]
    assert f"check_{kind}(\"my-thing\"" in files["tests/test_my_thing_conformance.py"]
    assert ("tests/test_my_thing_trains.py" in files) == (kind == "engine")


def test_the_engine_scaffold_uses_only_the_execution_contract():
    """The generated engine drives the run through ``self.execution`` (it trains on Ray too): no runners,
    buffer or policy group, which are empty on Ray; its generated test trains in local mode and on Ray."""
    _, files = plan_files("my-loop", "engine")
    engine = files["rlightning_my_loop/engine.py"]
    for call in ("self.execution.collect(", "self.execution.learn(", "self.execution.sync("):
        assert call in engine
    for local_only in ("self.runners", "self.buffer", "self.policy_group", "getattr(", "hasattr("):
        assert local_only not in engine
    trains = files["tests/test_my_loop_trains.py"]
    assert '@pytest.mark.parametrize("mode", ["local", "ray"])' in trains
    assert '"cluster": {"mode": mode, "num_cpus": 3}' in trains


@pytest.mark.ray
def test_the_generated_engine_passes_its_tests_trains_locally_and_on_ray(tmp_path):
    """The scaffold's own tests, untouched: listed, conforming, and trained once in one process and once on a
    real private Ray cluster. Installed the way pip would (a dist-info with its entry point on the path), without
    building a wheel."""
    proc = rl("new-plugin", "my-loop", "--kind", "engine", "--dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    dist = tmp_path / "rlightning-my-loop"
    info = dist / "rlightning_my_loop-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlightning-my-loop\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[rlightning]\nmy-loop = rlightning_my_loop.plugin\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLIGHTNING_") and k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(dist)  # the driver and the Ray workers it starts
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(dist / "tests")],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900, check=False)
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
    assert "4 passed" in tests.stdout and "skipped" not in tests.stdout, tests.stdout[-2000:]


def test_bad_names_and_existing_folders_are_user_errors(tmp_path):
    bad = rl("new-plugin", "My Env", "--kind", "env", "--dir", str(tmp_path))
    assert bad.returncode == 2 and "use lowercase letters and digits" in bad.stderr
    ok = rl("new-plugin", "grid", "--kind", "env", "--dir", str(tmp_path))
    assert ok.returncode == 0, ok.stderr
    assert "pip install -e" in ok.stdout
    again = rl("new-plugin", "rlightning-grid", "--kind", "policy", "--dir", str(tmp_path))
    assert again.returncode == 2 and "already exists and is not empty" in again.stderr
    assert "--kind" in rl("new-plugin", "x", "--kind", "robot").stderr


def test_the_scaffold_says_its_logic_is_an_example_to_replace(tmp_path):
    result = rl("new-plugin", "gridworld", "--kind", "env", "--dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert ("The env is a working example, a corridor (walk right to reach the goal), under the name 'gridworld': "
            "replace its logic in rlightning_gridworld/env.py") in result.stdout
    readme = (tmp_path / "rlightning-gridworld" / "README.md").read_text(encoding="utf-8")
    assert "**Replace the example.**" in readme and "an example, a corridor (walk right to reach the goal)" in readme
    pyproject = (tmp_path / "rlightning-gridworld" / "pyproject.toml").read_text(encoding="utf-8")
    assert "(the example rlightning new-plugin generates: replace it)" in pyproject  # list-plugins shows it too


@pytest.mark.slow
def test_every_scaffold_installs_lists_and_passes_its_tests(tmp_path):
    """As a user would: scaffold, ``pip install -e``, ``list-plugins``, the scaffold's own pytest."""
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("pip install -e --no-build-isolation needs setuptools in this environment")
    from rlightning_core.testing.venv import overlay_venv, pip_install

    names = {kind: f"new-{kind}" for kind in KINDS}
    for kind, name in names.items():
        proc = rl("new-plugin", name, "--kind", kind, "--dir", str(tmp_path))
        assert proc.returncode == 0, proc.stderr
    python = overlay_venv(tmp_path / "venv")
    pip_install(python, *[a for name in names.values() for a in ("-e", str(tmp_path / f"rlightning-{name}"))])

    listed = rl("list-plugins", "--json", python=python)
    assert listed.returncode == 0, listed.stderr
    import json

    rows = {p["distribution"]: p for p in json.loads(listed.stdout)["plugins"]}
    for kind, name in names.items():
        row = rows[f"rlightning-{name}"]
        assert row["status"] == "loaded", row
        assert row["provides"] == {kind: [name]}
    check = rl("list-plugins", "--check", "--kind", "env", python=python)
    assert "check new-env: ok" in check.stdout, check.stdout + check.stderr

    tests = [str(tmp_path / f"rlightning-{name}" / "tests") for name in names.values()]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLIGHTNING_") and k != "PYTHONPATH"}
    proc = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert f"{2 * len(KINDS) + 2} passed" in proc.stdout  # + the engine's training test, local and Ray
