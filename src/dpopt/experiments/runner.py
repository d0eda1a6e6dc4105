"""Run a registered experiment over seeds, writing records incrementally, then plot from disk.

Layout of a run directory::

    config.json      written first: experiment, scale, config, seeds, versions, start time
    records.jsonl    one tidy record per line (with "seed" and "repetition"), flushed as produced
    seeds_done.jsonl one line per completed seed (the resume marker)
    run.json         written last: figures, record count, elapsed time
    *.png            figures drawn by the experiment's plot function from records.jsonl

An interrupted run loses at most the records of the seed in progress: ``resume=True`` keeps the
records of completed seeds, drops those of incomplete ones and runs only the missing seeds.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import platform
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

from dpopt.exceptions import InvalidParameterError
from dpopt.experiments import registry
from dpopt.experiments.records import (
    RECORDS_FILE,
    append_record,
    read_jsonl,
    to_jsonable,
    write_json_atomic,
    write_jsonl,
)
from dpopt.progress import Reporter, reporting
from dpopt.randomness import as_generator

__all__ = [
    "CONFIG_FILE",
    "FORMAT",
    "RUN_FILE",
    "SEEDS_DONE_FILE",
    "ProgressEvent",
    "RunResult",
    "check_seeds",
    "run_experiment",
    "versions",
]

#: Value of the ``format`` key of a run's ``config.json`` (the report reads only such runs).
FORMAT = "dpopt-run/1"
#: Name of a run directory's configuration file (written first).
CONFIG_FILE = "config.json"
#: Name of a run directory's resume marker (one line per completed seed).
SEEDS_DONE_FILE = "seeds_done.jsonl"
#: Name of a run directory's summary (figures, record count, elapsed time; written last).
RUN_FILE = "run.json"
RESERVED_KEYS = ("seed", "repetition")


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What :func:`run_experiment` produced."""

    out_dir: Path
    records_path: Path
    config_path: Path
    figures: tuple[Path, ...]
    n_records: int
    elapsed_seconds: float
    skipped_seeds: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class ProgressEvent:
    """Passed to a progress callback after every record (``kind="record"``) and seed (``"seed_done"``)."""

    kind: Literal["record", "seed_done"]
    experiment: str
    seed: int
    seeds_done: int
    seeds_total: int
    records_in_seed: int
    records_total: int


ProgressCallback = Callable[[ProgressEvent], None]


