"""A self-contained HTML report over run directories (figures embedded, viewable offline)."""

from __future__ import annotations

import base64
import datetime as _dt
import html
import json
import math
import os
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dpopt.exceptions import DPOptError, InvalidParameterError
from dpopt.experiments import registry
from dpopt.experiments.data import ENV, FILES, data_used, missing_sets
from dpopt.experiments.records import RECORDS_FILE, read_jsonl, write_text_atomic
from dpopt.experiments.runner import CONFIG_FILE, FORMAT, RUN_FILE, SEEDS_DONE_FILE

__all__ = ["DEFAULT_INTRO", "REPORT_FILE", "find_runs", "write_report"]

#: Name of the HTML report written into a run directory (and by :func:`write_report`).
REPORT_FILE = "index.html"
_MAX_CELL = 80
_MAX_LIST = 8  # list settings longer than this are shortened in the text
_LONG_TABLE = 20  # tables with more rows are collapsed (one click to open)

#: What the reader is looking at, for reports of arbitrary runs (``dpopt report``).
DEFAULT_INTRO = (
    "This report gathers runs of dpopt's named reproductions. Each section shows one run: what it "
    "measures and which paper it comes from, the settings it actually used, its figures (drawn from "
    "the run's records only) and summary tables. Re-run any of them with the command given in its "
    "section; the records, figures and settings are in the run folders next to this file."
)

_CSS = """
:root{--fg:#1d1d1f;--muted:#5f6368;--line:#d0d4da;--accent:#1f5fa8;--bad:#b3261e;--good:#1e6b34}
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1180px;
padding:1.5rem 1.25rem 4rem;color:var(--fg);line-height:1.5;font-size:16px}
h1{font-size:1.9rem;margin:.2rem 0 .4rem}h2{margin-top:3rem;padding-top:.6rem;border-top:2px solid var(--line);
font-size:1.4rem}h3{font-size:1.05rem;margin:1.6rem 0 .4rem}
p{max-width:75ch}.lead{font-size:1.05rem}.muted{color:var(--muted);font-size:.9rem}
.warn{color:var(--bad);font-weight:600}
nav.toc{background:#f6f8fa;border:1px solid var(--line);border-radius:6px;padding:.6rem 1.2rem;margin:1.2rem 0}
nav.toc ol{margin:.3rem 0;padding-left:1.4rem}nav.toc li{margin:.2rem 0}
nav.toc .muted{font-size:.85rem}
.meta{display:flex;flex-wrap:wrap;gap:.35rem .9rem;color:var(--muted);font-size:.9rem;margin:.4rem 0}
.meta span{white-space:nowrap}
.settings{background:#f6f8fa;border-left:3px solid var(--accent);padding:.5rem .8rem;font-size:.9rem;
max-width:none;overflow-wrap:anywhere}
.verdict{padding:.55rem .9rem;border-radius:6px;border:1px solid var(--line);background:#fbfbfb;max-width:none}
.verdict b.bad{color:var(--bad)}.verdict b.good{color:var(--good)}
.figures{display:flex;flex-wrap:wrap;gap:1rem 1.2rem;align-items:flex-start;margin:1rem 0}
.figures figure{margin:0;flex:0 1 auto;max-width:100%;min-width:0}.figures figure.wide{flex-basis:100%}
img{display:block;max-width:100%;width:auto;height:auto;border:1px solid #e3e3e3;background:#fff}
figcaption{font-size:.82rem;color:var(--muted);margin-top:.25rem}
.table-wrap{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;margin:.4rem 0;font-size:.86rem}
th,td{border:1px solid var(--line);padding:.22rem .55rem;text-align:left;vertical-align:top}
th{background:#f0f2f5;position:sticky;top:0}td.num{text-align:right;font-variant-numeric:tabular-nums}
details{margin:.6rem 0}summary{cursor:pointer;color:var(--accent)}code{background:#f2f2f2;padding:0 .2rem;
border-radius:3px;overflow-wrap:anywhere}
"""

