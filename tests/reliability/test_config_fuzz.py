"""Config and CLI fuzzing: generated YAML / JSON / TOML documents and override strings never produce a
traceback or a hang. The loader returns a config or raises a user error; ``rlightning config validate`` exits 0
or 2 with a message. In-process through the CLI's own entry point (fast), plus real subprocesses for the
nastiest inputs (alias bomb, deep nesting, huge numbers).

Example counts are modest by default; ``RLIGHTNING_FUZZ_PROFILE=long`` (the ``fuzz`` nox session) runs many more.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_helpers import CARTPOLE, run_cli

settings.register_profile("rlightning-fuzz", max_examples=40, deadline=3000,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.register_profile("rlightning-fuzz-long", max_examples=1500, deadline=5000,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
PROFILE = "rlightning-fuzz-long" if os.environ.get("RLIGHTNING_FUZZ_PROFILE") == "long" else "rlightning-fuzz"

BASE = yaml.safe_load(CARTPOLE.read_text())

# -- strategies -------------------------------------------------------------------------------------------------

texts = st.text(st.characters(blacklist_categories=()), max_size=30)  # surrogates and controls included
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=10**30, max_value=10**300),
    st.floats(allow_nan=True, allow_infinity=True), texts,
    st.sampled_from(["", "0", "-1", "1e309", "nan", "null", "~", "yes", "on", "3e-4", "ppo", "gymnasium", "ray",
                     "local", "CartPole-v1", "${x}", "__import__('os')", "!!python/none", "&a", "*a", "[", "{",
                     "\u202e", "\ud800", "\x00"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(texts, inner, max_size=4)), max_leaves=20)
SECTION_KEYS = ["env", "policy", "buffer", "engine", "cluster", "logging", "checkpoint", "preprocessors", "seed",
                "name", "run_dir", "type", "params", "num_envs", "num_workers", "total_steps", "lr", "id",
                "loggers", "every", "mode", "hidden_sizes", "nan_policy", "step_timeout_s", "max_restarts"]
keys = st.one_of(st.sampled_from(SECTION_KEYS), texts)


@st.composite
def mutated_configs(draw: Any) -> dict[str, Any]:
    """The CartPole example with a few random paths replaced, added or deleted (reaches the schema's depths)."""
    data = json.loads(json.dumps(BASE))
    for _ in range(draw(st.integers(1, 4))):
        node = data
        for _depth in range(draw(st.integers(0, 3))):
            children = [k for k, v in node.items() if isinstance(v, dict)] if isinstance(node, dict) else []
            if not children:
                break
            node = node[draw(st.sampled_from(sorted(children)))]
        action = draw(st.sampled_from(["set", "set", "delete"]))
        if action == "delete" and node:
            node.pop(draw(st.sampled_from(sorted(node))), None)
        else:
            node[draw(keys)] = draw(values)
    return data


documents = st.one_of(mutated_configs(), st.dictionaries(keys, values, max_size=6), values)


def _dump(data: Any, fmt: str) -> str | None:
    """``data`` as a YAML / JSON / TOML document (``None`` when the format cannot express it)."""
    try:
        if fmt == "yaml":
            return yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
        if fmt == "json":
            return json.dumps(data, ensure_ascii=False)
        import tomli_w

        return tomli_w.dumps(data) if isinstance(data, dict) else None
    except (TypeError, ValueError, yaml.YAMLError):
        return None


def _cli(argv: list[str]) -> tuple[int, str]:
    """``rlightning ARGV`` in this process through the console script's own entry point: (exit code, output)."""
    from rlightning_cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0) if not isinstance(exc.code, str) else 1
    return code, out.getvalue() + err.getvalue()


def _load(path: Path, overrides: list[str]) -> None:
    """The loader either returns a config or raises a user error; anything else fails the test."""
    from rlightning_core import load_config
    from rlightning_core.errors import UserError

    with contextlib.suppress(UserError):
        load_config(path, overrides)


def _check_cli(path: Path, overrides: list[str]) -> None:
    code, output = _cli(["config", "validate", str(path), *overrides])
    assert code in (0, 2), output
    assert "Traceback" not in output and "unexpected error" not in output, output
    assert output.strip(), "no message"


# -- properties -------------------------------------------------------------------------------------------------


@settings(settings.get_profile(PROFILE))
@given(data=documents, fmt=st.sampled_from(["yaml", "json", "toml"]))
def test_generated_documents_never_crash_the_loader_or_the_cli(tmp_path_factory, data, fmt):
    text = _dump(data, fmt)
    if text is None:
        return
    path = tmp_path_factory.mktemp("doc") / f"config.{fmt}"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    _load(path, [])
    _check_cli(path, [])


@settings(settings.get_profile(PROFILE))
@given(raw=st.text(st.characters(blacklist_categories=("Cs",)), max_size=200), fmt=st.sampled_from(["yaml", "json",
                                                                                                     "toml"]))
