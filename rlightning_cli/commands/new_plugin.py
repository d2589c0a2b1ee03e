"""``rlightning new-plugin NAME --kind KIND``: scaffold a plugin distribution that installs and passes its tests.

The files come from ``rlightning_cli/templates/`` (``common/`` plus one folder per kind); placeholders are
written ``{{name}}``. Nothing heavy is imported: the command only writes text files.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import click

from rlightning_core.errors import UserError
from rlightning_core.types import HOOK_FOR_KIND, KINDS

_NAME_RE = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")

#: Per kind: the example logic the scaffold implements (which the author replaces), description, implementation
#: module and class suffix, what the factory receives, how to use it, and extra arguments of the conformance check.
_KINDS: dict[str, dict[str, str]] = {
    "env": {
        "example": "a corridor (walk right to reach the goal)",
        "description": "A corridor env for rlightning: walk right to reach the goal.",
        "impl_module": "env", "suffix": "Env",
        "factory_kwargs": "num_envs, seed, worker_index and render_mode",
        "usage": "```yaml\nenv:\n  type: {{name}}\n  num_envs: 8\n  params: {size: 8}\n```",
        "check_args": "",
    },
    "policy": {
        "example": "an advantage actor-critic (A2C) for Discrete actions",
        "description": "An advantage actor-critic (A2C) policy for rlightning, for Discrete actions.",
        "impl_module": "policy", "suffix": "Policy",
        "factory_kwargs": "observation_space, action_space, role, device and seed",
        "usage": "```yaml\npolicy:\n  type: {{name}}\n  params: {lr: 1.0e-3}\n```",
        "check_args": "",
    },
    "buffer": {
        "example": "a first-in-first-out replay buffer",
        "description": "A first-in-first-out replay buffer for rlightning.",
        "impl_module": "buffer", "suffix": "Buffer",
        "factory_kwargs": "spec (a BufferSpec)",
        "usage": "```yaml\nbuffer:\n  type: {{name}}\n  params: {capacity: 100000}\n```",
        "check_args": "",
    },
    "preprocessor": {
        "example": "running max-abs observation scaling",
        "description": "Running max-abs observation scaling for rlightning.",
        "impl_module": "preprocessor", "suffix": "Preprocessor",
        "factory_kwargs": "observation_space and num_envs",
        "usage": "```yaml\npreprocessors:\n  - type: {{name}}\n```",
        "check_args": "",
    },
    "engine": {
        "example": "an on-policy loop (collect, learn, sync weights) written against the execution contract",
        "description": "An on-policy training loop for rlightning.",
        "impl_module": "engine", "suffix": "Engine",
        "factory_kwargs": "config, env_group, policy_group and buffer",
        "usage": "```yaml\nengine:\n  type: {{name}}\n  params: {rollout_steps: 128}\n```",
        "check_args": ', {"rollout_steps": 8}',
    },
    "logger": {
        "example": "a tab-separated metrics file",
        "description": "A tab-separated metrics logger for rlightning.",
        "impl_module": "logger", "suffix": "Logger",
        "factory_kwargs": "run_dir",
        "usage": "```yaml\nlogging:\n  loggers:\n    - type: {{name}}\n```",
        "check_args": "",
    },
}


#: Per kind, the extra generated tests (``tests/test_<ident>_<name>.py`` from ``<kind>/test_<name>.py.tmpl``).
_EXTRA_FILES: dict[str, tuple[str, ...]] = {"engine": ("trains",)}


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[-_]", name))


def plan_files(name: str, kind: str) -> tuple[str, dict[str, str]]:
    """The distribution name and ``{relative path: text}`` of the plugin ``name`` of ``kind``.

    Raises:
        UserError: ``name`` is not a valid plugin name or ``kind`` is unknown.
    """
    if kind not in _KINDS:
        raise UserError(f"unknown kind {kind!r}; kinds are {', '.join(KINDS)}")
    short = name.removeprefix("rlightning-").removeprefix("rlightning_")
    if not _NAME_RE.match(short):
        raise UserError(f"plugin name {name!r}: use lowercase letters and digits, words joined by '-' or '_', "
                        "starting with a letter (e.g. gridworld, my-env)")
    dist = f"rlightning-{short.replace('_', '-')}"
    module = dist.replace("-", "_")
    ident = short.replace("-", "_")
    info = _KINDS[kind]
    values = {
        "name": short, "dist": dist, "module": module, "ident": ident, "Class": _camel(short), "kind": kind,
        "hook": HOOK_FOR_KIND[kind], "impl_module": info["impl_module"], "impl_file": f"{info['impl_module']}.py",
        "impl_class": f"{_camel(short)}{info['suffix']}", "factory_kwargs": info["factory_kwargs"],
        "description": f"{info['description'].rstrip('.')} (the example rlightning new-plugin generates: "
                       "replace it).",
        "example": info["example"], "check_args": info["check_args"],
    }
    values["usage"] = _fill(info["usage"], values)
    root = resources.files("rlightning_cli") / "templates"
    layout = {
        "pyproject.toml": root / "common" / "pyproject.toml.tmpl",
        "README.md": root / "common" / "README.md.tmpl",
        f"{module}/__init__.py": root / "common" / "__init__.py.tmpl",
        f"{module}/plugin.py": root / "common" / "plugin.py.tmpl",
        f"{module}/params.py": root / kind / "params.py.tmpl",
        f"{module}/{info['impl_module']}.py": root / kind / f"{info['impl_module']}.py.tmpl",
        f"tests/test_{ident}_conformance.py": root / "common" / "test_conformance.py.tmpl",
    }
    for extra in _EXTRA_FILES.get(kind, ()):  # kind-specific tests, e.g. an engine trains in both modes
        layout[f"tests/test_{ident}_{extra}.py"] = root / kind / f"test_{extra}.py.tmpl"
    files = {path: _fill(src.read_text(encoding="utf-8"), values) for path, src in layout.items()}
    files[f"{module}/py.typed"] = ""
    return dist, files


def _fill(text: str, values: dict[str, str]) -> str:
    def sub(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise KeyError(f"template placeholder {{{{{key}}}}} has no value")
        return values[key]

    return re.sub(r"\{\{(\w+)\}\}", sub, text)


@click.command("new-plugin")
@click.argument("name")
@click.option("--kind", required=True, type=click.Choice(KINDS), help="Kind of component the plugin provides.")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=".", show_default=True,
              help="Folder in which to create the plugin's folder.")
def new_plugin(name: str, kind: str, directory: str) -> int:
    """Create a plugin distribution NAME: pyproject with the entry point, a working component, README, tests.

    The plugin installs with `pip install -e DIR/rlightning-NAME` and passes its own tests (rlightning's
    conformance kit) as generated.
    """
    dist, files = plan_files(name, kind)
    target = Path(directory) / dist
    if target.exists() and any(target.iterdir()):
        raise UserError(f"{target} already exists and is not empty; choose another name or --dir")
    for rel, text in files.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    short = dist.removeprefix("rlightning-")
    module = dist.replace("-", "_")
    click.echo(f"Created {target} ({kind} plugin, component {short!r}):")
    for rel in sorted(files):
        click.echo(f"  {rel}")
    click.echo(f"\nThe {kind} is a working example, {_KINDS[kind]['example']}, under the name {short!r}: replace its "
               f"logic in {module}/{_KINDS[kind]['impl_module']}.py (and its options in {module}/params.py) with "
               f"{short}'s own. The tests check the {kind} contract, not the example's behaviour.")
    click.echo(f"\nNext:\n  pip install -e {target}\n  rlightning list-plugins --kind {kind}\n"
               f"  pytest {target / 'tests'}")
    return 0