def versions() -> dict[str, str]:
    """Versions of dpopt, its numeric dependencies and Python."""
    import scipy

    import dpopt

    out = {
        "dpopt": dpopt.__version__,
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    try:
        import matplotlib

        out["matplotlib"] = matplotlib.__version__
    except ImportError:  # pragma: no cover - matplotlib is a dependency
        pass
    return out


def check_seeds(seeds: Iterable[int] | int) -> tuple[int, ...]:
    """Validate seeds: non-negative, distinct integers (a single int is accepted)."""
    try:
        out: tuple[Any, ...] = (seeds,) if isinstance(seeds, int | np.integer) else tuple(seeds)
    except TypeError:
        raise InvalidParameterError("seeds: expected an iterable of non-negative integers") from None
    if not out:
        raise InvalidParameterError("seeds: give at least one seed")
    for s in out:
        if isinstance(s, bool) or not isinstance(s, int | np.integer) or s < 0:
            raise InvalidParameterError("seeds: every seed must be a non-negative integer")
    clean = tuple(int(s) for s in out)
    if len(set(clean)) != len(clean):
        raise InvalidParameterError("seeds: seeds must be distinct")
    return clean


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _normalized(obj: Any) -> Any:
    return json.loads(json.dumps(to_jsonable(obj)))


def _prepare_dir(out_dir: Path) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidParameterError(
            f"cannot create {out_dir} ({exc.strerror or type(exc).__name__})", param="out_dir"
        ) from None
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise InvalidParameterError(f"{out_dir} is not writable", param="out_dir")


def _clear_previous(out_dir: Path) -> None:
    run_file = out_dir / RUN_FILE
    if run_file.is_file():
        try:
            figures = json.loads(run_file.read_text(encoding="utf-8")).get("figures", [])
        except (OSError, ValueError):
            figures = []
        for name in figures:
            fig = out_dir / str(name)
            if fig.parent == out_dir and fig.suffix == ".png":
                fig.unlink(missing_ok=True)
    for name in (RUN_FILE, SEEDS_DONE_FILE, RECORDS_FILE, CONFIG_FILE):
        (out_dir / name).unlink(missing_ok=True)


def _load_done(out_dir: Path) -> dict[int, dict[str, Any]]:
    path = out_dir / SEEDS_DONE_FILE
    if not path.is_file():
        return {}
    return {int(line["seed"]): line for line in read_jsonl(path)}


def _report_to(reporter: Reporter) -> ProgressCallback:
    """A progress callback that shows the run's events with ``reporter``."""

    def callback(ev: ProgressEvent) -> None:
        if ev.kind == "seed_done":
            reporter.update(
                ev.seeds_done, f"seeds (seed {ev.seed}: {ev.records_in_seed} records)", force=True
            )
        else:
            reporter.update(ev.seeds_done, f"seeds (seed {ev.seed}: {ev.records_in_seed} records so far)")

    return callback


def _description(experiment: registry.Experiment, config: Any) -> dict[str, str]:
    """What ``config.json`` stores to describe a run: the description with the run's settings (the
    report adds the data its records name), its template, and what ``{data}`` reads as by default."""
    return {
        "description": experiment.describe(config),
        "description_template": experiment.description_template,
        "data": experiment.data,
    }


def run_experiment(
    name: str,
    *,
    scale: str = "quick",
    seeds: Iterable[int] | int = (0,),
    out_dir: str | os.PathLike[str],
    progress: bool | ProgressCallback = False,
    resume: bool = False,
    overwrite: bool = False,
    overrides: Mapping[str, Any] | None = None,
) -> RunResult:
    """Run experiment ``name`` at ``scale`` for each seed and write its records and figures to ``out_dir``.

    Each seed ``s`` runs ``experiment.run(config, np.random.default_rng(s))``; every record it
    yields is written at once (one flushed JSON line) with ``seed`` and ``repetition`` (the seed's
    position in the run's seed list) added.  After all seeds, the experiment's ``plot`` function
    draws figures from the records read back from disk.

    Parameters
    ----------
    progress
        ``True`` shows the progress on stderr (:mod:`dpopt.progress`: a bar on a terminal, else a
        line per seed and at most one every 10 s), including a note before compiled kernels are
        compiled for the first time; a callable receives :class:`ProgressEvent` s; ``False``
        (default) is silent.
    resume
        Continue a run in ``out_dir``: seeds already completed are skipped, records of a seed that
        was interrupted are dropped and the seed is rerun.  The experiment, scale and config must
        match the stored ``config.json``.
    overrides
        Replace fields of the scale's configuration (strings are parsed like the field's value;
        see :func:`dpopt.experiments.registry.override_config`).  The resulting configuration is
        what ``config.json`` stores and what ``resume`` compares.
    overwrite
        Delete a previous run's files in ``out_dir`` first.  Without ``resume`` or ``overwrite``, a
        directory that already holds a run is an error.

    Raises
    ------
    InvalidParameterError
        Unknown experiment or scale, bad seeds, an unusable ``out_dir``, a non-dict record, a record
        using a reserved key, or a stored run that does not match when resuming.
    """
    experiment = registry.get(name)
    config = experiment.config(scale, overrides)
    seeds = check_seeds(seeds)
    if resume and overwrite:
        raise InvalidParameterError("resume and overwrite are mutually exclusive")
    if not (isinstance(progress, bool) or callable(progress)):
        raise InvalidParameterError("progress: expected True/False or a callable")
    # absolute from here on: plot functions return paths built from ``out`` (``out / "fig.png"``),
    # which must not be joined onto a relative ``out`` a second time
    out = Path(out_dir).absolute()  # not normalised: "a/../b" means what the OS makes of it
    _prepare_dir(out)
    config_path = out / CONFIG_FILE
    records_path = out / RECORDS_FILE
    done_path = out / SEEDS_DONE_FILE
    config_dict = _normalized(dataclasses.asdict(config))

    has_previous = config_path.exists() or records_path.exists() or done_path.exists()
    if has_previous and overwrite:
        _clear_previous(out)
        has_previous = False

    all_seeds: list[int] = list(seeds)
    done: dict[int, dict[str, Any]] = {}
    meta: dict[str, Any]
    if has_previous and not resume:
        raise InvalidParameterError(
            f"out_dir: {out} already holds a run; pass resume=True (--resume) to continue it, "
            "overwrite=True (--overwrite) to replace it, or choose another directory"
        )
    if has_previous:
        if not config_path.is_file():
            raise InvalidParameterError(f"cannot resume: {out} has records but no {CONFIG_FILE}")
        meta = json.loads(config_path.read_text(encoding="utf-8"))
        for field, want in (("experiment", experiment.name), ("scale", scale), ("config", config_dict)):
            if meta.get(field) != want:
                raise InvalidParameterError(
                    f"cannot resume: the {field} stored in {config_path} differs from this run's; "
                    "use another directory or overwrite"
                )
        previous = [int(s) for s in meta.get("seeds", [])]
        all_seeds = previous + [s for s in seeds if s not in previous]
        done = {s: d for s, d in _load_done(out).items() if s in all_seeds}
        existing = read_jsonl(records_path) if records_path.is_file() else []
        kept = [r for r in existing if r.get("seed") in done]
        if len(kept) != len(existing) or (
            records_path.is_file() and not records_path.read_text().endswith("\n")
        ):
            tmp = records_path.with_suffix(".jsonl.tmp")
            write_jsonl(tmp, kept)
            os.replace(tmp, records_path)
        meta["seeds"] = all_seeds
        meta.setdefault("resumed", []).append(_now())
    else:
        meta = {
            "format": FORMAT,
            "experiment": experiment.name,
            **_description(experiment, config),
            "seed_doc": experiment.seed_doc,
            "scale": scale,
            "config_type": f"{type(config).__module__}.{type(config).__qualname__}",
            "config": config_dict,
            "seeds": all_seeds,
            "versions": versions(),
            "started": _now(),
        }
    write_json_atomic(config_path, meta)
    (out / RUN_FILE).unlink(missing_ok=True)  # present again only once this run completes

    todo = [s for s in seeds if s not in done]
    skipped = tuple(s for s in seeds if s in done)
    n_total = sum(int(d.get("n_records", 0)) for d in done.values())
    t0 = time.perf_counter()

    reporter: Reporter | None = None
    callback: ProgressCallback | None = None
    if progress is True and todo:
        reporter = Reporter()
        reporter.start(f"{experiment.name} ({scale})", len(todo))
        callback = _report_to(reporter)
    elif callable(progress):
        callback = progress

    def _run_all() -> int:
        total = n_total
        with records_path.open("a", encoding="utf-8") as fh:
            for i, seed in enumerate(todo):
                t_seed = time.perf_counter()
                repetition = all_seeds.index(seed)
                rng = as_generator(seed)  # == np.random.default_rng(seed)
                count = 0
                for rec in experiment.run(config, rng):
                    if not isinstance(rec, Mapping):
                        raise InvalidParameterError(
                            f"{experiment.name}: run yielded a {type(rec).__name__}; records must be dicts"
                        )
                    clash = [k for k in RESERVED_KEYS if k in rec]
                    if clash:
                        raise InvalidParameterError(
                            f"{experiment.name}: record key {clash[0]!r} is reserved (the runner adds it)"
                        )
                    append_record(fh, {"seed": seed, "repetition": repetition, **rec})
                    count += 1
                    total += 1
                    if callback is not None:
                        callback(ProgressEvent("record", experiment.name, seed, i, len(todo), count, total))
                os.fsync(fh.fileno())
                with done_path.open("a", encoding="utf-8") as dfh:
                    append_record(
                        dfh,
                        {
                            "seed": seed,
                            "n_records": count,
                            "elapsed_seconds": round(time.perf_counter() - t_seed, 6),
                            "finished": _now(),
                        },
                    )
                if callback is not None:
                    callback(
                        ProgressEvent("seed_done", experiment.name, seed, i + 1, len(todo), count, total)
                    )
        return total

    with reporting(reporter):  # deep code (kernel compilation) reports through it too
        n_total = _run_all()

    records = read_jsonl(records_path)
    figures: list[Path] = []
    if experiment.plot is not None and records:
        if reporter is not None:
            reporter.note(f"{experiment.name}: drawing the figures …")
        for fig in experiment.plot(records, out):
            p = Path(fig)
            if not p.is_absolute():  # a bare name (or a path relative to the run directory)
                p = out / p
            if not p.is_file():
                raise InvalidParameterError(
                    f"{experiment.name}: plot returned {p.name!r}, which was not written"
                )
            figures.append(p)
    elapsed = time.perf_counter() - t0
    write_json_atomic(
        out / RUN_FILE,
        {
            "experiment": experiment.name,
            "scale": scale,
            "seeds_done": sorted(_load_done(out)),
            "n_records": len(records),
            "figures": [os.path.relpath(f, out) for f in figures],
            "elapsed_seconds": round(elapsed, 6),
            "finished": _now(),
        },
    )
    return RunResult(
        out_dir=out,
        records_path=records_path,
        config_path=config_path,
        figures=tuple(figures),
        n_records=len(records),
        elapsed_seconds=elapsed,
        skipped_seeds=skipped,
    )
