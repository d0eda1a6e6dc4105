"""Griffe extension for dpopt's documentation site (configured in ``mkdocs.yml``).

dpopt documents module constants and type aliases with Sphinx-style ``#:`` comments written just
above the assignment (``#: What it is.`` then ``NAME = ...``) or after it on its first line
(``NAME = ...  #: what it is``).  mkdocstrings reads docstrings
statically with griffe, which does not read comments, and leaves objects without a docstring out
of the reference.  This extension gives such an attribute the text of its ``#:`` comment block as
its docstring, so every documented constant has an API entry.  A real docstring (a string literal
after the assignment) wins.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

import griffe

#: A docstring line that is only a ``{name}`` placeholder, filled in when the module is imported.
_PLACEHOLDER = re.compile(r"^\s*\{[a-z_]+\}\s*$", re.M)


class SphinxComments(griffe.Extension):
    """Read ``#:`` comments above an attribute as its docstring."""

    def on_attribute_instance(self, *, node: Any, attr: griffe.Attribute, agent: Any, **kwargs: Any) -> None:
        if attr.docstring is not None or not attr.lineno or not isinstance(agent, griffe.Visitor):
            return
        lines = agent.code.splitlines()
        comment: list[str] = []
        i = attr.lineno - 2  # the line above the assignment (0-based)
        while i >= 0 and lines[i].lstrip().startswith("#:"):
            comment.insert(0, lines[i].lstrip()[2:].strip())
            i -= 1
        _, trailing, text = lines[attr.lineno - 1].partition("  #: ")
        if not comment and trailing:
            comment, i = [text.strip()], attr.lineno - 2
        if comment:
            attr.docstring = griffe.Docstring(
                "\n".join(comment),
                lineno=i + 2,
                endlineno=attr.lineno - 1,
                parent=attr,
                parser=agent.docstring_parser,
                parser_options=agent.docstring_options,
            )


class TemplatedDocstrings(griffe.Extension):
    """Document functions whose docstrings are templates filled in at import time, as users see them.

    The DP gradient methods and the HAMSI solvers share blocks of parameter documentation through
    ``{common}``-style placeholders that the module fills in when it is imported; griffe reads the
    source, so this extension imports the module and takes the function's run-time docstring.  Such
    functions take their options as keywords forwarded into an options object (``**kwargs``), so
    the documented options are not in the signature: for functions with ``**kwargs`` (only) the
    parser does not warn about documented names missing from the signature, or about types the
    signature cannot give.
    """

    def on_function_instance(self, *, node: Any, func: griffe.Function, agent: Any, **kwargs: Any) -> None:
        if func.docstring is None:
            return
        text = func.docstring.value
        if _PLACEHOLDER.search(text):
            module = importlib.import_module(func.module.path)
            obj: Any = module
            for part in func.path[len(func.module.path) + 1 :].split("."):
                obj = getattr(obj, part)
            text = inspect.cleandoc(obj.__doc__ or "")
        options = dict(agent.docstring_options or {})
        if any(p.kind is griffe.ParameterKind.var_keyword for p in func.parameters):
            options.update(warn_unknown_params=False, warn_missing_types=False)
        elif text == func.docstring.value:
            return
        func.docstring = griffe.Docstring(
            text,
            lineno=func.docstring.lineno,
            endlineno=func.docstring.endlineno,
            parent=func,
            parser=agent.docstring_parser,
            parser_options=options,
        )
