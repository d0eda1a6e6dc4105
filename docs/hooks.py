"""MkDocs hooks for dpopt's documentation site (configured in ``mkdocs.yml``).

* Navigation: pages listed in ``nav`` that are not (yet) in ``docs/`` are dropped, and top-level
  pages in ``docs/`` that ``nav`` does not list (results pages written by benchmarks and
  reproductions) are added to the "Results" section, so a page landing or moving never breaks the
  strict build and never goes missing from the navigation.
  Links to such missing pages become plain text.
* Sphinx roles: docstrings use ``:class:`~dpopt.x.Y``` and the like (numpydoc's convention); the
  rendered ``:class:<code>...</code>`` becomes a cross-reference to the object's API entry (plain
  code when the object is not documented).
* Logging: mkdocstrings reads docstrings statically; ``dpopt.solvers.hamsi`` fills a shared
  ``{common}`` parameter block into two docstrings at import time, which the static parser reports
  as an unparsable line.  That one known message is dropped; every other warning still fails the
  strict build.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

_KNOWN = ("Could not parse line '{common}'",)
_RESULTS = "Results"
_missing: set[str] = set()  # pages listed in nav but not (yet) written
_ROLE = re.compile(
    r":(?:py:)?(?:mod|class|func|meth|attr|data|exc|obj|const):<code>(~?)([\w.]+)(\(\))?</code>"
)
_LINK = re.compile(r"\[([^\]]+)\]\(((?:\.\./)*)([\w.-]+\.md)(#[^)]*)?\)")


class _DropKnown(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(k in message for k in _KNOWN)


def _listed(nav: Any) -> set[str]:
    out: set[str] = set()
    if isinstance(nav, str):
        out.add(nav)
    elif isinstance(nav, list):
        for item in nav:
            out |= _listed(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            out |= _listed(value)
    return out


def _prune(nav: Any, docs: Path) -> Any:
    if isinstance(nav, str):
        if nav.endswith(".md") and not (docs / nav).is_file():
            _missing.add(nav)
            return None
        return nav
    if isinstance(nav, list):
        kept = [p for p in (_prune(item, docs) for item in nav) if p is not None]
        return kept or None
    if isinstance(nav, dict):
        kept_d = {k: p for k, v in nav.items() if (p := _prune(v, docs)) is not None}
        return kept_d or None
    return nav


def on_config(config: Any) -> Any:
    _missing.clear()
    for handler in logging.getLogger("mkdocs").handlers:  # includes strict mode's warning counter
        handler.addFilter(_DropKnown())
    nav = config.get("nav")
    if not nav:
        return config
    docs = Path(config["docs_dir"])
    listed = _listed(nav)
    extra = sorted(p.name for p in docs.glob("*.md") if p.name not in listed)
    nav = _prune(nav, docs) or []
    if extra:
        section = next((item for item in nav if isinstance(item, dict) and _RESULTS in item), None)
        if section is None:
            section = {_RESULTS: []}
            nav.insert(max(len(nav) - 3, 0), section)
        section[_RESULTS].extend(extra)
    config["nav"] = nav
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """A link to a page that the navigation lists but that is not written yet becomes plain text
    (every other broken link still fails the strict build)."""

    def unlink(m: re.Match[str]) -> str:
        return m.group(1) if m.group(3) in _missing else m.group(0)

    return _LINK.sub(unlink, markdown)


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """Sphinx roles in rendered docstrings become optional cross-references (resolved by autorefs)."""

    def ref(m: re.Match[str]) -> str:
        identifier = m.group(2)
        title = identifier.rsplit(".", 1)[-1] if m.group(1) else identifier
        return f'<autoref identifier="{identifier}" optional><code>{title}{m.group(3) or ""}</code></autoref>'

    return _ROLE.sub(ref, html)
