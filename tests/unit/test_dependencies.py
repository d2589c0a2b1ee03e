"""``rlightning_core.dependencies``: one error type for a missing optional package, and how configs report it."""

from __future__ import annotations

import pickle
import sys
from typing import Any

import pytest
from attrs import define, field
from cattrs.errors import BaseValidationError

from rlightning_core.config.structuring import collect_errors, structure
from rlightning_core.dependencies import import_module, is_installed, missing_dependency, pip_name, require
from rlightning_core.errors import MissingDependencyError, UserError

ABSENT = "rlt_no_such_package_for_tests"


def test_the_error_names_the_module_what_needs_it_and_the_pip_command():
    err = MissingDependencyError("mujoco", "rlightning-gymnasium[mujoco]", "env 'Hopper-v5'")
    assert isinstance(err, UserError)  # the CLI prints it without a traceback, exit code 2
    assert str(err) == ("env 'Hopper-v5' needs the Python module 'mujoco', which is not installed; install it "
                        "with: pip install 'rlightning-gymnasium[mujoco]'")
    assert (err.module, err.requirement, err.extra) == ("mujoco", "rlightning-gymnasium[mujoco]", "mujoco")
    assert MissingDependencyError("matplotlib", "matplotlib", "rlightning plot").pip_command == \
        "pip install matplotlib"
    assert MissingDependencyError("matplotlib", "matplotlib", "rlightning plot").extra is None
    noted = MissingDependencyError("Box2D", "x[box2d]", "env 'LunarLander-v3'", note="needs swig")
    assert str(noted).endswith("pip install 'x[box2d]' (needs swig)")


def test_the_error_survives_pickling():  # it crosses process and Ray actor boundaries
    err = MissingDependencyError("ray", "rlightning[ray]", "Ray mode", note="n")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is MissingDependencyError and str(back) == str(err) and back.note == "n"


def test_is_installed_looks_without_importing():
    assert is_installed("json") and is_installed("json.decoder")
    assert not is_installed(ABSENT)
    assert not is_installed(f"{ABSENT}.sub")  # a parent that is missing is not an error
    assert "pytest_rlt_never_imported" not in sys.modules


def test_a_module_blocked_in_sys_modules_is_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "rlt_blocked_mod", None)
    assert not is_installed("rlt_blocked_mod")


def test_require_raises_for_the_first_missing_module():
    require("json", pip="x", needed_by="y")
    with pytest.raises(MissingDependencyError) as info:
        require(("json", ABSENT, "other_absent_zz"), pip="rlightning-x[extra]", needed_by="env 'E-v0'")
    assert info.value.module == ABSENT and info.value.requirement == "rlightning-x[extra]"


def test_missing_dependency_only_for_a_module_that_is_not_installed():
    try:
        __import__(ABSENT)
    except ModuleNotFoundError as exc:
        err = missing_dependency(exc, needed_by="thing")
    assert err is not None and err.module == ABSENT and err.requirement == pip_name(ABSENT)
    try:
        __import__("json.rlt_no_such_submodule")
    except ModuleNotFoundError as exc:  # an installed package without that submodule: a version mismatch
        assert missing_dependency(exc, needed_by="thing") is None
    assert missing_dependency(ImportError("cannot import name"), needed_by="thing") is None
    assert missing_dependency(ValueError("x"), needed_by="thing") is None


def test_pip_names_differ_from_import_names_where_pypi_says_so():
    assert pip_name("Box2D") == "box2d"
    assert pip_name("ale_py.env") == "ale-py"
    assert pip_name("pymunk") == "pymunk"


def test_import_module_imports_or_names_the_pip_command():
    assert import_module("json", pip="x", needed_by="y").__name__ == "json"
    with pytest.raises(MissingDependencyError, match=r"rlightning plot needs the Python module .* "
                                                     r"pip install 'rlightning\[plot\]'"):
        import_module(ABSENT, pip="rlightning[plot]", needed_by="rlightning plot")


def _needs_absent(_inst: Any, _attr: Any, value: Any) -> None:
    if value == "fancy":
        require(ABSENT, pip="rlightning-demo[fancy]", needed_by=f"env {value!r}")


@define(frozen=True, kw_only=True)
class DemoParams:
    """A plugin's params: a validator and a cross-field check that need an optional package."""

    id: str = field(validator=_needs_absent)
    render: bool = False

    def __attrs_post_init__(self) -> None:
        if self.render:
            require("rlt_other_absent", pip="rlightning-demo[render]", needed_by="rendering")


def _problems(data: dict[str, Any]) -> list[str]:
    out: list[str] = []
    try:
        structure(data, DemoParams)
    except BaseValidationError as exc:
        collect_errors(exc, "env[0].params", out)
    return out


def test_params_validators_report_a_missing_package_as_a_config_problem():
    """What a plugin's validator raises is collected with its key path, like any bad value."""
    assert _problems({"id": "plain"}) == []
    assert sorted(_problems({"id": "fancy", "render": "no"})) == [
        f"env[0].params.id: env 'fancy' needs the Python module {ABSENT!r}, which is not installed; install it "
        "with: pip install 'rlightning-demo[fancy]'",
        "env[0].params.render: expected bool (true or false), got 'no'",
    ]
    assert _problems({"id": "plain", "render": True}) == [
        "env[0].params: rendering needs the Python module 'rlt_other_absent', which is not installed; install it "
        "with: pip install 'rlightning-demo[render]'"]
