"""Space files: parsing every distribution kind, refusing malformed ones, and the overrides trials get."""

from __future__ import annotations

import pytest

from rlightning_core.errors import ConfigError
from rlightning_core.sweep.space import Param, parse_space
from rlightning_core.sweep.summary import TrialRow, best_row, write_summary


def test_every_kind_parses_with_its_bounds():
    space = parse_space({"params": {
        "a.lr": {"type": "log_uniform", "low": 1e-4, "high": 1e-2},
        "a.n": {"type": "int", "low": 1, "high": 8, "step": 1},
        "a.mb": {"type": "categorical", "choices": [64, "x", True]},
        "a.g": {"type": "uniform", "low": 0.9, "high": 0.99}}, "pruner": {"type": "none"}})
    assert [p.kind for p in space.params] == ["log_uniform", "int", "categorical", "uniform"]
    assert space.params[0] == Param("a.lr", "log_uniform", low=1e-4, high=1e-2, log=True)
    assert space.params[2].extremes() == (64, True) and space.pruner == "none"


def test_problems_are_reported_together_with_their_keys():
    with pytest.raises(ConfigError) as info:
        parse_space({"params": {
            "a": {"type": "log_uniform", "low": 0, "high": 1},
            "b": {"type": "int", "low": 1.5, "high": 3},
            "c": {"type": "categorical", "choices": [[1, 2]]},
            "d": {"type": "uniform", "low": 1, "high": 2, "steps": 0.1},
            "e": 3}, "extra": 1}, source="s.yaml")
    problems = info.value.problems
    assert "extra: unknown key; allowed keys: params, pruner, sampler" in problems
    assert "params.a.low: a log_uniform distribution needs low > 0, got 0" in problems
    assert "params.b.low: expected an integer, got 1.5" in problems
    assert "params.c.choices: each choice must be a number, string, bool or null, got [1, 2]" in problems
    assert "params.d.steps: unknown key for a uniform distribution; allowed keys: type, low, high, step" in problems
    assert any(p.startswith("params.e: expected a mapping") for p in problems)


def test_an_empty_space_is_refused():
    with pytest.raises(ConfigError, match="params: expected a non-empty mapping"):
        parse_space({"pruner": {"type": "median"}})


def test_best_row_follows_the_direction_and_ignores_pruned(tmp_path):
    rows = [TrialRow(0, "COMPLETE", 10.0, 1.0, {"k": 1}), TrialRow(1, "PRUNED", 99.0, 1.0, {"k": 2}),
            TrialRow(2, "COMPLETE", 5.0, 1.0, {"k": 3}), TrialRow(3, "FAIL", None, None, {"k": 4}, error="boom")]
    assert best_row(rows, "maximize").number == 0
    assert best_row(rows, "minimize").number == 2
    files = write_summary(tmp_path, rows, metric="m", direction="minimize")
    assert [f.name for f in files][:2] == ["summary.csv", "summary.md"]
    md = (tmp_path / "summary.md").read_text()
    assert "| 2 (best) | COMPLETE | 5 |" in md and "2 complete, 1 pruned, 1 fail" in md
    assert (tmp_path / "summary.csv").read_text().splitlines()[4].endswith(",boom")
