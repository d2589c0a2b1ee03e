"""mkdocs hooks: add the generated reference pages, and fill config tables marked in hand-written pages.

- ``on_files``: the pages of ``scripts/gen_reference.py`` (configuration, hooks, CLI) are committed under
  ``docs/reference/``; the build regenerates them and warns (``--strict`` fails) when a committed page differs,
  rather than publishing content that is not in the repository. A plugin of ``plugins/`` that is not installed
  is a warning too: its params would be missing from the reference. ``benchmarks.md`` is owned by the
  benchmarks work; until it exists a placeholder page says so.
- ``on_page_markdown``: ``<!-- config-table ClassName prefix -->`` becomes the table of that
  ``rlightning_core.config.schema`` class (e.g. the cluster options on the Ray page).
"""

from __future__ import annotations

import importlib.util
import logging
import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.hooks.rlightning")
_HERE = Path(__file__).resolve().parent
_TABLE_RE = re.compile(r"<!--\s*config-table\s+(\w+)\s*([\w.\[\]]*)\s*-->")

BENCHMARKS_PLACEHOLDER = """# Benchmarks

The benchmark results page (`docs/benchmarks.md`) has not been written yet. The benchmark scripts live in
`benchmarks/` and run with `nox -s bench`.
"""


def _gen() -> Any:
    module = sys.modules.get("rlightning_gen_reference")
    if module is None:
        spec = importlib.util.spec_from_file_location("rlightning_gen_reference", _HERE / "gen_reference.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return module


def on_files(files: Any, config: Any) -> Any:
    """Check the committed reference pages against the code (and add the benchmarks placeholder if missing)."""
    gen = _gen()
    _, missing = gen.repo_plugin_set()
    for dist in missing:
        log.warning("plugin distribution %s (plugins/) is not installed: the reference pages cannot be checked "
                    "against its components (pip install -e plugins/%s)", dist, dist)
    if not missing:
        for rel in gen.stale_pages(gen.pages(), Path(config["docs_dir"])):
            log.warning("docs/%s differs from what the code generates: regenerate it with "
                        "python scripts/gen_reference.py and commit it", rel)
    if files.get_file_from_path("benchmarks.md") is None:
        files.append(File.generated(config, "benchmarks.md", content=BENCHMARKS_PLACEHOLDER))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace ``<!-- config-table Class prefix -->`` markers by generated tables."""
    from rlightning_core.config import schema

    def table(match: re.Match[str]) -> str:
        cls = getattr(schema, match.group(1), None)
        if cls is None:
            log.warning("%s: unknown config class %r in a config-table marker", page.file.src_uri, match.group(1))
            return match.group(0)
        return str(_gen().config_table(cls, match.group(2)))

    return _TABLE_RE.sub(table, markdown)
