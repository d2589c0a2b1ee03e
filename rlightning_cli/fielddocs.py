"""Field docs of attrs config classes: the string literal written under each field, read with ``ast``.

rlightning's config classes document a field the way cleanrl's ``Args`` does::

    lr: float = field(default=3e-4, validator=gt(0))
    \"\"\"Adam learning rate.\"\"\"

Python keeps no trace of those strings at run time, so they are read from the class's source. Used by
``rlightning list-plugins --verbose`` and by the generated configuration reference.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import textwrap
import types
import typing
from typing import Any

import attrs

__all__ = ["field_docs", "field_rows", "format_default", "format_type"]


def _own_docs(cls: type) -> dict[str, str]:
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef)), None)
    if node is None:
        return {}
    docs: dict[str, str] = {}
    body = node.body
    for stmt, nxt in itertools.pairwise(body):
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            docs[stmt.target.id] = inspect.cleandoc(nxt.value.value)
    return docs


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> doc string for an attrs class, inherited fields included (subclasses win)."""
    docs: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        if attrs.has(base):
            docs.update(_own_docs(base))
    return docs


def format_type(tp: Any) -> str:
    """A readable type: ``int``, ``float | None``, ``list[int]``, ``LoggerConfig``."""
    if isinstance(tp, str):
        return tp
    if tp is type(None):
        return "None"
    if tp is Any:
        return "any"
    origin = typing.get_origin(tp)
    if origin is None:
        return getattr(tp, "__name__", repr(tp))
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(format_type(a) for a in args)
    name = getattr(origin, "__name__", repr(origin))
    return f"{name}[{', '.join(format_type(a) for a in args)}]" if args else name


def format_default(field: Any) -> str:
    """The default of an attrs field as config-file text (``required`` when there is none)."""
    default = field.default
    if default is attrs.NOTHING:
        return "required"
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        if default.takes_self:
            return "computed"
        default = default.factory()
    if attrs.has(type(default)):
        return "(section defaults)"
    if default is None:
        return "null"
    if isinstance(default, bool):
        return "true" if default else "false"
    return repr(default) if isinstance(default, str) else str(default)


def field_rows(cls: type) -> list[dict[str, str]]:
    """One row per field of an attrs class: ``name``, ``type``, ``default`` and ``doc``."""
    docs = field_docs(cls)
    resolved = attrs.resolve_types(cls) if _resolvable(cls) else cls
    return [{"name": f.name, "type": format_type(f.type), "default": format_default(f), "doc": docs.get(f.name, "")}
            for f in attrs.fields(resolved)]


def _resolvable(cls: type) -> bool:
    try:
        attrs.resolve_types(cls)
    except Exception:  # a forward reference that cannot be resolved: keep the annotation strings
        return False
    return True
