"""Checks on saved figures shared by the test suites: is any legend cut off at the figure's edge?"""

from __future__ import annotations

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
