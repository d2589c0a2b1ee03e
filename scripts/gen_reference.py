"""Generate the reference pages of the docs from the code: configuration, hooks, CLI.

The pages are built from what the code says, so they cannot drift:

- configuration: every field of the attrs config classes (``rlightning_core/config/schema.py``) and of every
  component's params class (core's and the plugins' in ``plugins/``), with its type, default and the doc
  string written under it (read with ``ast``);
- hooks: every hook spec of ``rlightning_core/hookspecs.py``: signature, typed parameters, when it is called,
  an example, and the plugins that implement it;
- CLI: the ``--help`` of every ``rlightning`` command.

The pages are committed under ``docs/reference/`` so that links to them work in a checkout, not only on the
built site. ``python scripts/gen_reference.py`` rewrites them after a change to the code they document;
``--check`` exits 1 naming the pages that are stale (a test runs it, and ``mkdocs build --strict`` fails on a
stale page instead of publishing different content).
"""

from __future__ import annotations

import argparse
import html
import inspect
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = {"reference/configuration.md", "reference/hooks.md", "reference/cli.md"}

__all__ = ["DOCS", "PAGES", "cli_reference", "config_reference", "config_table", "hooks_reference", "pages",
           "repo_plugin_set", "rst_to_md", "stale_pages"]


# -- helpers ------------------------------------------------------------------------------------------------


def rst_to_md(text: str) -> str:
    """Docstring markup to Markdown: ``x`` -> `x`, :class:`~a.b.C` -> `C`, :mod:`a.b` -> `a.b`."""
    text = re.sub(r":\w+:`~[\w.]*?\.?(\w+)`", r"`\1`", text)
    text = re.sub(r":\w+:`([^`]+)`", r"`\1`", text)
    return re.sub(r"``([^`]+)``", r"`\1`", text)


def _code(text: str) -> str:
    """Inline code that survives a table cell: HTML, with pipes as entities (an escaped pipe shows in code)."""
    return f"<code>{html.escape(text).replace('|', '&#124;')}</code>"


def _cell(text: str) -> str:
    """One Markdown table cell: one line; code spans as HTML and other pipes escaped."""
    text = " ".join(rst_to_md(text).split())
    parts = re.split(r"`([^`]+)`", text)
    return "".join(_code(p) if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts))


def repo_plugin_set() -> tuple[Any, list[str]]:
    """The builtin plugin plus the plugins of this repository (``plugins/*``) that are installed.

    Returns:
        The loaded plugin set, and the distributions of ``plugins/`` that are not installed (their
        components are then missing from the reference).
    """
    from rlightning_core.plugins import load_plugins
    from rlightning_core.registry import normalize_dist_name

    dists = []
    for pyproject in sorted(ROOT.glob("plugins/*/pyproject.toml")):
        dists.append(tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["name"])
    plugin_set = load_plugins(allow=dists, deny=[], strict=False)
    loaded = {normalize_dist_name(p.distribution) for p in plugin_set.plugins if p.loaded}
    return plugin_set, [d for d in dists if normalize_dist_name(d) not in loaded]


# -- configuration -----------------------------------------------------------------------------------------

_SECTIONS = [
    ("", "MainConfig", "The top level of a config file."),
    ("env[i]", "EnvConfig", "One env type (`env` is one mapping or a list of them)."),
    ("policy", "PolicyConfig", "The policy / algorithm."),
    ("buffer", "BufferConfig", "The data buffer."),
    ("preprocessors[i]", "PreprocessorConfig", "Each observation / reward preprocessor, applied in order."),
    ("engine", "EngineConfig", "The training loop and its stop rules."),
    ("cluster", "ClusterConfig", "Where workers run: one process or a Ray cluster."),
    ("logging", "LoggingConfig", "What is recorded about a run."),
    ("logging.loggers[i]", "LoggerConfig", "Each extra metrics logger."),
    ("checkpoint", "CheckpointConfig", "Checkpoint schedule and retention."),
]


def _nested(tp: Any) -> type | None:
    """The attrs class inside ``tp`` (``X``, ``list[X]``, ``X | None``), if any."""
    import typing

    if isinstance(tp, type) and attrs.has(tp):
        return tp
    for arg in typing.get_args(tp):
        found = _nested(arg)
        if found is not None:
            return found
    return None


def config_table(cls: type, prefix: str = "") -> str:
    """A Markdown table of ``cls``'s fields: key (under ``prefix``), type, default, description."""
    from rlightning_cli.fielddocs import field_rows

    lines = ["| key | type | default | description |", "|---|---|---|---|"]
    for row in field_rows(cls):
        key = f"{prefix}.{row['name']}" if prefix else row["name"]
        lines.append(f"| {_code(key)} | {_code(row['type'])} | {_code(row['default'])} | {_cell(row['doc'])} |")
    return "\n".join(lines)


