"""The generated reference covers every hook, config field and command; mkdocs builds the site strictly."""

from __future__ import annotations

import importlib.util
import inspect
import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import yaml

from rlightning_core import hookspecs
from rlightning_core.config import schema
from rlightning_core.plugins import hook_names

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _load_gen():
    spec = importlib.util.spec_from_file_location("rlightning_gen_reference", ROOT / "scripts" / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gen = _load_gen()


@pytest.fixture(scope="module")
def plugin_set():
    return gen.repo_plugin_set()[0]


@pytest.fixture(scope="module")
def hooks_page(plugin_set):
    return gen.hooks_reference(plugin_set)


@pytest.fixture(scope="module")
def config_page(plugin_set):
    return gen.config_reference(plugin_set)


@pytest.mark.parametrize("name", hook_names())
def test_every_hook_has_a_section_with_signature_parameters_and_example(hooks_page, name):
    section = hooks_page.split(f"### `{name}`\n", 1)[1].split("\n### ", 1)[0]
    params = inspect.signature(getattr(hookspecs, name)).parameters
    assert f"def {name}(" in section
    for param in params.values():
        assert f"| {gen._code(param.name)} | {gen._code(str(param.annotation))} |" in section
    assert "**Example.**" in section and "@hookimpl" in section
    assert "**Plugins that use it:**" in section


def test_hook_sections_are_grouped_by_phase_and_name_their_users(hooks_page, plugin_set):
    assert [line for line in hooks_page.splitlines() if line.startswith("## ")] == [
        "## Registration", "## CLI", "## Run lifecycle"]
    assert "**Plugins that use it:** `builtin` (rlightning)" in hooks_page


def _config_classes():
    """(class, key prefix) for MainConfig and every attrs section under it."""
    out, todo = [], [(schema.MainConfig, "")]
    while todo:
        cls, prefix = todo.pop()
        out.append((cls, prefix))
        for f in attrs.fields(attrs.resolve_types(cls)):
            inner = gen._nested(f.type)
            if inner is not None:
                todo.append((inner, f"{prefix}.{f.name}".lstrip(".") + ("[i]" if "list" in str(f.type) else "")))
    return out


def _fields_documented(page: str, cls: type, prefix: str) -> None:
    from rlightning_cli.fielddocs import field_docs

    docs = field_docs(cls)
    for f in attrs.fields(cls):
        key = f"{prefix}.{f.name}" if prefix else f.name
        assert f"| {gen._code(key)} |" in page, f"{key} is missing from the configuration reference"
        assert docs.get(f.name), f"{cls.__name__}.{f.name} has no doc string under it"
        assert gen._cell(docs[f.name]) in page, f"the doc of {key} is missing"


@pytest.mark.parametrize("cls, prefix", _config_classes(), ids=lambda x: getattr(x, "__name__", x))
def test_every_config_field_is_in_the_reference_with_its_doc(config_page, cls, prefix):
    _fields_documented(config_page, cls, prefix)


def test_every_registered_params_class_is_in_the_reference(config_page, plugin_set):
    slots = {"env": "env[i].params", "policy": "policy.params", "buffer": "buffer.params",
             "preprocessor": "preprocessors[i].params", "engine": "engine.params",
             "logger": "logging.loggers[i].params"}
    specs = plugin_set.registry.specs()
    assert {s.name for s in specs} >= {"rollout", "replay", "sync", "jsonl", "normalize_obs"}
    for spec in specs:
        assert f"### {spec.kind} `{spec.name}`" in config_page
        if spec.config is not None:
            _fields_documented(config_page, spec.config, slots[spec.kind])


def test_cli_reference_has_every_command():
    page = gen.cli_reference()
    for command in ("train", "eval", "list-plugins", "config show", "config validate", "new-plugin", "plot"):
        assert f"## `rlightning {command}`" in page
    assert "--metric" in page and "--kind [env|policy|buffer|preprocessor|engine|logger]" in page
    assert "\\b" not in page, "a command's help prints click's \\b marker (a raw docstring?)"


def _nav_files(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [f for v in node.values() for f in _nav_files(v)]
    return [f for item in node for f in _nav_files(item)]


def test_nav_lists_every_page_and_the_generated_ones():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    nav = _nav_files(config["nav"])
    written = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert written <= set(nav), f"pages missing from the nav: {written - set(nav)}"
    assert set(gen.PAGES) <= set(nav) and "benchmarks.md" in nav
    assert set(gen.PAGES) <= written, "the generated pages are committed, so links to them work in a checkout"
    assert config["strict"] is True and config["theme"]["name"] == "material"


def test_the_committed_reference_pages_are_what_the_code_generates():
    if gen.repo_plugin_set()[1]:
        pytest.skip("the plugins of plugins/ are not all installed; the pages document them")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLIGHTNING_")}
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_reference.py"), "--check"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, f"stale reference pages: {proc.stderr}"


def test_a_stale_or_missing_page_is_reported(tmp_path):
    generated = {"reference/hooks.md": "# Hook reference\n", "reference/cli.md": "# CLI reference\n"}
    (tmp_path / "reference").mkdir()
    (tmp_path / "reference" / "hooks.md").write_text("# Hook reference\n", encoding="utf-8")
    assert gen.stale_pages(generated, tmp_path) == ["reference/cli.md"]
    (tmp_path / "reference" / "cli.md").write_text("# CLI reference (old)\n", encoding="utf-8")
    assert gen.stale_pages(generated, tmp_path) == ["reference/cli.md"]
    (tmp_path / "reference" / "cli.md").write_text("# CLI reference\n", encoding="utf-8")
    assert gen.stale_pages(generated, tmp_path) == []


def test_config_table_markers_name_real_classes():
    import re

    for page in DOCS.rglob("*.md"):
        for name in re.findall(r"<!--\s*config-table\s+(\w+)", page.read_text(encoding="utf-8")):
            assert attrs.has(getattr(schema, name)), f"{page}: {name} is not a config class"


def test_mkdocs_builds_strictly(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs and mkdocs-material are not installed (pip install -e '.[docs]')")
    if gen.repo_plugin_set()[1]:
        pytest.skip("the plugins of plugins/ are not all installed; the strict build would warn about them")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLIGHTNING_")}
    env["NO_MKDOCS_2_WARNING"] = "1"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    hooks_html = (tmp_path / "site" / "reference" / "hooks" / "index.html").read_text(encoding="utf-8")
    assert all(name in hooks_html for name in hook_names())
    ray_html = (tmp_path / "site" / "ray" / "index.html").read_text(encoding="utf-8")
    assert "<code>cluster.weight_sync</code>" in ray_html and "config-table" not in ray_html


def test_list_plugins_verbose_shows_each_fields_doc():
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLIGHTNING_")}
    run = [sys.executable, "-m", "rlightning_cli", "list-plugins", "--kind", "buffer"]
    text = subprocess.run([*run, "-v"], capture_output=True, text=True, env=env, cwd=ROOT, check=True).stdout
    assert "        capacity = 1000000\n            Transitions kept; the oldest are overwritten (circular).\n" in text
    data = subprocess.run([*run, "--json"], capture_output=True, text=True, env=env, cwd=ROOT, check=True).stdout
    import json

    replay = next(c for c in json.loads(data)["components"] if c["name"] == "replay")
    assert replay["docs"]["n_step"] == "Store n-step discounted returns (truncated at episode ends)."
