"""Every public name has an entry in the API reference (``docs/reference/``).

Public names: the ``__all__`` of every public module of ``src/dpopt`` (no part of its dotted path
starts with ``_``), the top-level ``dpopt`` included.  The reference pages are read statically
here (fast, no MkDocs needed): a ``::: path`` directive documents ``path`` and, for a module,
the members it renders (its ``__all__``, or the names of an explicit ``members:`` option; none
with ``members: false``).  A name is documented when its own path (``module.name``) or the path
where it is defined (a re-export, or an alias such as ``RoundInfo = IterationInfo``) is, and the
definition has a docstring or a ``#:`` comment (above it, or after it on its line) (mkdocstrings leaves undocumented objects out;
``docs/griffe_comments.py`` turns ``#:`` comments into docstrings).  ``tests/test_docs.py`` checks
the same names against the built site's ``objects.inv``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import dpopt

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"

_DIRECTIVE = re.compile(r"^::: ([\w.]+)[ \t]*\n((?:[ \t]+\S.*\n)*)", re.M)
_MEMBERS = re.compile(r"^\s+members:\s*(.*)$", re.M)


def public_modules() -> list[str]:
    """Dotted names of dpopt's public modules (no part starts with ``_``), ``dpopt`` first."""
    found = ["dpopt"]
    for info in pkgutil.walk_packages(dpopt.__path__, "dpopt."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            found.append(info.name)
    return found


def public_names() -> list[tuple[str, str]]:
    """``(module, name)`` for every name of every public module's ``__all__``."""
    return [
        (module, name)
        for module in public_modules()
        for name in getattr(importlib.import_module(module), "__all__", ())
    ]


def defined_at(module: str, name: str) -> str | None:
    """Where ``module.name`` is defined, when Python knows (modules, classes, functions)."""
    obj = getattr(importlib.import_module(module), name)
    if inspect.ismodule(obj):
        return obj.__name__
    if inspect.isclass(obj) or inspect.isfunction(obj):
        return f"{obj.__module__}.{obj.__qualname__}"
    return None


def _directives() -> dict[str, Any]:
    """``path -> members option`` (None: default; False; or a list of names) of every directive."""
    out: dict[str, Any] = {}
    for page in sorted(REFERENCE.glob("*.md")):
        for m in _DIRECTIVE.finditer(page.read_text(encoding="utf-8")):
            found = _MEMBERS.search(m.group(2))
            members: Any = None
            if found:
                value = found.group(1).strip()
                members = False if value == "false" else re.findall(r"[\w.]+", value)
            out[m.group(1)] = members
    return out


def _module_or_none(path: str) -> ModuleType | None:
    try:
        return importlib.import_module(path)
    except ImportError:
        return None


@cache
def _source(module: str) -> tuple[list[str], list[ast.stmt]]:
    """A module's source lines and top-level statements."""
    text = inspect.getsource(importlib.import_module(module))
    return text.splitlines(), ast.parse(text).body


def _top_level(module: str) -> dict[str, ast.stmt]:
    """The names a module's own source defines at top level (classes, functions, assignments)."""
    out: dict[str, ast.stmt] = {}
    for node in _source(module)[1]:
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            out[node.name] = node
        elif isinstance(node, ast.Assign):
            out.update({t.id: node for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
    return out


def _imported_from(module: str, name: str) -> str | None:
    """The dpopt module that ``module``'s source imports ``name`` from (``from X import name``), or None."""
    for node in _source(module)[1]:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dpopt"):
            if any(alias.name == name and alias.asname in (None, name) for alias in node.names):
                return node.module
    return None


def documented_paths() -> set[str]:
    """Every path the reference pages render an entry for (by this file's static reading): a
    module's directive renders what it defines and what its ``__all__`` exports (mkdocstrings'
    default with ``filters: ["!^_"]``), or the names of its ``members:`` option."""
    out: set[str] = set()
    for path, members in _directives().items():
        out.add(path)
        module = _module_or_none(path)
        if module is None or members is False:
            continue
        names = members
        if names is None:
            names = [n for n in _top_level(path) if not n.startswith("_")]
            names += list(getattr(module, "__all__", ()))
        out |= {f"{path}.{n}" for n in names}
    return out


def has_documentation(path: str) -> bool:
    """Whether the object at ``path`` has a docstring, or a ``#:`` comment, where it is defined."""
    module = _module_or_none(path)
    if module is not None:
        return bool(module.__doc__)
    parent, _, name = path.rpartition(".")
    value = getattr(importlib.import_module(parent), name)
    if inspect.isclass(value) or inspect.isfunction(value):  # found where it is defined
        parent, name = value.__module__, value.__qualname__
    source, body = _source(parent)
    node = _top_level(parent).get(name)
    if node is None:
        origin = _imported_from(parent, name)  # a constant re-exported by a package's __init__
        return origin is not None and has_documentation(f"{origin}.{name}")
    if isinstance(node, ast.ClassDef | ast.FunctionDef):
        return ast.get_docstring(node) is not None
    i = body.index(node)
    after = body[i + 1] if i + 1 < len(body) else None
    if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
        return True  # a docstring after the assignment
    return source[node.lineno - 2].lstrip().startswith("#:") or "  #: " in source[node.lineno - 1]


def _entry(module: str, name: str, documented: set[str]) -> str | None:
    """The documented path that is ``module.name``'s entry, or None."""
    candidates = [f"{module}.{name}", defined_at(module, name)]
    value = getattr(importlib.import_module(module), name)
    candidates += [  # a re-exported constant: the module that defines it is documented
        p
        for p in sorted(documented)
        if p.rpartition(".")[2] == name
        and (m := _module_or_none(p.rpartition(".")[0])) is not None
        and getattr(m, name, None) is value
    ]
    for path in candidates:
        if path in documented and has_documentation(path):
            return path
    return None


def test_public_names_are_collected() -> None:
    names = public_names()
    assert ("dpopt", "minimize") in names and ("dpopt.iteration", "IterationInfo") in names
    assert ("dpopt.distributed.flower_engine", "FlowerEngine") in names  # imports without flwr
    assert not any(module.split(".")[-1].startswith("_") for module, _ in names)
    assert len(names) > 500


def test_every_public_name_has_a_reference_entry() -> None:
    documented = documented_paths()
    missing = [f"{m}.{n}" for m, n in public_names() if _entry(m, n, documented) is None]
    assert not missing, (
        f"{len(missing)} public names have no API reference entry (add a `::: module` directive to a "
        f"page of docs/reference/ and mkdocs.yml's nav, and a docstring or `#:` comment): {missing}"
    )


def test_reference_directives_name_existing_objects() -> None:
    for path in _directives():
        module, _, name = path.rpartition(".")
        assert _module_or_none(path) is not None or hasattr(importlib.import_module(module), name), path
