"""Checks shared by the test suites: is a legend cut off at a figure's edge; does a report's text
name data it did not use, or use internal jargon?"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from matplotlib.figure import Figure


def _px(bounds: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(round(float(v), 1) for v in bounds)


def legends_outside(fig: Figure) -> list[str]:
    """Each legend of ``fig`` whose drawn box is not inside the figure, as text (empty: none)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    page = fig.bbox
    out = []
    for leg in legends:
        box = leg.get_window_extent(renderer)
        if (
            box.x0 < page.x0 - 0.5
            or box.y0 < page.y0 - 0.5
            or box.x1 > page.x1 + 0.5
            or box.y1 > page.y1 + 0.5
        ):
            out.append(
                f"legend {[t.get_text() for t in leg.get_texts()][:3]} at {_px(box.bounds)} outside {_px(page.bounds)}"
            )
    return out


def check_legends_when_saved(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on, every ``Figure.savefig`` first records the legends it would cut off."""
    clipped: list[str] = []
    original = Figure.savefig

    def savefig(self: Figure, fname: object, *args: object, **kwargs: object) -> None:
        dpi = kwargs.get("dpi")
        if isinstance(dpi, int | float):
            self.set_dpi(dpi)  # measured at the resolution of the file
        clipped.extend(f"{Path(str(fname)).name}: {c}" for c in legends_outside(self))
        original(self, fname, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Figure, "savefig", savefig)
    return clipped


#: Names of the public data sets the tour's runs use when they are found.
PUBLIC = re.compile(r"UCI Adult|MovieLens 100K|movielens-100k", re.I)
#: Internal references that mean nothing to a reader of the report.
JARGON = [r"\bissue \d+", r"\bseed 0\d\d\b", r"\bclaims? \d", r"\bspec\b"]


def visible_text(doc: str) -> str:
    """The report as a reader sees it: no markup, no embedded images."""
    doc = re.sub(r'src="data:[^"]+"', "", doc)
    doc = re.sub(r"<style>.*?</style>", "", doc, flags=re.S)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", doc)))


def jargon_in(text: str) -> list[str]:
    return [m.group(0) for pat in JARGON for m in re.finditer(pat, text, re.I)]
