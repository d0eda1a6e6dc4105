"""Named reproductions of the seed documents' figures and tables.

* :mod:`~dpopt.experiments.registry`: :class:`Experiment`, :func:`register`, :func:`get`, :func:`names`.
* :mod:`~dpopt.experiments.runner`: :func:`run_experiment` writes ``config.json``, ``records.jsonl``
  (incrementally) and figures into a run directory.
* :mod:`~dpopt.experiments.records`: JSON-lines I/O and tidy-data helpers (:func:`summarize`).
* :mod:`~dpopt.experiments.plots`: matplotlib helpers (imported on demand; they pull in matplotlib).
* :mod:`~dpopt.experiments.report`: :func:`write_report`, a self-contained HTML report.
"""

from dpopt.experiments.records import group_by, load_records, select, summarize
from dpopt.experiments.registry import (
    TOUR,
    Experiment,
    all_experiments,
    get,
    names,
    register,
    skipped_modules,
    tour_names,
    unregister,
)
from dpopt.experiments.report import write_report
from dpopt.experiments.runner import ProgressEvent, RunResult, run_experiment

__all__ = [
    "TOUR",
    "Experiment",
    "ProgressEvent",
    "RunResult",
    "all_experiments",
    "get",
    "group_by",
    "load_records",
    "names",
    "register",
    "run_experiment",
    "select",
    "skipped_modules",
    "summarize",
    "tour_names",
    "unregister",
    "write_report",
]