def test_arbitrary_text_never_crashes(tmp_path_factory, raw, fmt):
    path = tmp_path_factory.mktemp("raw") / f"config.{fmt}"
    path.write_text(raw, encoding="utf-8")
    _load(path, [])
    _check_cli(path, [])


override_keys = st.one_of(
    st.sampled_from(["seed", "name", "policy.params.lr", "env[0].num_envs", "env.params.id", "engine.total_steps",
                     "cluster.mode", "logging.loggers", "env[5].type", "policy", "env", "a.b.c", "env[0]",
                     "policy.params.hidden_sizes[0]", "checkpoint.every.x", "0", "env.0.type", "x[99999999999]"]),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=20),
)
override_values = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=40),
    st.sampled_from(["[", "{a: 1", "&a [*a]", "[&a [1], *a]", "!!python/object/apply:os.system ['true']",
                     "1" * 5000, ".inf", "-.nan", "{?: 1}", "[[[[[[[[[[]]]]]]]]]]", "!!binary aGk=", "2001-01-01",
                     "{1: 2}", "null", "~", "= =", "'unterminated"]),
    values.map(lambda v: json.dumps(v, ensure_ascii=False)),
)


@settings(settings.get_profile(PROFILE))
@given(overrides=st.lists(st.tuples(override_keys, override_values), max_size=4))
def test_override_strings_never_crash(overrides):
    args = [f"{k}={v}" for k, v in overrides]
    _load(CARTPOLE, args)
    _check_cli(CARTPOLE, args)


# -- named nasties, in process and as real subprocesses ------------------------------------------------------

BOMB = "".join(f"{chr(97 + i)}: &{chr(97 + i)} [{', '.join([f'*{chr(96 + i)}'] * 10) if i else 'x'}]\n"
               for i in range(9))
NASTIES = {
    "alias_bomb.yaml": BOMB + "env: {type: gymnasium, params: {id: *i}}\npolicy: {type: ppo}\n",
    "self_reference.yaml": "env: &e {type: gymnasium, params: {x: *e}}\npolicy: {type: ppo}\n",
    "deep.yaml": "env: " + "[" * 3000 + "]" * 3000 + "\n",
    "deep.json": '{"env": ' + "[" * 100000 + "]" * 100000 + "}",
    "deep.toml": "a = " + "[" * 3000 + "]" * 3000 + "\n",
    "huge_int.yaml": "seed: " + "9" * 5000 + "\n",
    "huge_int.json": '{"seed": ' + "9" * 5000 + "}",
    "int_keys.yaml": "1: 2\nenv: {type: gymnasium}\npolicy: {type: ppo}\n",
    "null_key.yaml": "~: 2\n",
    "binary.yaml": "name: !!binary aGVsbG8=\n",
    "set.yaml": "name: !!set {a, b}\n",
    "dates.toml": "seed = 1979-05-27\nname = 1979-05-27T07:32:00Z\n",
    "nan_everywhere.yaml": "seed: .nan\nengine: {total_steps: .inf}\nenv: {type: gymnasium, num_envs: -.inf}\n",
    "bom.yaml": "\ufeffenv: {type: gymnasium}\n",
    "tabs.yaml": "env:\n\t type: gymnasium\n",
    "empty.json": "",
}


@pytest.mark.parametrize("name", sorted(NASTIES))
def test_named_nasty_inputs_are_user_errors_in_process(tmp_path, name):
    path = tmp_path / name
    path.write_text(NASTIES[name], encoding="utf-8")
    _check_cli(path, [])


@pytest.mark.parametrize("name", ["alias_bomb.yaml", "deep.json", "huge_int.yaml", "self_reference.yaml"])
def test_named_nasty_inputs_in_a_real_subprocess(tmp_path, name):
    path = tmp_path / name
    path.write_text(NASTIES[name], encoding="utf-8")
    proc = run_cli(["config", "validate", str(path)], timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and str(path) in proc.stderr


def test_the_alias_bomb_is_refused_without_expanding_it(tmp_path):
    """The bomb expands to over 10**8 values; refusing it must cost work and memory bounded by the loader's limits, not
    by the expansion. Both are counted (function calls seen by a profiler, peak traced allocation), not timed."""
    import tracemalloc

    path = tmp_path / "bomb.yaml"
    path.write_text(NASTIES["alias_bomb.yaml"], encoding="utf-8")
    _cli(["config", "validate", str(path)])  # first-use imports are not what is measured
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += 1

    tracemalloc.start()
    sys.setprofile(count)
    try:
        code, output = _cli(["config", "validate", str(path)])
    finally:
        sys.setprofile(None)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert code == 2 and "YAML aliases" in output
    # a refusal walks at most MAX_VALUES (10**5) values: about 10**6 calls and well under a megabyte today
    assert calls < 20_000_000, calls
    assert peak < 64 * 2**20, peak
