"""Generic matplotlib helpers for experiments' ``plot`` functions.

They draw from records only (never recompute) and use :class:`matplotlib.figure.Figure` with the
Agg canvas directly, so they never touch pyplot's global state or need a display.  Typical use::

    def plot(records, out_dir):
        return [line_plot(records, x="epsilon", y="error", by="method",
                          path=out_dir / "error_vs_epsilon.png", logx=True, logy=True)]

For several panels, make a figure with :func:`new_figure`, draw on its axes with
:func:`draw_lines` / :func:`draw_bars`, and save it with :func:`save_figure`.

The figures are meant to be read in a report at page width, so the helpers

* lay a single row of three or more panels out as a grid of two columns (:func:`new_figure`);
* label axes with words, not field names (``expected_error_per_query`` reads "expected error per
  query"), and name legend entries by what differs between the curves only (no ``beta=None``);
* draw no spread (band or error bar) for single-repetition data;
* when saving (:func:`save_figure`), replace identical per-panel legends by one legend for the
  figure, move a legend that covers data points outside its panel, and never cut a legend off at
  the figure's edge (fewer legend columns, or a larger figure).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.ticker import LogFormatterSciNotation, NullFormatter

from dpopt.exceptions import InvalidParameterError
from dpopt.experiments.records import _keys, sort_key, summarize

__all__ = ["bar_plot", "draw_bars", "draw_lines", "human_label", "line_plot", "new_figure", "save_figure"]

Spread = Literal["std", "sem", "minmax"] | None

#: At most this many panels side by side: a single row of more panels is wrapped into a grid.
MAX_COLUMNS = 2
#: Figures wider than this (inches) are scaled down to it (about a report page at 120 dpi).
MAX_WIDTH = 12.0


def human_label(name: str) -> str:
    """A field name as words for an axis: ``"expected_error_per_query"`` -> ``"expected error per query"``."""
    return name.replace("_", " ").strip()


def new_figure(
    nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float] | None = None
) -> tuple[Figure, np.ndarray]:
    """A new Agg-backed figure and its array of axes (always 2-d, shape ``(nrows, ncols)``).

    A single row of more than :data:`MAX_COLUMNS` panels is laid out as a grid of
    :data:`MAX_COLUMNS` columns (so every panel stays readable at page width); the returned array
    still has shape ``(1, ncols)``, its panels in reading order.  ``figsize`` is the size of the
    requested layout; it is adapted to the grid actually drawn and capped at :data:`MAX_WIDTH`.
    """
    panel_w, panel_h = (5.0, 3.6) if figsize is None else (figsize[0] / ncols, figsize[1] / nrows)
    rows, cols = nrows, ncols
    if nrows == 1 and ncols > MAX_COLUMNS:
        rows, cols = -(-ncols // MAX_COLUMNS), MAX_COLUMNS
        panel_w, panel_h = max(panel_w, 5.0), max(panel_h, 3.6)
    if figsize is None or (rows, cols) != (nrows, ncols):
        figsize = (panel_w * cols + (1.0 if figsize is None else 0.0), panel_h * rows + 0.4)
    if figsize[0] > MAX_WIDTH:
        figsize = (MAX_WIDTH, figsize[1] * max(MAX_WIDTH / figsize[0], 0.6))
    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.subplots(rows, cols, squeeze=False)
    if (rows, cols) == (nrows, ncols):
        return fig, grid
    flat = list(grid.flat)
    for extra in flat[nrows * ncols :]:
        fig.delaxes(extra)
    axes = np.empty((nrows, ncols), dtype=object)
    for i, ax in enumerate(flat[: nrows * ncols]):
        axes.flat[i] = ax
    return fig, axes


def _legend_entries(ax: Axes) -> tuple[list[Any], list[str], str]:
    legend = ax.get_legend()
    if legend is None:
        return [], [], ""
    handles = list(getattr(legend, "legend_handles", None) or getattr(legend, "legendHandles", []))
    labels = [t.get_text() for t in legend.get_texts()]
    return handles, labels, legend.get_title().get_text()


def _covers_data(ax: Axes, renderer: Any) -> bool:
    """Whether the legend of ``ax`` covers any plotted point (line vertices, bar tops, markers)."""
    legend = ax.get_legend()
    if legend is None:
        return False
    box = legend.get_window_extent(renderer)
    pts: list[np.ndarray] = []
    for line in ax.get_lines():
        xy = np.asarray(line.get_xydata(), dtype=float)
        if xy.size:
            pts.append(line.get_transform().transform(xy))
    for patch in ax.patches:  # bars: any overlap counts
        ext = patch.get_window_extent(renderer)
        if ext.width > 0 and ext.height > 0 and ext.overlaps(box):
            return True
    for coll in ax.collections:
        offsets = np.asarray(coll.get_offsets(), dtype=float)
        if offsets.size:
            pts.append(coll.get_offset_transform().transform(offsets))
    if not pts:
        return False
    allp = np.concatenate(pts)
    allp = allp[np.all(np.isfinite(allp), axis=1)]
    inside = (allp[:, 0] >= box.x0) & (allp[:, 0] <= box.x1) & (allp[:, 1] >= box.y0) & (allp[:, 1] <= box.y1)
    return bool(inside.any())


class _PlainLogFormatter(LogFormatterSciNotation):
    """Matplotlib's log tick labels, with plain numbers (0.4, 2000) between 1e-3 and 1e5."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        text = super().__call__(x, pos)
        if not text:
            return ""
        return f"{x:g}" if 1e-3 <= abs(x) < 1e5 else text