def _params_sections(cls: type, path: str, seen: set[type]) -> Iterator[str]:
    """The table of a params class, then one table per attrs class nested in it."""
    yield config_table(cls, path)
    for f in attrs.fields(attrs.resolve_types(cls)):
        inner = _nested(f.type)
        if inner is not None and inner not in seen:
            seen.add(inner)
            sub = f"{path}.{f.name}" + ("[j]" if "list" in str(f.type) else "")
            yield f"\n`{sub}` items are `{inner.__name__}`:\n"
            yield from _params_sections(inner, sub, seen)


def config_reference(plugin_set: Any = None) -> str:
    """The configuration reference page."""
    from rlightning_core.config import schema

    if plugin_set is None:
        plugin_set, _ = repo_plugin_set()
    out = [
        "# Configuration reference",
        "",
        "Generated from the attrs classes by `scripts/gen_reference.py`: every key, its type, default and "
        "meaning. A `required` default means the key must be given; `(section defaults)` means the section may "
        "be left out. How files, overrides and errors work is explained in [Configuration](../configuration.md).",
        "",
        "## Sections",
        "",
    ]
    for path, name, blurb in _SECTIONS:
        cls = getattr(schema, name)
        title = f"`{path}`" if path else "Top level"
        out += [f"### {title}", "", f"{blurb} Class `{cls.__module__}.{name}`.", "",
                config_table(cls, path), ""]
    out += [
        "## Component params",
        "",
        "The `params` of a component are typed by the class its plugin registered; `rlightning list-plugins -v` "
        "prints the same. Components without a params class take no `params`.",
        "",
    ]
    slot = {"env": "env[i].params", "policy": "policy.params", "buffer": "buffer.params",
            "preprocessor": "preprocessors[i].params", "engine": "engine.params", "logger": "logging.loggers[i].params"}
    for spec in plugin_set.registry.specs():
        out += [f"### {spec.kind} `{spec.name}`", "",
                f"{_cell(spec.description)} From `{spec.distribution}`.", ""]
        if spec.config is None:
            out += ["Takes no params.", ""]
            continue
        out += [f"Class `{spec.config.__module__}.{spec.config.__qualname__}`.", ""]
        out += list(_params_sections(spec.config, slot[spec.kind], {spec.config}))
        out.append("")
    return "\n".join(out)


# -- hooks -------------------------------------------------------------------------------------------------


def _split_doc(doc: str) -> dict[str, str]:
    """A Google docstring's parts: ``summary``, ``body``, ``args`` (raw), ``example`` (dedented code)."""
    import textwrap

    parts = {"summary": "", "body": "", "args": "", "example": ""}
    text, _, example = doc.partition("Example::")
    text, _, args = text.partition("Args:")
    lines = text.strip().splitlines()
    parts["summary"] = lines[0] if lines else ""
    parts["body"] = "\n".join(lines[1:]).strip()
    parts["args"] = args
    parts["example"] = textwrap.dedent(example).strip("\n")
    return parts


def _arg_docs(args: str) -> dict[str, str]:
    docs: dict[str, str] = {}
    current = None
    for line in args.splitlines():
        m = re.match(r"^\s{4}(\w+):\s*(.*)$", line)
        if m:
            current = m.group(1)
            docs[current] = m.group(2)
        elif current and line.strip():
            docs[current] += " " + line.strip()
    return docs


def _phases() -> list[tuple[str, str, list[str]]]:
    """``(title, intro, hook names)`` per banner comment block of hookspecs.py, in order."""
    from rlightning_core import hookspecs
    from rlightning_core.plugins import hook_names

    source = Path(inspect.getsourcefile(hookspecs) or "").read_text(encoding="utf-8").splitlines()
    phases: list[tuple[str, str, list[str]]] = []
    names = set(hook_names())
    i = 0
    while i < len(source):
        line = source[i]
        if line.startswith("# ---") and i + 1 < len(source) and not source[i + 1].startswith("# ---"):
            block = []
            i += 1
            while i < len(source) and not source[i].startswith("# ---"):
                block.append(source[i].lstrip("# ").rstrip())
                i += 1
            text = " ".join(block)
            title, _, intro = text.partition(":")
            phases.append((title.strip(), intro.strip(), []))
        else:
            m = re.match(r"^def (\w+)\(", line)
            if m and m.group(1) in names and phases:
                phases[-1][2].append(m.group(1))
        i += 1
    return phases


