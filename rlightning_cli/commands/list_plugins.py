"""``rlightning list-plugins``: every plugin distribution, what it provides, and how loading went."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import attrs
import click

from rlightning_core.types import KINDS


@click.command("list-plugins")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--kind", type=click.Choice(KINDS), help="Only plugins providing this kind of component.")
@click.option("--check", is_flag=True,
              help="Import each plugin in a separate process, validate its hooks, report heavy imports.")
@click.option("--verbose", "-v", is_flag=True,
              help="Per component: description, config class, defaults and field docs.")
def list_plugins(as_json: bool, kind: str | None, check: bool, verbose: bool) -> int:
    """List installed plugins: distribution, version, components by kind, hooks, status."""
    from rlightning_core.plugins import get_plugins

    plugins = get_plugins()
    rows = [p.to_json() for p in plugins.plugins]
    if kind is not None:
        # broken plugins, and loaded ones that provide nothing, stay listed: they may be the ones that should
        # have provided this kind
        rows = [r for r in rows if kind in r["provides"] or r["status"] in ("error", "incompatible")
                or (r["status"] == "warning" and not r["provides"])]
    components = _components(plugins, kind)
    checks = _run_checks([r["name"] for r in rows]) if check else {}
    if as_json:
        payload: dict[str, Any] = {"plugins": rows, "components": components}
        if check:
            payload["checks"] = checks
        click.echo(json.dumps(payload, indent=2))
    else:
        _print_table(rows, components if verbose else None, checks)
    return 1 if any(not c["ok"] for c in checks.values()) else 0


def warn_load_failures(plugins: Any) -> None:
    """One warning line on stderr per plugin that failed to load (commands that run print these first)."""
    for p in plugins.errors():
        click.echo(f"warning: plugin {p.name!r} ({p.distribution} {p.version}) failed to load, its components "
                   f"are unavailable: {p.error} (rlightning list-plugins shows every plugin)", err=True)


def _components(plugins: Any, kind: str | None) -> list[dict[str, Any]]:
    out = []
    for spec in plugins.registry.specs(kind):
        defaults: dict[str, Any] | None = None
        docs: dict[str, str] | None = None
        if spec.config is not None:
            from rlightning_cli.fielddocs import field_docs

            docs = {name: " ".join(doc.split()) for name, doc in field_docs(spec.config).items()}
            defaults = {}
            for f in attrs.fields(spec.config):
                d = f.default
                if isinstance(d, attrs.Factory):  # type: ignore[arg-type]
                    d = d.factory() if not d.takes_self else None
                defaults[f.name] = "<required>" if d is attrs.NOTHING else _plain(d)
        out.append({
            "kind": spec.kind, "name": spec.name, "qualified_name": spec.qualified_name,
            "plugin": spec.plugin, "distribution": spec.distribution, "version": spec.version,
            "description": spec.description,
            "config": f"{spec.config.__module__}.{spec.config.__qualname__}" if spec.config else None,
            "defaults": defaults,
            "docs": docs,
        })
    return out


def _plain(value: Any) -> Any:
    if attrs.has(type(value)):
        return attrs.asdict(value)
    if isinstance(value, str | int | float | bool | type(None) | list | dict | tuple):
        return value
    return repr(value)


def _print_table(rows: list[dict[str, Any]], components: list[dict[str, Any]] | None,
                 checks: dict[str, dict[str, Any]]) -> None:
    header = ("PLUGIN", "DISTRIBUTION", "VERSION", "STATUS", "COMPONENTS", "HOOKS")
    table = [header]
    for r in rows:
        provides = "; ".join(f"{k}: {', '.join(v)}" for k, v in r["provides"].items()) or "-"
        hooks = ", ".join(r["hooks"]) or "-"
        table.append((r["name"], r["distribution"], r["version"], r["status"], provides, hooks))
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header) - 1)]
    for row in table:
        cells = [str(c).ljust(w) for c, w in zip(row[:-1], widths, strict=False)]
        click.echo("  ".join([*cells, str(row[-1])]).rstrip())
    for r in rows:
        if r["error"]:
            click.echo(f"\n{r['name']} ({r['distribution']} {r['version']}) {r['status']}: {r['error']}")
        elif r["warnings"]:
            click.echo(f"\n{r['name']} ({r['distribution']} {r['version']}) warning: {'; '.join(r['warnings'])}")
    if components:
        click.echo("\nComponents:")
        for c in components:
            click.echo(f"  {c['kind']} {c['name']} ({c['distribution']} {c['version']})"
                       + (f": {c['description']}" if c["description"] else ""))
            if c["config"]:
                click.echo(f"      config: {c['config']}")
                for key, value in (c["defaults"] or {}).items():
                    click.echo(f"        {key} = {value!r}" if value != "<required>" else f"        {key} (required)")
                    doc = (c["docs"] or {}).get(key)
                    if doc:
                        click.echo(f"            {doc.replace('``', '`')}")
    for name, c in checks.items():
        state = "ok" if c["ok"] else "FAILED"
        extra = f" ({c['detail']})" if c["detail"] else ""
        click.echo(f"check {name}: {state}{extra}")


_CHECK_SCRIPT = r"""
import json, sys
from rlightning_core.plugins import load_plugins
ps = load_plugins(strict=False)
info = next((p for p in ps.plugins if p.name == sys.argv[1]), None)
heavy = sorted(m for m in ("torch", "ray") if m in sys.modules)
print(json.dumps({"status": info.status if info else "missing", "error": info.error if info else None,
                  "warnings": info.warnings if info else [], "heavy_imports": heavy}))
"""


def _run_checks(names: list[str]) -> dict[str, dict[str, Any]]:
    """Load each plugin alone in a fresh interpreter: import errors, hook validation, heavy imports.

    Unlike a plain listing, a check fails on warnings too: it is what a plugin author runs before a release.
    """
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        env = {**os.environ, "RLIGHTNING_LOAD_PLUGINS": "" if name == "builtin" else name}
        env.pop("RLIGHTNING_DISABLE_PLUGINS", None)
        proc = subprocess.run([sys.executable, "-c", _CHECK_SCRIPT, name], env=env, capture_output=True,
                              text=True, timeout=120, check=False)
        try:
            data = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            results[name] = {"ok": False, "detail": f"checker crashed: {proc.stderr.strip()[-300:]}"}
            continue
        problems = []
        if data["status"] not in ("loaded", "warning"):
            problems.append(f"{data['status']}: {data['error']}")
        problems += data["warnings"]
        if data["heavy_imports"] and not any(w.startswith("imports ") for w in data["warnings"]):
            problems.append(f"imports {', '.join(data['heavy_imports'])} at import time "
                            "(move heavy imports into factories)")
        results[name] = {"ok": not problems, "detail": "; ".join(problems), **data}
    return results