_SPREAD_COLUMN = re.compile(r"(\bstd\b|\bsem\b|spread|range|±|_std$|_sem$|\bmin\b.*\bmax\b)", re.I)
_COUNT_COLUMN = re.compile(r"^(reps|repetitions|runs|count|seeds)$", re.I)
_ABS_PATH = re.compile(r"(?<![\w.~])/(?:[^\s/<>\"'`]+/)*[^\s/<>\"'`]*")
_SYMBOLS = {"epsilon": "ε", "delta": "δ", "epsilons": "ε values", "deltas": "δ values", "beta": "β",
            "betas": "β values", "sigma": "σ", "alpha": "α", "alphas": "α values"}  # fmt: skip


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


class _Paths:
    """Rewrites absolute local paths in displayed text: relative to the report's folder when inside
    it, else shortened to the last two components (a report is shared; local paths mean nothing)."""

    def __init__(self, base: Path) -> None:
        self.base = base

    def __call__(self, text: str) -> str:
        if "/" not in text:
            return text
        return _ABS_PATH.sub(self._one, text)

    def _one(self, m: re.Match[str]) -> str:
        raw = m.group(0)
        if raw == "/":
            return raw
        path = Path(raw)
        try:
            return path.resolve().relative_to(self.base).as_posix() or "."
        except (ValueError, OSError):
            parts = path.parts[-2:]
            return "…/" + "/".join(parts)


