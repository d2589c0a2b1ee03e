"""The plugin-authoring guide works as written: its files and commands, run by a new user in an empty folder.

Blocks of ``docs/plugins/authoring.md`` at the left margin are read in order: a fence with ``title="PATH"``
is a file to write, a ``bash`` fence holds commands (``pip install``, ``rlightning``, ``pytest``), and a fence
titled ``expected output`` is compared with the output of the command before it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "plugins" / "authoring.md"
FENCE_RE = re.compile(r'^```(?P<lang>\w*)(?:[ \t]+title="(?P<title>[^"]+)")?[ \t]*\n(?P<body>.*?)^```[ \t]*$',
                      re.M | re.S)
GUIDE_PLUGINS = ("corridor", "a2c")


def guide_steps() -> list[tuple[str, str, str]]:
    """``(kind, title, body)`` per block: kind is ``file``, ``commands``, ``expected`` or ``other``."""
    steps = []
    for m in FENCE_RE.finditer(GUIDE.read_text(encoding="utf-8")):
        title, body = m.group("title") or "", m.group("body")
        if title == "expected output":
            steps.append(("expected", title, body))
        elif title:
            steps.append(("file", title, body))
        elif m.group("lang") == "bash":
            steps.append(("commands", "", body))
        else:
            steps.append(("other", "", body))
    return steps


def normalized(text: str) -> set[str]:
    return {" ".join(line.split()) for line in text.splitlines() if line.strip()}


def test_the_guide_has_files_commands_and_expected_outputs():
    kinds = [k for k, _, _ in guide_steps()]
    files = [t for k, t, _ in guide_steps() if k == "file"]
    assert kinds.count("commands") >= 5 and kinds.count("expected") == 2
    assert "rlightning-corridor/pyproject.toml" in files and "rlightning-a2c/rlightning_a2c/policy.py" in files
    assert "corridor_a2c.yaml" in files


def test_the_new_plugin_output_in_the_guide_is_current(tmp_path):
    text = GUIDE.read_text(encoding="utf-8")
    shown = text.split("$ rlightning new-plugin gridworld --kind env\n", 1)[1].split("```", 1)[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLIGHTNING_")}
    proc = subprocess.run([sys.executable, "-m", "rlightning_cli", "new-plugin", "gridworld", "--kind", "env"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=True)
    assert shown == proc.stdout.split("\nNext:", 1)[0]


def _preprocessor_example() -> str:
    section = GUIDE.read_text(encoding="utf-8").split("## Other kinds: a preprocessor\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_preprocessor_example_in_the_guide_loads_and_conforms(make_plugin_dist):
    from rlightning_core.plugins import load_plugins
    from rlightning_core.testing import check_preprocessor

    make_plugin_dist("rlightning-minmax", "0.1.0", "rlightning_minmax_guide", _preprocessor_example(),
                     entry_name="minmax")
    plugins = load_plugins(allow=["minmax"])
    (info,) = [p for p in plugins.plugins if p.name == "minmax"]
    assert (info.status, info.warnings, info.provides) == ("loaded", [], {"preprocessor": ["minmax"]})
    report = check_preprocessor("minmax", registry=plugins.registry)
    assert "merge([state]) into a fresh instance reproduces the transform" in report.passed


@pytest.mark.slow
def test_the_authoring_guide_works_as_written(tmp_path):
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("pip install -e --no-build-isolation needs setuptools in this environment")
    from rlightning_core.testing.venv import overlay_venv

    python = overlay_venv(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLIGHTNING_") and k != "PYTHONPATH"}
    work = tmp_path / "work"
    work.mkdir()
    last_output, ran = "", []
    for kind, title, body in guide_steps():
        if kind == "file":
            path = work / title
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body, encoding="utf-8")
        elif kind == "commands":
            for line in body.splitlines():
                line = line.split(" #", 1)[0].strip()
                if not line or line.startswith("#"):
                    continue
                last_output = run_command(python, shlex.split(line), work, env)
                ran.append(line)
        elif kind == "expected":
            actual = normalized(last_output)
            for line in normalized(body):
                if line.startswith("PLUGIN ") or any(line.startswith(p + " ") for p in GUIDE_PLUGINS):
                    assert line in actual, f"after {ran[-1]!r}: {line!r} not in the output:\n{last_output}"
    assert any(c.startswith("rlightning train") for c in ran)
    assert (work / "runs" / "corridor" / "checkpoints" / "index.json").is_file()


def run_command(python: Path, argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    from rlightning_core.testing.venv import pip_install

    tool, args = argv[0], argv[1:]
    if tool == "pip":
        assert args[0] == "install", argv
        return pip_install(python, *args[1:], cwd=cwd).stdout
    if tool == "rlightning":
        if args[0] == "plot" and importlib.util.find_spec("matplotlib") is None:
            return ""
        cmd = [str(python), "-m", "rlightning_cli", *args]
    elif tool == "pytest":
        cmd = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    else:
        raise AssertionError(f"the guide runs a command the test does not know: {argv}")
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, f"{' '.join(argv)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr
