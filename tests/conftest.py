"""Shared fixtures: real plugin distributions on sys.path, plugin-state isolation, and a CLI runner.

Plugins are tested the way users install them: :func:`make_plugin_dist` writes a real ``*.dist-info``
directory (``METADATA`` + ``entry_points.txt`` with an ``[rlightning]`` group) and the plugin's module into a
fresh directory on ``sys.path``, so :mod:`importlib.metadata` discovers it exactly as it discovers a pip
install.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from rlightning_core.plugins import PluginSet, load_plugins, reset_plugins

TESTS_DIR = Path(__file__).resolve().parent
FIXTURES_DIR = TESTS_DIR / "fixtures"
BIN_DIR = Path(sys.executable).parent
RLIGHTNING_EXE = BIN_DIR / "rlightning"
PLUGIN_ENV_VARS = ("RLIGHTNING_LOAD_PLUGINS", "RLIGHTNING_DISABLE_PLUGINS", "RLIGHTNING_STRICT_PLUGINS")

#: The test plugin distributions built from tests/fixtures: (distribution, module, fixture source file).
DUMMY_DISTS = (
    ("rlightning-test-dummy", "rlightning_test_dummy", "dummy_plugin.py"),
    ("rlightning-test-twin", "rlightning_test_twin", "twin_plugin.py"),
)


class PluginDists:
    """Builds plugin distributions, one directory each (no finder/metadata cache sees a half-written one).

    Calling it writes one distribution and returns the directory holding it. ``paths`` lists every such
    directory, ``pythonpath`` joins them for a subprocess.
    """

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch | None = None) -> None:
        self.root = root
        self.monkeypatch = monkeypatch
        self.paths: list[Path] = []
        self.modules: set[str] = set()
        self.dists: list[str] = []

    def __call__(
        self, dist_name: str, version: str, module_name: str, source: str, entry_name: str | None = None
    ) -> Path:
        """Write ``dist_name`` whose ``[rlightning]`` entry point ``entry_name`` loads ``module_name``."""
        site = self.root / f"site-{len(self.paths)}-{dist_name}"
        site.mkdir(parents=True)
        (site / f"{module_name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        info = site / f"{re.sub(r'[-_.]+', '_', dist_name)}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: {version}\nSummary: test plugin\n",
            encoding="utf-8",
        )
        (info / "entry_points.txt").write_text(
            f"[rlightning]\n{entry_name or dist_name} = {module_name}\n", encoding="utf-8"
        )
        (info / "top_level.txt").write_text(f"{module_name}\n", encoding="utf-8")
        (info / "INSTALLER").write_text("rlightning-tests\n", encoding="utf-8")
        self.paths.append(site)
        self.modules.add(module_name)
        self.dists.append(dist_name)
        if self.monkeypatch is not None:
            self.monkeypatch.syspath_prepend(str(site))
        importlib.invalidate_caches()
        return site

    def add_dummy_plugins(self) -> list[str]:
        """Write the dummy and twin test plugins (tests/fixtures/); returns their distribution names."""
        for dist, module, filename in DUMMY_DISTS:
            self(dist, "1.0", module, fixture_source(filename))
        return [dist for dist, _, _ in DUMMY_DISTS]

    @property
    def pythonpath(self) -> str:
        """``PYTHONPATH`` value that makes every distribution built so far visible to a subprocess."""
        return os.pathsep.join(str(p) for p in self.paths)

    def forget_modules(self) -> None:
        """Drop the plugin modules from ``sys.modules`` so the next test imports its own versions."""
        for name in self.modules:
            sys.modules.pop(name, None)


@pytest.fixture(autouse=True)
def _isolated_plugin_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No RLIGHTNING_* variable leaks in from the shell, and no test sees another's cached plugin set."""
    for var in PLUGIN_ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    reset_plugins()
    yield
    reset_plugins()


@pytest.fixture
def make_plugin_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginDists]:
    """``make_plugin_dist(dist_name, version, module_name, source, entry_name=None)`` installs a real plugin
    distribution on ``sys.path`` for this test; ``make_plugin_dist.pythonpath`` exposes it to subprocesses."""
    dists = PluginDists(tmp_path / "plugins", monkeypatch)
    yield dists
    dists.forget_modules()
    importlib.invalidate_caches()


def fixture_source(filename: str) -> str:
    """The text of a plugin module kept under tests/fixtures/."""
    return (FIXTURES_DIR / filename).read_text(encoding="utf-8")


@pytest.fixture
def dummy_dists(make_plugin_dist: PluginDists) -> list[str]:
    """Install the dummy and twin test plugins on ``sys.path`` for this test; returns their dist names."""
    return make_plugin_dist.add_dummy_plugins()


@pytest.fixture
def dummy_plugins(dummy_dists: list[str]) -> PluginSet:
    """The dummy and twin test plugins installed for this test, loaded (and nothing else external)."""
    return load_plugins(allow=dummy_dists, deny=[], strict=False)


@pytest.fixture(scope="session")
def plugin_site_factory(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], PluginDists]:
    """``plugin_site_factory(label)``: a fresh :class:`PluginDists` *not* on sys.path, for subprocess tests
    that share one set of plugin distributions across a module."""
    return lambda label: PluginDists(tmp_path_factory.mktemp(label))


@pytest.fixture(scope="session")
def dummy_site(tmp_path_factory: pytest.TempPathFactory) -> PluginDists:
    """The dummy and twin plugins, written once per session and *not* on sys.path: for subprocesses."""
    dists = PluginDists(tmp_path_factory.mktemp("dummy-site"))
    dists.add_dummy_plugins()
    return dists


def cli_env(pythonpath: str = "", allow: Sequence[str] | None = None, **extra: str) -> dict[str, str]:
    """Environment for a CLI subprocess: test plugins on ``PYTHONPATH``, optionally an allowlist."""
    env = {k: v for k, v in os.environ.items() if k not in PLUGIN_ENV_VARS and k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    if allow is not None:
        env["RLIGHTNING_LOAD_PLUGINS"] = ",".join(allow)
    env.update(extra)
    return env


class CliResult:
    """A finished ``rlightning`` subprocess: exit code and output (stdout + stderr)."""

    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.output = proc.stdout + proc.stderr

    def __repr__(self) -> str:
        return f"CliResult(rc={self.returncode}, output={self.output!r})"


def run_rlightning(
    args: Sequence[str],
    *,
    pythonpath: str = "",
    allow: Sequence[str] | None = None,
    timeout: float = 120,
    **extra_env: str,
) -> CliResult:
    """Run the installed ``rlightning`` console script as a user would."""
    proc = subprocess.run(
        [str(RLIGHTNING_EXE), *args],
        env=cli_env(pythonpath, allow, **extra_env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=TESTS_DIR.parent,
    )
    return CliResult(proc)


@pytest.fixture(scope="session")
def cli_environment() -> Callable[..., dict[str, str]]:
    """``cli_environment(pythonpath, allow, **extra)``: the environment :func:`run_rlightning` uses, for
    subprocesses that run something other than the console script."""
    return cli_env


@pytest.fixture(scope="session")
def rlightning_cli() -> Callable[..., CliResult]:
    """``rlightning_cli(args, pythonpath=..., allow=..., **env)`` runs the console script in a subprocess."""
    assert RLIGHTNING_EXE.exists(), f"console script not found next to {sys.executable}"
    return run_rlightning