def _plain_log_ticks(axis: Any) -> None:
    """Label the ticks of a log axis as plain numbers where that is short (the same ticks as usual)."""
    axis.set_major_formatter(_PlainLogFormatter(10.0))
    axis.set_minor_formatter(_PlainLogFormatter(10.0, labelOnlyBase=False))


def _ticks_at_data(ax: Axes) -> None:
    """A log x-axis over a few values (a sweep such as ε = 0.5, 1, 2) gets its ticks at those values."""
    xs: set[float] = set()
    for line in ax.get_lines():
        data = np.asarray(line.get_xdata(), dtype=float)
        xs.update(float(v) for v in data[np.isfinite(data) & (data > 0)])
    if not 2 <= len(xs) <= 8:
        return
    values = sorted(xs)
    ax.set_xticks(values, [f"{v:g}" for v in values])
    ax.xaxis.set_minor_formatter(NullFormatter())


def _legend_columns(fig: Figure, labels: Sequence[str], fontsize: float) -> int:
    """How many legend entries fit side by side across the figure."""
    char_in = 0.55 * fontsize / 72  # average glyph width, inches
    entry_in = 0.75 + char_in * max((len(t) for t in labels), default=1)
    return max(1, min(len(labels), int(0.95 * fig.get_figwidth() / entry_in)))


def _tidy(fig: Figure) -> None:
    """Words for field-name axis labels; plain log ticks; one legend for identical panel legends;
    legends off the data."""
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.get_subplotspec() is not None]
    for ax in axes:
        for get, put in ((ax.get_xlabel, ax.set_xlabel), (ax.get_ylabel, ax.set_ylabel)):
            text = get()
            if "_" in text and "$" not in text:
                put(human_label(text))
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale == "log":
                _plain_log_ticks(axis)
        if ax.get_xscale() == "log":
            _ticks_at_data(ax)
    with_legend = [ax for ax in axes if ax.get_legend() is not None]
    entries = [_legend_entries(ax) for ax in with_legend]
    if len(with_legend) > 1 and all(e[1] == entries[0][1] and e[1] for e in entries):
        handles, labels, title = entries[0]
        for ax in with_legend:
            legend = ax.get_legend()
            if legend is not None:
                legend.remove()
        size = FontProperties(size="small").get_size_in_points()
        fig.legend(handles, labels, title=human_label(title) or None, loc="outside lower center",
                   ncols=_legend_columns(fig, labels, size), fontsize="small")  # fmt: skip
        return
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    fig.canvas.draw()
    for ax, (handles, labels, title) in zip(with_legend, entries, strict=True):
        if handles and _covers_data(ax, renderer):
            legend = ax.get_legend()
            font: Any = (
                legend.get_texts()[0].get_fontsize() if legend is not None and legend.get_texts() else 8
            )
            ax.legend(handles, labels, title=human_label(title) or None, loc="upper left",
                      bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=font)  # fmt: skip


