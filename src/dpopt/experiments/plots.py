"""Generic matplotlib helpers for experiments' ``plot`` functions.

They draw from records only (never recompute) and use :class:`matplotlib.figure.Figure` with the
Agg canvas directly, so they never touch pyplot's global state or need a display.  Typical use::

    def plot(records, out_dir):
        return [line_plot(records, x="epsilon", y="error", by="method",
                          path=out_dir / "error_vs_epsilon.png", logx=True, logy=True)]

For several panels, make a figure with :func:`new_figure`, draw on its axes with
:func:`draw_lines` / :func:`draw_bars`, and save it with :func:`save_figure`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dpopt.exceptions import InvalidParameterError
from dpopt.experiments.records import _keys, sort_key, summarize

__all__ = ["bar_plot", "draw_bars", "draw_lines", "line_plot", "new_figure", "save_figure"]

Spread = Literal["std", "sem", "minmax"] | None


def new_figure(
    nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float] | None = None
) -> tuple[Figure, np.ndarray]:
    """A new Agg-backed figure and its array of axes (always 2-d, shape ``(nrows, ncols)``)."""
    if figsize is None:
        figsize = (5.0 * ncols + 1.0, 3.6 * nrows + 0.4)
    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def save_figure(fig: Figure, path: str | os.PathLike[str], *, dpi: int = 120) -> Path:
    """Save ``fig`` as a PNG at ``path`` (creating parent directories) and return the path."""
    p = Path(path)
    if p.suffix.lower() != ".png":
        raise InvalidParameterError(f"path: figures are saved as PNG; use a .png file name, got {p.name!r}")
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=dpi, format="png")
    return p


def _label(keys: tuple[str, ...], values: tuple[Any, ...]) -> str:
    if not keys:
        return ""
    if len(keys) == 1:
        return str(values[0])
    return ", ".join(f"{k}={v}" for k, v in zip(keys, values, strict=True))


def _band(row: Mapping[str, Any], spread: Spread) -> tuple[float, float]:
    m = row["mean"]
    if spread == "std":
        return m - row["std"], m + row["std"]
    if spread == "sem":
        return m - row["sem"], m + row["sem"]
    if spread == "minmax":
        return row["min"], row["max"]
    return m, m


def _check_spread(spread: Spread) -> None:
    if spread not in ("std", "sem", "minmax", None):
        raise InvalidParameterError("spread: must be 'std', 'sem', 'minmax' or None")


def draw_lines(
    ax: Axes,
    records: Iterable[Mapping[str, Any]],
    *,
    x: str,
    y: str,
    by: str | Sequence[str] | None = None,
    spread: Spread = "std",
    logx: bool = False,
    logy: bool = False,
    marker: str = "o",
) -> int:
    """Draw the mean of ``y`` against numeric ``x``, one line per ``by`` group, with a shaded spread band.

    The mean and spread are taken over the records sharing ``(by, x)`` (the repetitions).  On a
    log y-axis, non-positive band edges are left undrawn.  Returns the number of lines drawn.
    """
    _check_spread(spread)
    group_keys = _keys(by)
    rows = summarize(records, y, (*group_keys, x))
    lines: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        lines.setdefault(tuple(row[k] for k in group_keys), []).append(row)
    for key in sorted(lines, key=lambda t: tuple(sort_key(v) for v in t)):
        pts = sorted(lines[key], key=lambda r: sort_key(r[x]))
        try:
            xs = np.array([float(r[x]) for r in pts])
        except (TypeError, ValueError):
            raise InvalidParameterError(f"draw_lines: x field {x!r} must be numeric; use draw_bars") from None
        means = np.array([r["mean"] for r in pts])
        (line,) = ax.plot(xs, means, marker=marker, markersize=3.5, label=_label(group_keys, key) or None)
        if spread is not None and any(r["count"] > 1 for r in pts):
            lo, hi = np.array([_band(r, spread) for r in pts]).T
            if logy:
                lo = np.where(lo > 0, lo, np.nan)
            ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.grid(True, alpha=0.3)
    if group_keys and lines:
        ax.legend(title=", ".join(group_keys) if len(group_keys) == 1 else None, fontsize="small")
    return len(lines)


def draw_bars(
    ax: Axes,
    records: Iterable[Mapping[str, Any]],
    *,
    x: str,
    y: str,
    by: str | Sequence[str] | None = None,
    spread: Spread = "std",
    logy: bool = False,
) -> int:
    """Grouped bars: mean of ``y`` per category ``x``, one bar colour per ``by`` group, spread as error bars.

    Returns the number of bar groups (colours) drawn.
    """
    _check_spread(spread)
    group_keys = _keys(by)
    rows = summarize(records, y, (*group_keys, x))
    cats = sorted({r[x] for r in rows}, key=sort_key)
    series: dict[tuple[Any, ...], dict[Any, dict[str, Any]]] = {}
    for row in rows:
        series.setdefault(tuple(row[k] for k in group_keys), {})[row[x]] = row
    n = max(len(series), 1)
    width = 0.8 / n
    pos = np.arange(len(cats), dtype=float)
    for i, key in enumerate(sorted(series, key=lambda t: tuple(sort_key(v) for v in t))):
        by_cat = series[key]
        idx = [j for j, c in enumerate(cats) if c in by_cat]
        means = np.array([by_cat[cats[j]]["mean"] for j in idx])
        err = None
        if spread is not None:
            bands = np.array([_band(by_cat[cats[j]], spread) for j in idx]).reshape(-1, 2)
            err = np.abs(np.vstack([means - bands[:, 0], bands[:, 1] - means]))
        ax.bar(
            pos[idx] + (i - (n - 1) / 2) * width,
            means,
            width,
            yerr=err,
            capsize=2,
            label=_label(group_keys, key) or None,
        )
    ax.set_xticks(pos, [str(c) for c in cats])
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.grid(True, axis="y", alpha=0.3)
    if group_keys and series:
        ax.legend(title=", ".join(group_keys) if len(group_keys) == 1 else None, fontsize="small")
    return len(series)


def _single(
    kind: str,
    records: Sequence[Mapping[str, Any]],
    path: str | os.PathLike[str],
    title: str | None,
    xlabel: str | None,
    ylabel: str | None,
    draw: Any,
) -> Path:
    rows = list(records)
    if not rows:
        raise InvalidParameterError(f"{kind}: no records to plot")
    fig, axes = new_figure()
    ax = axes[0, 0]
    if draw(ax, rows) == 0:
        raise InvalidParameterError(f"{kind}: none of the records has the fields to plot")
    if title:
        ax.set_title(title)
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    return save_figure(fig, path)


def line_plot(
    records: Sequence[Mapping[str, Any]],
    *,
    x: str,
    y: str,
    path: str | os.PathLike[str],
    by: str | Sequence[str] | None = None,
    spread: Spread = "std",
    title: str | None = None,
    xlabel: str | None = None,
    ylabel: str | None = None,
    logx: bool = False,
    logy: bool = False,
) -> Path:
    """One-panel line plot of mean ``y`` vs ``x`` per ``by`` group with a ± spread band; saves a PNG."""
    return _single(
        "line_plot",
        records,
        path,
        title,
        xlabel,
        ylabel,
        lambda ax, rows: draw_lines(ax, rows, x=x, y=y, by=by, spread=spread, logx=logx, logy=logy),
    )


def bar_plot(
    records: Sequence[Mapping[str, Any]],
    *,
    x: str,
    y: str,
    path: str | os.PathLike[str],
    by: str | Sequence[str] | None = None,
    spread: Spread = "std",
    title: str | None = None,
    xlabel: str | None = None,
    ylabel: str | None = None,
    logy: bool = False,
) -> Path:
    """One-panel grouped bar plot of mean ``y`` per category ``x`` (bars per ``by`` group); saves a PNG."""
    return _single(
        "bar_plot",
        records,
        path,
        title,
        xlabel,
        ylabel,
        lambda ax, rows: draw_bars(ax, rows, x=x, y=y, by=by, spread=spread, logy=logy),
    )