def hooks_reference(plugin_set: Any = None) -> str:
    """The hook reference page: one section per hook."""
    from rlightning_core import hookspecs

    if plugin_set is None:
        plugin_set, _ = repo_plugin_set()
    users: dict[str, list[str]] = {}
    for info in plugin_set.plugins:
        for hook in info.hooks:
            users.setdefault(hook, []).append(f"`{info.name}` ({info.distribution})")
    out = [
        "# Hook reference",
        "",
        "Generated from `rlightning_core/hookspecs.py` by `scripts/gen_reference.py`. A plugin implements a "
        "hook by defining a function of the same name decorated with `rlightning_core.hookimpl` in the module "
        "its `rlightning` entry point names. An implementation may accept any subset of the hook's arguments "
        "(pluggy passes them by name), so hooks only ever gain arguments and old plugins keep working. "
        "Registration hooks receive `register(name, factory, *, config=None, description=\"\")`; see "
        "[Writing a plugin](../plugins/authoring.md).",
        "",
    ]
    for title, intro, names in _phases():
        out += [f"## {title}", "", rst_to_md(intro[:1].upper() + intro[1:]), ""]
        for name in names:
            fn = getattr(hookspecs, name)
            sig = inspect.signature(fn)
            parts = _split_doc(inspect.getdoc(fn) or "")
            args = _arg_docs(parts["args"])
            params = ", ".join(f"{p.name}: {p.annotation}" for p in sig.parameters.values())
            out += [f"### `{name}`", "", "```python", f"def {name}({params}) -> None", "```", "",
                    rst_to_md(parts["summary"]), ""]
            if parts["body"]:
                out += ["**When called.** " + rst_to_md(" ".join(parts["body"].split())), ""]
            if sig.parameters:
                out += ["| parameter | type | meaning |", "|---|---|---|"]
                for p in sig.parameters.values():
                    out.append(f"| {_code(p.name)} | {_code(str(p.annotation))} | {_cell(args.get(p.name, ''))} |")
                out.append("")
            if parts["example"]:
                out += ["**Example.**", "", "```python", parts["example"], "```", ""]
            used = users.get(name)
            out += ["**Plugins that use it:** " + (", ".join(used) if used else "none of the plugins shipped "
                                                     "with rlightning."), ""]
    return "\n".join(out)


# -- CLI ---------------------------------------------------------------------------------------------------


def _commands(group: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    import click

    for name in sorted(group.commands):
        cmd = group.commands[name]
        yield [*path, name], cmd
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, [*path, name])


def cli_reference() -> str:
    """The CLI reference page: the ``--help`` of every command."""
    import click

    from rlightning_cli.main import build_cli

    root = build_cli()
    out = ["# CLI reference", "",
           "Generated from the commands' own help by `scripts/gen_reference.py`; `rlightning COMMAND --help` "
           "prints the same. Exit codes: 0 success, 2 user error (bad config, unknown plugin, bad arguments), "
           "1 unexpected failure (a traceback is printed), 130 interrupted.", ""]
    for path, cmd in _commands(root, []):
        prog = " ".join(["rlightning", *path[:-1]])
        with click.Context(cmd, info_name=path[-1], parent=click.Context(root, info_name=prog),
                           max_content_width=100, terminal_width=100) as ctx:
            help_text = cmd.get_help(ctx)
        out += [f"## `rlightning {' '.join(path)}`", "", "```text", help_text, "```", ""]
    return "\n".join(out)


def pages() -> dict[str, str]:
    """Every generated page, by its path under ``docs/``.

    The CLI page is built against the same plugins as the others (this repository's), whatever else is
    installed, so that the pages do not depend on the machine that generates them.
    """
    from rlightning_core.plugins import reset_plugins

    plugin_set, missing = repo_plugin_set()
    if missing:
        raise SystemExit(f"the plugins of plugins/ must be installed to generate the reference pages; missing: "
                         f"{', '.join(missing)} (pip install -e plugins/<name>)")
    reset_plugins(plugin_set)  # build_cli() adds the commands of these plugins only
    try:
        return {
            "reference/configuration.md": config_reference(plugin_set),
            "reference/hooks.md": hooks_reference(plugin_set),
            "reference/cli.md": cli_reference(),
        }
    finally:
        reset_plugins()


def stale_pages(generated: dict[str, str], docs: Path = DOCS) -> list[str]:
    """The pages of ``generated`` whose file under ``docs`` is missing or differs."""
    return [rel for rel, text in sorted(generated.items())
            if not (docs / rel).is_file() or (docs / rel).read_text(encoding="utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    """Write the generated pages into ``--docs`` (default: this repository's ``docs/``), or ``--check`` them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=Path, default=DOCS, help="docs directory (default: %(default)s)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a committed page differs from what the code generates")
    args = parser.parse_args(argv)
    generated = pages()
    if args.check:
        stale = stale_pages(generated, args.docs)
        for rel in stale:
            print(f"{args.docs / rel} is stale: regenerate it with python scripts/gen_reference.py",
                  file=sys.stderr)
        return 1 if stale else 0
    for rel, text in generated.items():
        path = args.docs / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