def _legends(fig: Figure) -> list[Any]:
    """Every visible legend of ``fig``: the figure's own and its panels'."""
    out = [leg for leg in fig.legends if leg.get_visible()]
    for ax in fig.axes:
        leg = ax.get_legend()
        if leg is not None and leg.get_visible() and ax.get_visible():
            out.append(leg)
    return out


def _overflow(fig: Figure, legend: Any, renderer: Any) -> tuple[float, float, float, float]:
    """How far (pixels) ``legend`` sticks out of the figure on the left, right, bottom and top."""
    box, page = legend.get_window_extent(renderer), fig.bbox
    return (
        max(0.0, page.x0 - box.x0),
        max(0.0, box.x1 - page.x1),
        max(0.0, page.y0 - box.y0),
        max(0.0, box.y1 - page.y1),
    )


def _fewer_columns(legend: Any) -> bool:
    """Lay ``legend`` out in one column fewer; False when it has one column (or cannot be re-laid)."""
    # matplotlib lays a legend out when it is made; these (private) steps redo that layout
    ncols = int(getattr(legend, "_ncols", 1))
    init, place = getattr(legend, "_init_legend_box", None), getattr(legend, "_set_loc", None)
    if ncols <= 1 or init is None or place is None or not hasattr(legend, "_loc_real"):
        return False
    title = legend.get_title()
    text, size = title.get_text(), title.get_fontsize()
    legend.set_ncols(ncols - 1)
    init(legend.legend_handles, [t.get_text() for t in legend.get_texts()])
    place(legend._loc_real)
    legend.set_title(text or None, prop={"size": size})
    return True


def _fit_legends(fig: Figure, rounds: int = 6) -> None:
    """No legend is cut off: a legend wider than the figure gets fewer columns, and what still
    sticks out makes the figure larger by that much (the layout then makes room)."""
    for _ in range(rounds):
        with warnings.catch_warnings():  # a legend larger than the figure collapses the layout
            warnings.filterwarnings("ignore", "constrained_layout not applied", UserWarning)
            fig.canvas.draw()
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        out = [(leg, _overflow(fig, leg, renderer)) for leg in _legends(fig)]
        out = [(leg, o) for leg, o in out if max(o) > 0.5]
        if not out:
            return
        if any(o[0] + o[1] > 0 and _fewer_columns(leg) for leg, o in out):
            continue
        grow_w = max(o[0] + o[1] for _, o in out) / fig.dpi
        grow_h = max(o[2] + o[3] for _, o in out) / fig.dpi
        w, h = fig.get_size_inches()
        fig.set_size_inches(w + grow_w + (0.1 if grow_w else 0.0), h + grow_h + (0.1 if grow_h else 0.0))


