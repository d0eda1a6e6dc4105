"""A self-contained HTML report over run directories (figures embedded, viewable offline)."""

from __future__ import annotations

import base64
import datetime as _dt
import html
import json
import math
import os
import tempfile
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dpopt.exceptions import DPOptError, InvalidParameterError
from dpopt.experiments import registry
from dpopt.experiments.records import RECORDS_FILE, read_jsonl
from dpopt.experiments.runner import CONFIG_FILE, FORMAT, RUN_FILE, SEEDS_DONE_FILE

__all__ = ["REPORT_FILE", "find_runs", "write_report"]

REPORT_FILE = "index.html"
_MAX_CELL = 80

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;
padding:0 1rem;color:#222;line-height:1.45}
h1{border-bottom:2px solid #444}h2{margin-top:2.5rem;border-bottom:1px solid #bbb}
table{border-collapse:collapse;margin:.6rem 0;font-size:.85rem}
th,td{border:1px solid #ccc;padding:.2rem .5rem;text-align:left;vertical-align:top}
th{background:#f0f0f0}td.num{text-align:right;font-variant-numeric:tabular-nums}
figure{margin:1rem 0}img{max-width:100%;border:1px solid #ddd}figcaption{font-size:.8rem;color:#555}
.muted{color:#666;font-size:.85rem}.warn{color:#a40;font-weight:600}
details{margin:.5rem 0}code{background:#f4f4f4;padding:0 .2rem}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


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


def _fmt(value: Any) -> tuple[str, bool]:
    """Cell text and whether it is numeric."""
    if isinstance(value, bool) or value is None:
        return str(value), False
    if isinstance(value, int):
        return str(value), True
    if isinstance(value, float):
        if math.isfinite(value) and value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
            return f"{value:.4e}", True
        return (f"{value:.4g}" if math.isfinite(value) else str(value)), True
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if len(text) > _MAX_CELL:
        text = text[: _MAX_CELL - 1] + "…"
    return text, False


def _table(rows: Sequence[Mapping[str, Any]], *, max_rows: int | None = None) -> str:
    if not rows:
        return '<p class="muted">(no rows)</p>'
    cols: list[str] = []
    for row in rows:
        for k in row:
            if k not in cols:
                cols.append(k)
    shown = rows if max_rows is None else rows[:max_rows]
    out = ["<table>", "<tr>" + "".join(f"<th>{_e(c)}</th>" for c in cols) + "</tr>"]
    for row in shown:
        cells = []
        for c in cols:
            text, num = _fmt(row.get(c, ""))
            cells.append(f'<td class="num">{_e(text)}</td>' if num else f"<td>{_e(text)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    if len(shown) < len(rows):
        out.append(f'<p class="muted">first {len(shown)} of {len(rows)} rows</p>')
    return "\n".join(out)


def _kv_table(mapping: Mapping[str, Any]) -> str:
    return _table([{"key": k, "value": v} for k, v in mapping.items()])


def _img(path: Path, base: Path, embed: bool) -> str:
    if embed:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        src = f"data:image/png;base64,{data}"
    else:
        src = Path(os.path.relpath(path, base)).as_posix()
    cap = _e(path.name)
    return f'<figure><img src="{_e(src)}" alt="{cap}"><figcaption>{cap}</figcaption></figure>'


def _figures(run_dir: Path, run_info: Mapping[str, Any] | None) -> list[Path]:
    if run_info is not None and isinstance(run_info.get("figures"), list):
        paths = [run_dir / str(f) for f in run_info["figures"]]
        return [p for p in paths if p.is_file()]
    return sorted(run_dir.glob("*.png"))


def _run_section(run_dir: Path, anchor: str, base: Path, embed: bool, max_rows: int) -> str:
    meta = _read_meta(run_dir) or {}
    name = str(meta.get("experiment", run_dir.name))
    try:
        run_info = json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        run_info = None
    records_path = run_dir / RECORDS_FILE
    records = read_jsonl(records_path) if records_path.is_file() else []
    done_path = run_dir / SEEDS_DONE_FILE
    seeds_done = sorted(int(d["seed"]) for d in read_jsonl(done_path)) if done_path.is_file() else []

    parts = [f'<h2 id="{_e(anchor)}">{_e(name)}</h2>']
    description = str(meta.get("description", ""))
    if description:
        parts.append("".join(f"<p>{_e(para)}</p>" for para in description.strip().split("\n\n")))
    parts.append(
        f'<p class="muted">source: {_e(meta.get("seed_doc", "?"))} · '
        f"scale: <code>{_e(meta.get('scale', '?'))}</code>"
        f" · seeds: {_e(', '.join(map(str, meta.get('seeds', []))))} · completed seeds: "
        f"{_e(', '.join(map(str, seeds_done)) or 'none')} · records: {len(records)} · directory: "
        f"<code>{_e(run_dir)}</code></p>"
    )
    if run_info is None:
        parts.append(
            '<p class="warn">This run did not finish (interrupted or still running); '
            "resume it with <code>dpopt reproduce NAME --resume --out DIR</code>.</p>"
        )

    for fig in _figures(run_dir, run_info):
        parts.append(_img(fig, base, embed))

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
                f"{_e(exc)}</p>"
            )
    for title, rows in tables:
        parts.append(f"<h3>{_e(title)}</h3>")
        parts.append(_table(rows, max_rows=max_rows))
    if not tables:
        parts.append("<h3>Records</h3>")
        parts.append(_table(records, max_rows=max_rows))

    config = meta.get("config", {})
    parts.append("<details><summary>Configuration</summary>")
    parts.append(_kv_table(config if isinstance(config, dict) else {"config": config}))
    parts.append(
        f'<p class="muted">config type: <code>{_e(meta.get("config_type", "?"))}</code></p></details>'
    )
    parts.append("<details><summary>Versions and timing</summary>")
    info: dict[str, Any] = dict(meta.get("versions", {}))
    info["started"] = meta.get("started", "?")
    if meta.get("resumed"):
        info["resumed"] = ", ".join(meta["resumed"])
    if run_info is not None:
        info["finished"] = run_info.get("finished", "?")
        info["elapsed seconds (last invocation)"] = run_info.get("elapsed_seconds", "?")
    parts.append(_kv_table(info) + "</details>")
    return "\n".join(parts)


def write_report(
    dirs_or_root: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    out: str | os.PathLike[str] | None = None,
    title: str = "dpopt report",
    embed: bool = True,
    max_rows: int = 50,
) -> Path:
    """Write an HTML report of every run directory found at or below ``dirs_or_root``.

    Each run shows the experiment's name, description and source, its figures, its summary tables
    (the experiment's ``tables`` function, or the first ``max_rows`` records), its configuration and
    the library versions.  With ``embed=True`` figures are embedded (base64), so the single HTML file
    is self-contained; otherwise they are linked relative to the report.

    The report goes to ``out`` if given, else ``index.html`` in the given directory (or in the common
    parent of several directories).  Returns its path.

    Raises
    ------
    InvalidParameterError
        If a path is not a directory or no run directory is found.
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

    anchors = [f"run-{i}" for i in range(len(runs))]
    metas = [_read_meta(r) or {} for r in runs]
    toc = ["<ul>"]
    for anchor, meta, run in zip(anchors, metas, runs, strict=True):
        label = f"{meta.get('experiment', run.name)} ({meta.get('scale', '?')})"
        summary = str(meta.get("description", "")).strip().split("\n")[0]
        toc.append(f'<li><a href="#{anchor}">{_e(label)}</a> — {_e(summary)}</li>')
    toc.append("</ul>")
    sections = [
        _run_section(run, anchor, base, embed, max_rows) for run, anchor in zip(runs, anchors, strict=True)
    ]
    now = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    doc = "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
            f"<h1>{_e(title)}</h1>",
            f'<p class="muted">{len(runs)} run(s) · generated {_e(now)}</p>',
            *toc,
            *sections,
            "</body></html>",
        ]
    )
    try:
        base.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".index.", suffix=".tmp", dir=base)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(doc)
        os.replace(tmp, target)
    except OSError as exc:
        raise InvalidParameterError(
            f"report: cannot write {target} ({exc.strerror or type(exc).__name__})"
        ) from None
    return target
