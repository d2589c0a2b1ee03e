"""The test matrix and the demo / bench / docs / lint sessions. `nox --list` explains each one.

Torch is pinned to the CPU build (2.13.0) on this project's machines; set RLIGHTNING_TORCH to change it.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PLUGINS = sorted(p.parent for p in ROOT.glob("plugins/*/pyproject.toml"))
TORCH = os.environ.get("RLIGHTNING_TORCH", "torch==2.13.0")
LOWEST = ["pluggy==1.3.0", "attrs==23.1.0", "cattrs==24.1.0", "gymnasium==1.1.0", "pyyaml==6.0", "click==8.1.0",
          "packaging==23.0"]

#: The test sessions run pytest in parallel like scripts/test.sh (a worker per logical CPU, at most 4, a file per
#: worker at a time); `nox -s tests -- -n 0` runs them in one process.
PARALLEL = ["-n", "logical", "--maxprocesses=4", "--dist", "loadfile"]

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True


def _install_core(session: nox.Session, *extra: str) -> None:
    session.install(TORCH)
    session.install("-e", ".[dev]", *extra)


@nox.session
@nox.parametrize("variant", ["core-only", "all", "lowest"])
def tests(session: nox.Session, variant: str) -> None:
    """Core test suite: core alone (only the builtin plugin listed), with every plugin, and lowest versions."""
    _install_core(session)
    env = {"RLIGHTNING_TEST_VARIANT": variant}
    if variant == "lowest":  # with the plugins too, so they are exercised against the lowest versions
        for plugin in PLUGINS:
            session.install("-e", str(plugin))
        session.install(*LOWEST)
    if variant in ("all", "lowest"):
        for plugin in PLUGINS:
            session.install("-e", str(plugin))
        session.run("pytest", "tests", *PLUGIN_TEST_DIRS(), *PARALLEL, *session.posargs, env=env)
        return
    if variant == "core-only":
        plugin_names = [p.name for p in PLUGINS]
        if plugin_names:
            session.run("pip", "uninstall", "-y", *plugin_names, silent=True)
    session.run("pytest", "tests", *PARALLEL, *session.posargs, env=env)


def PLUGIN_TEST_DIRS() -> list[str]:
    return [str(p / "tests") for p in PLUGINS if (p / "tests").is_dir()]


@nox.session
@nox.parametrize("plugin", [p.name for p in PLUGINS])
def plugins(session: nox.Session, plugin: str) -> None:
    """Each plugin's own tests with only core + that plugin installed."""
    _install_core(session)
    path = ROOT / "plugins" / plugin
    local = _local_plugin_deps(path)  # plugins this one declares as dependencies (e.g. rlightning-ppo)
    others = [p.name for p in PLUGINS if p.name != plugin and p.name not in local]
    if others:
        session.run("pip", "uninstall", "-y", *others, silent=True)
    session.install("-e", str(path), *(a for name in local for a in ("-e", str(ROOT / "plugins" / name))))
    session.run("pytest", str(path / "tests"), *PARALLEL, *session.posargs)


def _local_plugin_deps(path: Path) -> list[str]:
    """Names of the plugins in plugins/ that the plugin at ``path`` lists in its ``dependencies``."""
    import re
    import tomllib

    deps = tomllib.loads((path / "pyproject.toml").read_text())["project"].get("dependencies", [])
    names = {re.split(r"[\s\[<>=!~;]", d, maxsplit=1)[0].strip().lower() for d in deps}
    return [p.name for p in PLUGINS if p.name.lower() in names and p != path]


@nox.session
def lint(session: nox.Session) -> None:
    """ruff on everything; mypy on rlightning_core."""
    session.install("ruff>=0.6", "mypy>=1.10", "types-PyYAML")
    session.run("ruff", "check", ".")
    _install_core(session)
    session.run("mypy", "rlightning_core")


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: train PPO on CartPole in one process until it is solved."""
    _install_core(session)
    for plugin in PLUGINS:
        session.install("-e", str(plugin))
    session.run("rlightning", "train", "examples/cartpole_ppo.yaml", *session.posargs)


@nox.session
def killloop(session: nox.Session) -> None:
    """Crash safety: SIGKILL real training runs at random moments (and inside checkpoint writes), resume, compare."""
    _install_core(session)
    for plugin in PLUGINS:
        session.install("-e", str(plugin))
    session.run("python", "tests/reliability/killloop.py", *(session.posargs or ["--trials", "24"]))


@nox.session
def fuzz(session: nox.Session) -> None:
    """Config and CLI fuzzing with many more hypothesis examples than the default suite runs."""
    _install_core(session)
    session.run("pytest", "tests/reliability/test_config_fuzz.py", "-q", *session.posargs,
                env={"RLIGHTNING_FUZZ_PROFILE": "long"})


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks, each printing ratios against a reference measured in the same run."""
    _install_core(session)
    for plugin in PLUGINS:
        session.install("-e", str(plugin))
    session.install("stable-baselines3>=2.3")
    scripts = session.posargs or sorted(str(p) for p in (ROOT / "benchmarks").glob("[!_]*.py"))
    for script in scripts:
        session.run("python", script)


@nox.session(name="bench_suites")
def bench_suites(session: nox.Session) -> None:
    """Atari and MuJoCo against SB3 at the published budgets (hours on 2 cores; `-- --quick` for minutes)."""
    _install_core(session)
    for plugin in PLUGINS:
        session.install("-e", str(plugin))
    session.install("-e", "plugins/rlightning-gymnasium[atari]", "gymnasium[mujoco]>=1.1", "matplotlib>=3.7",
                    "stable-baselines3>=2.3")
    session.run("python", "benchmarks/suites/run.py", *session.posargs)


@nox.session(name="bench-vector-envs")
def bench_vector_envs(session: nox.Session) -> None:
    """Steps/s of gymnasium sync, gymnasium async and envpool workers on Breakout (atari preset) and Hopper."""
    _install_core(session)
    session.install("-e", "plugins/rlightning-gymnasium[atari,mujoco,envpool]")
    session.run("python", "benchmarks/vector_envs.py", *session.posargs)


@nox.session(name="bench-predict")
def bench_predict(session: nox.Session) -> None:
    """The predict target alone: batch vs single-observation predict, and latency beside SB3 (flags pass on)."""
    _install_core(session)
    for plugin in PLUGINS:
        session.install("-e", str(plugin))
    session.install("stable-baselines3>=2.3")
    session.run("python", "benchmarks/predict_latency.py", *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site with mkdocs, strict (any warning fails, a stale reference page included)."""
    session.install(TORCH)
    session.install("-e", ".[docs]", *(a for plugin in PLUGINS for a in ("-e", str(plugin))))
    session.run("mkdocs", "build", "--strict", *session.posargs, env={"NO_MKDOCS_2_WARNING": "1"})
