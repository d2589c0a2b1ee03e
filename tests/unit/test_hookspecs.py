"""Meta-tests that keep the plugin contract honest: every hook is documented, and every hook has a test."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from rlightning_core import hookspecs
from rlightning_core.plugins import hook_names
from rlightning_core.types import HOOK_FOR_KIND

TESTS_DIR = Path(__file__).resolve().parents[1]
LIFECYCLE = ("on_run_start", "on_metrics", "on_eval", "on_checkpoint", "on_video", "on_run_end")


def spec_function(name: str):
    return getattr(hookspecs, name)


def test_hook_names_are_exactly_the_specs():
    decorated = [n for n, f in vars(hookspecs).items()
                 if inspect.isfunction(f) and hasattr(f, "rlightning_spec")]
    assert hook_names() == decorated
    assert len(set(hook_names())) == len(hook_names())
    expected = {*HOOK_FOR_KIND.values(), "register_commands", *LIFECYCLE}
    assert set(hook_names()) == expected


@pytest.mark.parametrize("name", hook_names())
def test_hook_spec_is_documented_with_an_example(name):
    fn = spec_function(name)
    doc = inspect.getdoc(fn)
    assert doc, f"hook {name} has no docstring"
    assert "Example" in doc, f"hook {name}'s docstring has no Example section"
    example = doc.split("Example", 1)[1]
    assert f"def {name}(" in example, f"hook {name}'s example does not implement it"
    assert "@hookimpl" in example
    params = list(inspect.signature(fn).parameters)
    if params:
        assert "Args:" in doc, f"hook {name} does not document its arguments"
        for param in params:
            assert re.search(rf"^\s+{param}:", doc, re.M), f"hook {name} does not document argument {param!r}"


@pytest.mark.parametrize("name", hook_names())
def test_hook_spec_is_typed_and_plain(name):
    fn = spec_function(name)
    sig = inspect.signature(fn)
    assert sig.return_annotation in (None, "None")
    assert all(p.annotation is not inspect.Parameter.empty for p in sig.parameters.values())
    opts = fn.rlightning_spec
    # Nothing in the contract is fired before all plugins can load, and none stops at a first result.
    assert not opts.get("historic")
    assert not opts.get("firstresult") or "Stops at first non-None result" in inspect.getdoc(fn)


def _test_sources() -> dict[Path, str]:
    this = Path(__file__).resolve()
    return {p: p.read_text(encoding="utf-8") for p in sorted(TESTS_DIR.rglob("*.py")) if p.resolve() != this}


@pytest.mark.parametrize("name", hook_names())
def test_every_hook_is_exercised_by_a_test(name):
    """A test plugin somewhere under tests/ implements the hook (and so the tests run it)."""
    sources = _test_sources()
    implementing = [p.relative_to(TESTS_DIR).as_posix() for p, text in sources.items()
                    if re.search(rf"\bdef {name}\(", text)]
    assert implementing, f"no test plugin under tests/ implements hook {name!r}: add a test for it"
