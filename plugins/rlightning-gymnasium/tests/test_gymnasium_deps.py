"""Which optional packages an env id needs (told from Gymnasium's registry), and what making an env reports.

A module is made "not installed" in-process with ``sys.modules[name] = None``, which Python's import system
treats as absent (``import`` raises ``ModuleNotFoundError``, ``find_spec`` refuses it); Box2D is absent
from the dev environment for real. The CLI's view (exit code 2, no traceback) is in
tests/e2e/test_missing_dependencies.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium
import pytest
from rlightning_gymnasium.deps import check_env_dependencies, entry_point_module
from rlightning_gymnasium.params import GymnasiumParams
from rlightning_gymnasium.worker import make_single_env

from rlightning_core.errors import MissingDependencyError, UserError


@pytest.fixture
def absent(monkeypatch: pytest.MonkeyPatch):
    """``absent(name)``: make top-level module ``name`` not importable for this test."""

    def hide(name: str) -> None:
        for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            monkeypatch.delitem(sys.modules, mod)
        monkeypatch.setitem(sys.modules, name, None)

    return hide


def test_the_family_comes_from_the_registry_entry_point():
    assert entry_point_module("Hopper-v5") == "gymnasium.envs.mujoco.hopper_v5"
    assert entry_point_module("LunarLander-v3") == "gymnasium.envs.box2d.lunar_lander"
    assert entry_point_module("some_pkg:Env-v0") == "some_pkg"
    assert entry_point_module("NoSuchEnv-v0") is None


def test_a_mujoco_env_without_mujoco_names_the_extra(absent):
    check_env_dependencies("Hopper-v5")  # installed in the dev environment: accepted
    absent("mujoco")
    with pytest.raises(MissingDependencyError) as info:
        check_env_dependencies("Hopper-v5")
    assert (info.value.module, info.value.requirement) == ("mujoco", "rlightning-gymnasium[mujoco]")
    check_env_dependencies("CartPole-v1")  # other families are not affected


def test_a_box2d_env_without_box2d_names_the_extra_and_swig(absent):
    absent("Box2D")
    with pytest.raises(MissingDependencyError) as info:
        check_env_dependencies("LunarLander-v3")
    assert info.value.requirement == "rlightning-gymnasium[box2d]" and "swig" in str(info.value)


def test_an_ale_id_without_ale_py_names_the_atari_extra(absent):
    absent("ale_py")
    for env_id in ("ALE/Pong-v5", "ale_py:ALE/Pong-v5"):
        with pytest.raises(MissingDependencyError) as info:
            check_env_dependencies(env_id)
        assert (info.value.module, info.value.requirement) == ("ale_py", "rlightning-gymnasium[atari]")


def test_rendering_classic_control_needs_pygame(absent):
    absent("pygame")
    check_env_dependencies("CartPole-v1")  # stepping needs no pygame
    with pytest.raises(MissingDependencyError) as info:
        check_env_dependencies("CartPole-v1", render_mode="rgb_array")
    assert info.value.requirement == "rlightning[video]"


def test_a_retired_gymnasium_id_is_a_user_error_with_gymnasiums_message():
    """``Hopper-v3`` is registered by Gymnasium only to say where the v2/v3 MuJoCo envs moved."""
    with pytest.raises(UserError, match=r"env 'Hopper-v3' cannot be made: .*gymnasium-robotics") as info:
        make_single_env(GymnasiumParams(id="Hopper-v3"))
    assert not isinstance(info.value, MissingDependencyError)


@pytest.fixture
def env_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``env_modules(name, source)``: write an importable module for this test."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
        monkeypatch.delitem(sys.modules, name, raising=False)
        return name

    return write


def test_an_env_module_that_imports_a_missing_package(env_modules, absent):
    absent("rlt_absent_for_gym_tests")
    env_modules("rlt_env_needing_pkg", "import rlt_absent_for_gym_tests  # noqa: F401\n")
    with pytest.raises(MissingDependencyError) as info:
        make_single_env(GymnasiumParams(id="rlt_env_needing_pkg:Whatever-v0"))
    assert info.value.module == "rlt_absent_for_gym_tests"
    assert info.value.requirement == "rlt-absent-for-gym-tests"


def test_dependency_not_installed_from_an_env_is_a_user_error(env_modules):
    """Gymnasium's own signal for a missing dependency (not an ImportError in Gymnasium 1.x)."""
    env_modules("rlt_env_dni", (
        "import gymnasium\n"
        "class Env(gymnasium.Env):\n"
        "    def __init__(self):\n"
        "        raise gymnasium.error.DependencyNotInstalled('the simulator is missing: pip install rlt-sim')\n"
        "gymnasium.register('RltDni-v0', entry_point=Env)\n"))
    with pytest.raises(UserError, match=r"env 'rlt_env_dni:RltDni-v0': the simulator is missing: pip install"):
        make_single_env(GymnasiumParams(id="rlt_env_dni:RltDni-v0"))
    gymnasium.registry.pop("RltDni-v0", None)


def test_an_installed_module_that_fails_to_import_is_not_hidden(env_modules):
    """Not a missing package (a broken install or a bug): shown as it is."""
    env_modules("rlt_env_broken", "from json import rlt_no_such_name  # noqa: F401\n")
    with pytest.raises(ImportError, match="rlt_no_such_name") as info:
        make_single_env(GymnasiumParams(id="rlt_env_broken:Whatever-v0"))
    assert not isinstance(info.value, UserError)
