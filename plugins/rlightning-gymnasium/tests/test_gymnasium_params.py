"""GymnasiumParams: structured by core's strict converter; wrappers only from gymnasium.wrappers."""

from __future__ import annotations

import subprocess
import sys

import pytest
from cattrs.errors import BaseValidationError
from rlightning_gymnasium.params import GymnasiumParams, WrapperSpec, available_wrappers, resolve_wrapper

from rlightning_core.config.structuring import collect_errors, structure


def problems(data: dict) -> list[str]:
    try:
        structure(data, GymnasiumParams)
    except BaseValidationError as exc:
        out: list[str] = []
        collect_errors(exc, "env[0].params", out)
        return out
    return []


def test_defaults_and_wrappers_structure() -> None:
    p = structure({"id": "CartPole-v1", "wrappers": [{"type": "gymnasium.wrappers.NormalizeObservation",
                                                     "kwargs": {"epsilon": 1e-6}}, {"type": "ClipReward"}]},
                  GymnasiumParams)
    assert p.vectorization == "sync"
    assert p.max_episode_steps is None
    assert p.kwargs == {}
    assert p.wrappers == [
        WrapperSpec(type="gymnasium.wrappers.NormalizeObservation", kwargs={"epsilon": 1e-6}),
        WrapperSpec(type="ClipReward"),
    ]


def test_id_is_required_and_checked() -> None:
    assert problems({}) == ["env[0].params.id: required key is missing"]
    (line,) = problems({"id": "CartPol-v1"})
    assert line.startswith("env[0].params.id: ") and "CartPole" in line
    # ``module:EnvId``: the id is checked when the env is made (importing the module registers it), but a
    # module that is not installed is refused now, with what to install.
    assert problems({"id": "gymnasium.envs.classic_control:CartPole-v1"}) == []
    assert problems({"id": "some_package:SomeEnv-v0"}) == [
        "env[0].params.id: env 'some_package:SomeEnv-v0' needs the Python module 'some_package', which is not "
        "installed; install it with: pip install some-package"]


def test_unknown_wrapper_names_the_options() -> None:
    (line,) = problems({"id": "CartPole-v1", "wrappers": [{"type": "ClipActoin"}]})
    assert line.startswith("env[0].params.wrappers[0].type: unknown gymnasium wrapper 'ClipActoin'")
    assert "Did you mean 'ClipAction'?" in line
    assert "NormalizeObservation" in line


@pytest.mark.parametrize("name", ["os.system", "gymnasium.wrappers.vector.NormalizeObservation",
                                  "builtins:eval", "numpy.random.seed", "gymnasium.Wrapper", "", "vector"])
def test_wrapper_types_never_import_other_modules(name: str) -> None:
    with pytest.raises(ValueError, match="wrapper"):
        resolve_wrapper(name)
    (line,) = problems({"id": "CartPole-v1", "wrappers": [{"type": name}]})
    assert line.startswith("env[0].params.wrappers[0].type: ")


def test_excluded_wrappers_say_why() -> None:
    (line,) = problems({"id": "CartPole-v1", "wrappers": [{"type": "Autoreset"}]})
    assert "cannot be used here" in line and "resets finished episodes" in line
    assert "Autoreset" not in available_wrappers()


def test_wrapper_kwargs_are_checked_against_the_constructor() -> None:
    (line,) = problems({"id": "CartPole-v1", "wrappers": [{"type": "TimeLimit", "kwargs": {"max_steps": 3}}]})
    assert line.startswith("env[0].params.wrappers[0]: wrapper 'TimeLimit': bad kwargs ['max_steps']")
    (line,) = problems({"id": "CartPole-v1", "wrappers": [{"type": "TimeLimit"}]})
    assert "max_episode_steps" in line  # the missing required argument is named


def test_field_validators_and_reserved_kwargs() -> None:
    lines = problems({"id": "CartPole-v1", "vectorization": "subproc", "max_episode_steps": 0,
                      "context": "threads", "extra": 1})
    assert sorted(lines) == sorted([
        "env[0].params.extra: unknown key; allowed keys: id, kwargs, wrappers, vectorization, "
        "max_episode_steps, context, preset, role",
        "env[0].params.vectorization: must be one of 'sync', 'async', 'envpool'; got 'subproc'",
        "env[0].params.max_episode_steps: must be >= 1, got 0",
        "env[0].params.context: must be one of None, 'fork', 'spawn', 'forkserver'; got 'threads'",
    ])
    (line,) = problems({"id": "CartPole-v1", "kwargs": {"max_episode_steps": 5}})
    assert "use params.max_episode_steps" in line


def test_python_callers_may_write_wrappers_as_names_or_dicts() -> None:
    p = GymnasiumParams(id="CartPole-v1", wrappers=["ClipReward", {"type": "TimeLimit",
                                                                   "kwargs": {"max_episode_steps": 3}}])
    assert p.wrappers == [WrapperSpec(type="ClipReward"),
                          WrapperSpec(type="TimeLimit", kwargs={"max_episode_steps": 3})]


def test_params_module_is_light() -> None:
    code = ("import sys, rlightning_gymnasium.plugin, rlightning_gymnasium; "
            "heavy = [m for m in ('gymnasium', 'torch', 'ray') if m in sys.modules]; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)
