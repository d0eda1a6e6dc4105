"""No figure that an experiment saves cuts a legend off at its edge (the shared ``save_figure``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.figure import Figure

from dpopt.experiments.plots import new_figure, save_figure
from report_checks import check_legends_when_saved, legends_outside

LABELS = ["DP-GD", "DP-GDwS", "DP-HB", "DP-M-ASG", "DP-M-ASG*", "DP-MAG", "DP-NAG"]


def _lines(ax: object, labels: list[str]) -> None:
    for k, label in enumerate(labels):
        ax.plot([0, 1], [k, k + 1], label=label)  # type: ignore[attr-defined]


def test_a_figure_legend_wider_than_the_figure_gets_fewer_columns(tmp_path: Path) -> None:
    # kuru-fig4.6's layout: one 3.6-inch panel, seven methods in a shared legend of four columns
    fig, axes = new_figure(1, 1, figsize=(3.6, 3.8))
    _lines(axes[0, 0], LABELS)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=4, fontsize=8)
    assert legends_outside(fig)  # as drawn, the legend is cut off left and right
    save_figure(fig, tmp_path / "narrow.png")
    assert legends_outside(fig) == []
    assert 1 < fig.legends[0]._ncols < 4  # fewer columns, not one long list
    assert [t.get_text() for t in fig.legends[0].get_texts()] == LABELS


@pytest.mark.filterwarnings("ignore:constrained_layout not applied")
def test_a_legend_that_cannot_fit_makes_the_figure_larger(tmp_path: Path) -> None:
    fig, axes = new_figure(1, 1, figsize=(3.0, 3.0))
    _lines(axes[0, 0], ["a label much longer than the narrow figure it belongs to, on purpose"])
    axes[0, 0].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))
    width = fig.get_figwidth()
    assert legends_outside(fig)
    save_figure(fig, tmp_path / "long.png", tidy=False)
    assert legends_outside(fig) == []
    assert fig.get_figwidth() > width


def test_every_saved_figure_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clipped = check_legends_when_saved(monkeypatch)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = Figure(figsize=(2.0, 2.0))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    _lines(ax, LABELS)
    fig.legend(loc="lower center", ncols=7)
    fig.savefig(tmp_path / "raw.png", dpi=100)  # not through save_figure: nothing fixes it
    assert clipped and clipped[0].startswith("raw.png: legend")