def save_figure(fig: Figure, path: str | os.PathLike[str], *, dpi: int = 120, tidy: bool = True) -> Path:
    """Save ``fig`` as a PNG at ``path`` (creating parent directories) and return the path.

    With ``tidy`` (default) axis labels that are field names become words, identical legends of
    several panels become one legend below the figure, and a legend that covers plotted data is
    moved outside its panel.  Always, no legend is cut off at the figure's edge: one wider than the
    figure is laid out in fewer columns, and the figure grows to hold what still sticks out.  The
    file is readable by everyone (mode 0644 under the usual umask).
    """
    p = Path(path)
    if p.suffix.lower() != ".png":
        raise InvalidParameterError(f"path: figures are saved as PNG; use a .png file name, got {p.name!r}")
    p.parent.mkdir(parents=True, exist_ok=True)
    if tidy:
        _tidy(fig)
    fig.set_dpi(dpi)  # the legends are measured at the resolution the file is written at
    _fit_legends(fig)
    fig.savefig(p, dpi=dpi, format="png")
    return p


def _fmt_value(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value)) if abs(value) >= 10 else str(value)
    return str(value)


def _labels(keys: tuple[str, ...], groups: Iterable[tuple[Any, ...]]) -> dict[tuple[Any, ...], str]:
    """Legend labels naming only what differs between the groups (None values left out)."""
    groups = list(groups)
    if not keys:
        return {g: "" for g in groups}
    varying = [i for i in range(len(keys)) if len({repr(g[i]) for g in groups}) > 1] or [0]
    out = {}
    for g in groups:
        parts = []
        for j, i in enumerate(varying):
            if g[i] is None:
                continue
            parts.append(_fmt_value(g[i]) if j == 0 or len(varying) == 1 else f"{keys[i]}={_fmt_value(g[i])}")
        out[g] = ", ".join(parts) or "(none)"
    return out


def _legend_title(keys: tuple[str, ...], groups: Iterable[tuple[Any, ...]]) -> str | None:
    groups = list(groups)
    varying = [k for i, k in enumerate(keys) if len({repr(g[i]) for g in groups}) > 1]
    if len(varying) == 1:
        return human_label(varying[0])
    if len(keys) == 1:
        return human_label(keys[0])
    return None


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
    names = _labels(group_keys, lines)
    for key in sorted(lines, key=lambda t: tuple(sort_key(v) for v in t)):
        pts = sorted(lines[key], key=lambda r: sort_key(r[x]))
        try:
            xs = np.array([float(r[x]) for r in pts])
        except (TypeError, ValueError):
            raise InvalidParameterError(f"draw_lines: x field {x!r} must be numeric; use draw_bars") from None
        means = np.array([r["mean"] for r in pts])
        (line,) = ax.plot(xs, means, marker=marker, markersize=3.5, label=names[key] or None)
        if spread is not None and any(r["count"] > 1 for r in pts):
            lo, hi = np.array([_band(r, spread) for r in pts]).T
            if logy:
                lo = np.where(lo > 0, lo, np.nan)
            ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(human_label(x))
    ax.set_ylabel(human_label(y))
    ax.grid(True, alpha=0.3)
    if group_keys and lines:
        ax.legend(title=_legend_title(group_keys, lines), fontsize="small")
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
    names = _labels(group_keys, series)
    repeated = any(r["count"] > 1 for r in rows)  # no error bars for single-repetition data
    for i, key in enumerate(sorted(series, key=lambda t: tuple(sort_key(v) for v in t))):
        by_cat = series[key]
        idx = [j for j, c in enumerate(cats) if c in by_cat]
        means = np.array([by_cat[cats[j]]["mean"] for j in idx])
        err = None
        if spread is not None and repeated:
            bands = np.array([_band(by_cat[cats[j]], spread) for j in idx]).reshape(-1, 2)
            err = np.abs(np.vstack([means - bands[:, 0], bands[:, 1] - means]))
        ax.bar(
            pos[idx] + (i - (n - 1) / 2) * width,
            means,
            width,
            yerr=err,
            capsize=2,
            label=names[key] or None,
        )
    ax.set_xticks(pos, [str(c) for c in cats])
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(human_label(x))
    ax.set_ylabel(human_label(y))
    ax.grid(True, axis="y", alpha=0.3)
    if group_keys and series:
        ax.legend(title=_legend_title(group_keys, series), fontsize="small")
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