def _read_meta(run_dir: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads((run_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return None
    return meta


def find_runs(dirs_or_root: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Run directories (holding a dpopt ``config.json``) at or below the given paths, sorted."""
    roots = (
        [Path(dirs_or_root)]
        if isinstance(dirs_or_root, str | os.PathLike)
        else [Path(p) for p in dirs_or_root]
    )
    found: set[Path] = set()
    for root in roots:
        if not root.is_dir():
            raise InvalidParameterError(f"report: {root} is not a directory")
        candidates = (
            [root / CONFIG_FILE] if (root / CONFIG_FILE).is_file() else sorted(root.rglob(CONFIG_FILE))
        )
        for cfg in candidates:
            if _read_meta(cfg.parent) is not None:
                found.add(cfg.parent.resolve())
    return sorted(found)


def _order(runs: list[Path], metas: list[dict[str, Any]]) -> list[int]:
    """Reading order: the tour's experiments first (the audit leads), in tour order; then the rest
    by name and scale."""
    try:
        tour = list(registry.tour_names())
    except DPOptError:  # pragma: no cover - a broken registry must not stop a report
        tour = list(registry.TOUR)

    def key(i: int) -> tuple[int, int, str, str, str]:
        name = str(metas[i].get("experiment", runs[i].name))
        pos = tour.index(name) if name in tour else len(tour)
        return (0 if pos < len(tour) else 1, pos, name, str(metas[i].get("scale", "")), str(runs[i]))

    return sorted(range(len(runs)), key=key)


def _fmt(value: Any, paths: _Paths | None = None) -> tuple[str, bool]:
    """Cell text and whether it is numeric."""
    if isinstance(value, bool) or value is None:
        return ("yes" if value else "no") if isinstance(value, bool) else "", False
    if isinstance(value, int):
        return str(value), True
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value), True
        if 1e4 <= abs(value) < 1e6:
            return f"{value:,.0f}", True
        return f"{value:.4g}", True
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    if paths is not None:
        text = paths(text)
    if len(text) > _MAX_CELL:
        text = text[: _MAX_CELL - 1] + "…"
    return text, False


def _is_zero(value: Any) -> bool:
    if value is None or value == "":
        return True
    try:
        v = float(value)
    except (TypeError, ValueError):
        return False
    return v == 0 or math.isnan(v)


def _useful_columns(cols: list[str], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Drop spread columns that hold no spread (single repetitions) and repetition counts of 1."""
    keep = []
    for c in cols:
        values = [row.get(c) for row in rows]
        if _SPREAD_COLUMN.search(c) and all(_is_zero(v) for v in values):
            continue
        if _COUNT_COLUMN.match(c.strip()) and all(v == 1 for v in values):
            continue
        keep.append(c)
    return keep


def _table(
    rows: Sequence[Mapping[str, Any]], *, max_rows: int | None = None, paths: _Paths | None = None
) -> str:
    if not rows:
        return '<p class="muted">(no rows)</p>'
    cols: list[str] = []
    for row in rows:
        for k in row:
            if k not in cols:
                cols.append(k)
    cols = _useful_columns(cols, rows) or cols
    shown = rows if max_rows is None else rows[:max_rows]
    out = ['<div class="table-wrap"><table>', "<tr>" + "".join(f"<th>{_e(c)}</th>" for c in cols) + "</tr>"]
    for row in shown:
        cells = []
        for c in cols:
            text, num = _fmt(row.get(c, ""), paths)
            cells.append(f'<td class="num">{_e(text)}</td>' if num else f"<td>{_e(text)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table></div>")
    if len(shown) < len(rows):
        out.append(f'<p class="muted">first {len(shown)} of {len(rows)} rows (all rows: records.jsonl)</p>')
    return "\n".join(out)


def _kv_table(mapping: Mapping[str, Any], paths: _Paths | None = None) -> str:
    return _table([{"setting": k, "value": v} for k, v in mapping.items()], paths=paths)


def _png_size(path: Path) -> tuple[int, int] | None:
    try:
        with path.open("rb") as fh:
            head = fh.read(24)
    except OSError:
        return None
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def _img(path: Path, base: Path, embed: bool, caption: str) -> str:
    if embed:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        src = f"data:image/png;base64,{data}"
    else:
        src = Path(os.path.relpath(path, base)).as_posix()
    size = _png_size(path)
    wide = size is not None and size[0] >= 1000  # a row of its own; smaller ones may pair up
    dims = f' width="{size[0]}" height="{size[1]}"' if size is not None else ""
    cls = ' class="wide"' if wide else ""
    return (
        f'<figure{cls}><img src="{_e(src)}" alt="{_e(caption)}"{dims} loading="lazy">'
        f"<figcaption>{_e(caption)}</figcaption></figure>"
    )


def _figures(run_dir: Path, run_info: Mapping[str, Any] | None) -> list[Path]:
    if run_info is not None and isinstance(run_info.get("figures"), list):
        paths = [run_dir / str(f) for f in run_info["figures"]]
        return [p for p in paths if p.is_file()]
    return sorted(run_dir.glob("*.png"))


def _seeds_text(seeds: Sequence[Any]) -> str:
    """``1 seed (seed 0)``, ``3 seeds (0-2)``, ``2 seeds (1, 5)``."""
    ints = [int(s) for s in seeds if isinstance(s, int | float) or str(s).isdigit()]
    if not ints:
        return "no seed"
    if len(ints) == 1:
        return f"1 seed (seed {ints[0]})"
    contiguous = ints == list(range(ints[0], ints[0] + len(ints)))
    listed = f"{ints[0]}–{ints[-1]}" if contiguous else ", ".join(map(str, ints[:_MAX_LIST]))
    return f"{len(ints)} seeds ({listed}{'' if contiguous or len(ints) <= _MAX_LIST else ', …'})"


def _setting_value(value: Any, paths: _Paths | None) -> str | None:
    if value is None or value == "" or value == [] or value == {}:
        return None
    if isinstance(value, list | tuple):
        items = [v for v in value if v is not None]
        if not items:
            return None
        shown = ", ".join(_fmt(v, paths)[0] for v in items[:_MAX_LIST])
        return shown + (f", … ({len(items)} in all)" if len(items) > _MAX_LIST else "")
    if isinstance(value, dict):
        return None  # nested settings are in the full table
    return _fmt(value, paths)[0]


def _settings_sentence(config: Mapping[str, Any], paths: _Paths) -> str:
    parts = []
    for key, value in config.items():
        text = _setting_value(value, paths)
        if text is not None:
            parts.append(f"{_e(_SYMBOLS.get(key, key))} = {_e(text)}")
    return " · ".join(parts)


def _audit_verdict(records: Sequence[Mapping[str, Any]]) -> str:
    """One sentence on an audit run's claims (records with ``part == "audit"``), or ''."""
    audits = [r for r in records if r.get("part") == "audit" and "refuted" in r]
    if not audits:
        return ""
    refuted = [str(r.get("mechanism", "?")) for r in audits if r.get("refuted")]
    held = len(audits) - len(refuted)
    planted = [m for m in refuted if m.upper().startswith("BROKEN")]
    unexpected = [m for m in refuted if m not in planted]
    text = (
        f'<p class="verdict"><b class="good">{held} of {len(audits)} mechanisms</b> stayed within '
        "their claimed ε in the audit"
    )
    if planted:
        text += (
            f'; the audit <b class="bad">refuted the {len(planted)} deliberately broken</b> ones '
            "(it has the power to catch a wrong calibration)"
        )
    if unexpected:
        text += f'; <b class="bad">refuted unexpectedly: {_e(", ".join(unexpected))}</b>'
    return text + ". An audit gives a lower bound on ε: it can refute a claim, never prove one.</p>"


def _description(meta: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> str:
    """What the run measured, stating its own settings and the data its records say it used.

    The registered experiment's current wording is used when there is one (else the one stored
    with the run); runs stored before descriptions had placeholders show their stored text.
    """
    try:
        experiment = registry.get(str(meta.get("experiment", "")))
        template, data = experiment.description_template, experiment.data
    except DPOptError:
        template, data = str(meta.get("description_template", "")), str(meta.get("data", ""))
    if not template:
        return str(meta.get("description", ""))
    config = meta.get("config")
    text = registry.describe(template, config if isinstance(config, dict) else None, records, data=data)
    if registry.placeholders(text):  # a run stored with other settings than the current wording names
        return str(meta.get("description", "")) or text
    return text


def _stand_in_notes(missing: Sequence[str]) -> str:
    """A warning per public data set that a run replaced by a synthetic stand-in."""
    notes = []
    for name in missing:
        where = FILES.get(name)
        notes.append(
            f'<p class="warn">{_e(name)}{f" ({_e(where)})" if where else ""} was not found in the folder '
            f"named by {ENV} (or in shared/datasets), so this run used a synthetic stand-in of the same "
            "size: its numbers say how the methods compare, not what they achieve on the real data. "
            f"To use the real set, set {ENV} to a folder holding the published files.</p>"
        )
    return "".join(notes)


def _mark_stand_ins(config: Mapping[str, Any], missing: Sequence[str]) -> dict[str, Any]:
    """The settings, with a requested data set that was not found said to be so."""
    if not missing:
        return dict(config)
    note = f"({', '.join(missing)} not found: a synthetic stand-in was used)"
    return {
        k: f"{_setting_value(v, None) or v} {note}" if k in ("dataset", "datasets") else v
        for k, v in config.items()
    }


def _run_section(
    run_dir: Path,
    records: list[dict[str, Any]],
    anchor: str,
    number: int,
    base: Path,
    embed: bool,
    max_rows: int,
) -> str:
    meta = _read_meta(run_dir) or {}
    paths = _Paths(base)
    name = str(meta.get("experiment", run_dir.name))
    scale = str(meta.get("scale", "?"))
    try:
        run_info = json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        run_info = None
    done_path = run_dir / SEEDS_DONE_FILE
    seeds_done = sorted(int(d["seed"]) for d in read_jsonl(done_path)) if done_path.is_file() else []
    seeds = list(meta.get("seeds", []))

    parts = [
        f'<section><h2 id="{_e(anchor)}">{number}. {_e(name)} <span class="muted">({_e(scale)})</span></h2>'
    ]
    description = _description(meta, records)
    if description:
        parts.append("".join(f"<p>{_e(paths(para))}</p>" for para in description.strip().split("\n\n")))
    folder = Path(os.path.relpath(run_dir, base)).as_posix()
    meta_items = [
        f"source: {_e(meta.get('seed_doc', '?'))}",
        f"{_e(scale)} scale",
        _e(_seeds_text(seeds)),
        f"{len(records)} records",
    ]
    used = data_used(records)
    absent = missing_sets(used)  # public sets replaced by synthetic stand-ins
    if used:
        meta_items.append(f"data: {_e(', '.join(used))}")
    if run_info is not None and isinstance(run_info.get("elapsed_seconds"), int | float):
        meta_items.append(f"ran in {float(run_info['elapsed_seconds']):.1f} s")
    meta_items.append(f"folder: <code>{_e(folder)}/</code>")
    parts.append('<div class="meta">' + "".join(f"<span>{m}</span>" for m in meta_items) + "</div>")
    if run_info is None:
        missing = [s for s in seeds if s not in seeds_done]
        parts.append(
            '<p class="warn">This run did not finish (interrupted or still running'
            + (f"; seeds not completed: {_e(', '.join(map(str, missing)))}" if missing else "")
            + f"); resume it with <code>dpopt reproduce {_e(name)} --resume --out {_e(folder)}</code>.</p>"
        )
    config = meta.get("config", {})
    if isinstance(config, dict):
        config = _mark_stand_ins(config, absent)
    parts.append(_stand_in_notes(absent))
    if isinstance(config, dict) and config:
        note = " (smaller than the paper's)" if scale == "quick" else ""
        parts.append(
            f'<p class="settings"><b>Settings actually used, {_e(scale)} scale{note}:</b> '
            f"{_settings_sentence(config, paths)}</p>"
        )

    verdict = _audit_verdict(records)
    if verdict:
        parts.append(verdict)
    figures = _figures(run_dir, run_info)
    if figures:
        parts.append('<div class="figures">')
        for k, fig in enumerate(figures, 1):
            parts.append(_img(fig, base, embed, f"Figure {number}.{k} ({fig.name})"))
        parts.append("</div>")

    tables: list[tuple[str, list[dict[str, Any]]]] = []
    try:
        experiment: registry.Experiment | None = registry.get(name)
    except DPOptError:
        experiment = None
    if experiment is not None and experiment.tables is not None and records:
        try:
            tables = list(experiment.tables(records))
        except Exception as exc:  # a report must not die because one run's records are stale
            warnings.warn(
                f"report: tables of {name} failed ({type(exc).__name__}: {exc})", RuntimeWarning, stacklevel=2
            )
            parts.append(
                f'<p class="warn">Summary tables could not be computed: {_e(type(exc).__name__)}: '
                f"{_e(paths(str(exc)))}</p>"
            )
    for title, rows in tables:
        if len(rows) > _LONG_TABLE:  # long tables are one click away, so the page stays scannable
            parts.append(f"<details><summary><b>{_e(title)}</b> ({len(rows)} rows)</summary>")
            parts.append(_table(rows, max_rows=max_rows, paths=paths) + "</details>")
        else:
            parts.append(f"<h3>{_e(title)}</h3>")
            parts.append(_table(rows, max_rows=max_rows, paths=paths))
    if not tables:
        parts.append("<h3>Records</h3>")
        parts.append(_table(records, max_rows=max_rows, paths=paths))

    seeds_arg = " ".join(map(str, seeds)) or "0"
    parts.append(
        f'<p class="muted">Re-run it (from this report\'s folder): <code>dpopt reproduce {_e(name)} --scale {_e(scale)} --seeds '
        f"{_e(seeds_arg)} --out {_e(folder)} --overwrite</code></p>"
    )
    parts.append("<details><summary>All settings</summary>")
    parts.append(_kv_table(config if isinstance(config, dict) else {"config": config}, paths))
    parts.append(
        f'<p class="muted">config type: <code>{_e(meta.get("config_type", "?"))}</code></p></details>'
    )
    parts.append("<details><summary>Versions and timing</summary>")
    info: dict[str, Any] = dict(meta.get("versions", {}))
    info["started"] = meta.get("started", "?")
    if meta.get("resumed"):
        info["resumed"] = ", ".join(meta["resumed"])
    info["completed seeds"] = ", ".join(map(str, seeds_done)) or "none"
    if run_info is not None:
        info["finished"] = run_info.get("finished", "?")
        info["elapsed seconds (last invocation)"] = run_info.get("elapsed_seconds", "?")
    parts.append(_kv_table(info, paths) + "</details></section>")
    return "\n".join(parts)


def write_report(
    dirs_or_root: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    out: str | os.PathLike[str] | None = None,
    title: str = "dpopt report",
    intro: str | None = None,
    embed: bool = True,
    max_rows: int = 50,
) -> Path:
    """Write an HTML report of every run directory found at or below ``dirs_or_root``.

    The page opens with ``intro`` (what the reader is looking at; default :data:`DEFAULT_INTRO`) and
    a table of contents.  The tour's experiments come first, in tour order (the privacy audit
    leads), then the other runs by name.  Each run shows the experiment's name, description and
    source, the settings it actually used, how many seeds, its figures in a grid, its summary
    tables (the experiment's ``tables`` function, or the first ``max_rows`` records; spread columns
    that hold no spread are left out), the command that re-runs it, and its full configuration and
    library versions.  Absolute local paths are shown relative to the report (or shortened).  With
    ``embed=True`` figures are embedded (base64), so the single HTML file is self-contained;
    otherwise they are linked relative to the report.

    The report goes to ``out`` if given, else ``index.html`` in the given directory (or in the common
    parent of several directories), readable by everyone (0644 under the usual umask).  Returns its
    path.

    Raises
    ------
    InvalidParameterError
        If a path is not a directory, no run directory is found or the report cannot be written.
    """
    single = isinstance(dirs_or_root, str | os.PathLike)
    if isinstance(dirs_or_root, str | os.PathLike):
        roots = [Path(dirs_or_root)]
    else:
        roots = [Path(p) for p in dirs_or_root]
    if not roots:
        raise InvalidParameterError("report: give at least one directory")
    runs = find_runs(roots)
    if not runs:
        where = ", ".join(str(r) for r in roots)
        raise InvalidParameterError(f"report: no run directories (with a dpopt {CONFIG_FILE}) under {where}")
    if out is not None:
        target = Path(out)
    elif single:
        target = roots[0] / REPORT_FILE
    else:
        target = Path(os.path.commonpath([str(r.resolve()) for r in roots])) / REPORT_FILE
    target = target.resolve()
    base = target.parent

    metas = [_read_meta(r) or {} for r in runs]
    order = _order(runs, metas)
    runs = [runs[i] for i in order]
    metas = [metas[i] for i in order]
    anchors = [f"run-{i}" for i in range(len(runs))]
    records = [read_jsonl(r / RECORDS_FILE) if (r / RECORDS_FILE).is_file() else [] for r in runs]
    toc = ['<nav class="toc"><b>Contents</b><ol>']
    for anchor, meta, run, recs in zip(anchors, metas, runs, records, strict=True):
        label = f"{meta.get('experiment', run.name)} ({meta.get('scale', '?')})"
        summary = _description(meta, recs).strip().split("\n")[0]
        toc.append(f'<li><a href="#{anchor}">{_e(label)}</a> <span class="muted">— {_e(summary)}</span></li>')
    toc.append("</ol></nav>")
    sections = [
        _run_section(run, recs, anchor, i + 1, base, embed, max_rows)
        for i, (run, recs, anchor) in enumerate(zip(runs, records, anchors, strict=True))
    ]
    now = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    doc = "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
            f"<header><h1>{_e(title)}</h1>",
            f'<p class="lead">{_e(intro if intro is not None else DEFAULT_INTRO)}</p>',
            f'<p class="muted">{len(runs)} run(s) · generated {_e(now)} · dpopt {_e(_version())}</p></header>',
            *toc,
            *sections,
            "</body></html>",
        ]
    )
    try:
        write_text_atomic(target, doc)
    except OSError as exc:
        raise InvalidParameterError(
            f"report: cannot write {target} ({exc.strerror or type(exc).__name__})"
        ) from None
    return target


def _version() -> str:
    from dpopt import __version__

    return __version__
