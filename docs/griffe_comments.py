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

from typing import Any

import griffe


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
