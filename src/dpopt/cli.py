"""The ``dpopt`` command: ``list``, ``reproduce``, ``report``, ``tour``, ``docs``, ``strategy``, ``answer``
and ``ledger`` (:mod:`dpopt.cli_ledger`).

Errors (unknown experiment, bad option values, unusable output directory, unreadable input files,
any dpopt error) print one line ``dpopt: error: ...`` on stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
import warnings
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from dpopt.exceptions import DPOptError

if TYPE_CHECKING:
    from collections.abc import Iterator

    import numpy as np
    from rich.console import Console

    from dpopt.exceptions import Setting
    from dpopt.linear_queries import StrategyResult, Workload

__all__ = ["main"]

PROG = "dpopt"
DEFAULT_RUNS_DIR = "dpopt-runs"
DEFAULT_TOUR_DIR = "dpopt-tour"
_SEED_RE = re.compile(r"^(\d+)(?:-(\d+))?$")
_MAX_SEEDS = 100_000
_RANDOM_WORKLOADS = ("ranges", "bernoulli", "marginals", "related")
_PER_QUERY_ROWS = 20


class _UsageError(Exception):
    """A command-line error; reported as one line and exit status 2."""


class _Parser(argparse.ArgumentParser):
    """Bad values reach :func:`main` as ``argparse.ArgumentError`` (the option's name and the
    problem as fields); other usage errors as :class:`_UsageError`.  Every subcommand's parser is one
    (``add_parser`` uses the parent's class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("exit_on_error", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


def _seed_token(text: str) -> list[int]:
    """``"3"`` -> [3]; ``"0-9"`` -> [0, ..., 9]; ``"1,4,7"`` -> [1, 4, 7]."""
    out: list[int] = []
    for part in text.split(","):
        m = _SEED_RE.match(part.strip())
        if not m:
            raise argparse.ArgumentTypeError(
                f"invalid seed {part!r}: expected a non-negative integer or a range such as 0-9"
            )
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise argparse.ArgumentTypeError(
                f"invalid seed range {part!r}: the end is smaller than the start"
            )
        if hi - lo >= _MAX_SEEDS:
            raise argparse.ArgumentTypeError(f"seed range {part!r} is too long (at most {_MAX_SEEDS} seeds)")
        out.extend(range(lo, hi + 1))
    return out


def _console(stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)  # never break a printed path


def _note(message: str) -> None:
    print(f"{PROG}: note: {message}", file=sys.stderr)


# ------------------------------------------------------------------------------------- commands


def _one_line(text: str, width: int) -> str:
    """``text`` on one line of at most ``width`` characters (cut at a word, ending in "…")."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    cut = text[: width - 1].rsplit(" ", 1)[0].rstrip(",;:(")
    return cut + "…"


def _cmd_list(args: argparse.Namespace) -> int:
    import shutil

    from dpopt._experiment_catalog import listing  # a static listing: imports no experiment module

    experiments, skipped = listing()
    for module, reason in skipped.items():
        _note(f"skipped {module}: {reason}")
    console = _console()
    if not experiments:
        console.print("No experiments are registered.", markup=False)
        return 0
    if args.long:
        from rich.table import Table
        from rich.text import Text

        table = Table(title=f"{len(experiments)} experiments", title_justify="left")
        table.add_column("name", no_wrap=True, style="bold")
        table.add_column("description", overflow="fold")
        table.add_column("source", overflow="fold")
        for exp in experiments:
            table.add_row(Text(exp.name), Text(" ".join(exp.description.split())), Text(exp.seed_doc))
        console.print(table)
    else:
        width = min(max(shutil.get_terminal_size((80, 24)).columns, 60), 120)
        name_w = max(len(exp.name) for exp in experiments)
        print(f"{len(experiments)} experiments ('dpopt list --long' adds descriptions and sources):")
        for exp in experiments:
            print(f"  {exp.name:<{name_w}}  {_one_line(exp.summary, width - name_w - 5)}")
    print("Run one with: dpopt reproduce NAME [--scale quick|paper] [--seeds 0-9]")
    return 0


def _docs_config(given: str | None) -> Path:
    """The ``mkdocs.yml`` to build: ``given``, else the nearest one above the working folder, else
    the source checkout's."""
    if given is not None:
        path = Path(given)
        if not path.is_file():
            raise _UsageError(f"--config {given}: file not found")
        return path
    here = Path.cwd().resolve()
    candidates = [d / "mkdocs.yml" for d in (here, *here.parents)]
    candidates.append(Path(__file__).resolve().parents[2] / "mkdocs.yml")  # src/dpopt/cli.py
    for cfg in candidates:
        if cfg.is_file() and (cfg.parent / "src" / "dpopt").is_dir():
            return cfg
    raise _UsageError(
        "the documentation is built from a source checkout: run 'dpopt docs' inside the repository "
        "(no mkdocs.yml found here or above), or pass --config PATH/mkdocs.yml"
    )


def _cmd_docs(args: argparse.Namespace) -> int:
    import importlib.util
    import os
    import subprocess

    config = _docs_config(args.config)
    missing = [m for m in ("mkdocs", "mkdocstrings", "material") if importlib.util.find_spec(m) is None]
    if missing:
        raise _UsageError(
            f"building the documentation needs {', '.join(missing)}: install the docs extra with "
            f"python3 -m pip install -e '.[docs]' (in {config.parent})"
        )
    out = (Path(args.out) if args.out is not None else config.parent / "site").resolve()
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--clean"]
    cmd += ["--config-file", str(config), "--site-dir", str(out)]
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    try:
        proc = subprocess.run(cmd, cwd=config.parent, env=env, timeout=args.timeout, check=False)
    except subprocess.TimeoutExpired:
        raise _UsageError(f"the documentation build took longer than --timeout {args.timeout:g} s") from None
    if proc.returncode != 0:
        raise _UsageError("the documentation build failed (strict: every warning is an error; see above)")
    _console().print(f"documentation: {out / 'index.html'}", markup=False)
    return 0


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from dpopt.experiments import registry
    from dpopt.experiments.report import write_report
    from dpopt.experiments.runner import run_experiment

    experiment = registry.get(args.name)  # unknown names fail before anything is written
    seeds = [s for token in args.seeds for s in token]
    out = (
        Path(args.out) if args.out is not None else Path(DEFAULT_RUNS_DIR) / f"{experiment.name}-{args.scale}"
    )
    if args.resume and args.overwrite:
        raise _UsageError("--resume and --overwrite cannot be used together")
    from dpopt.cli_ledger import ledger_charging, ledger_summary

    with ledger_charging(args, command=f"dpopt reproduce {experiment.name}") as ledger_acct:
        result = run_experiment(
            experiment.name,
            scale=args.scale,
            seeds=seeds,
            out_dir=out,
            progress=not args.no_progress,
            resume=args.resume,
            overwrite=args.overwrite,
            overrides=dict(args.set),
        )
    console = _console()
    if result.skipped_seeds:
        console.print(
            f"skipped seeds already completed: {', '.join(map(str, result.skipped_seeds))}", markup=False
        )
    console.print(
        f"{experiment.name} ({args.scale}): {result.n_records} records in {result.elapsed_seconds:.1f} s "
        f"-> {result.records_path}",
        markup=False,
    )
    for fig in result.figures:
        console.print(f"figure: {fig}", markup=False)
    if ledger_acct is not None:
        console.print(ledger_summary(ledger_acct), markup=False)
    if not args.no_report:
        report = write_report(result.out_dir)
        console.print(f"report: {report}", markup=False)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from dpopt.experiments.report import write_report

    target = write_report(Path(args.dir))
    _console().print(f"report: {target}", markup=False)
    if args.open == "yes":
        import webbrowser

        webbrowser.open(target.as_uri())
    return 0


def _cmd_tour(args: argparse.Namespace) -> int:
    from dpopt.experiments import registry
    from dpopt.experiments.report import write_report
    from dpopt.experiments.runner import run_experiment

    names = registry.tour_names()
    for missing in (n for n in registry.TOUR if n not in names):
        _note(f"tour experiment {missing!r} is not registered; skipped")
    if not names:
        raise _UsageError("no tour experiments are registered (dpopt.experiments.tour is not available)")
    out = Path(args.out)
    console = _console()
    for name in names:
        result = run_experiment(
            name, scale="quick", seeds=(0,), out_dir=out / name, progress=not args.no_progress, overwrite=True
        )
        console.print(
            f"{name}: {result.n_records} records, {len(result.figures)} figure(s) "
            f"in {result.elapsed_seconds:.1f} s",
            markup=False,
        )
    from dpopt.experiments.tour import INTRO

    report = write_report(out, title="dpopt tour", intro=INTRO)
    console.print(f"Tour report: {report}", markup=False)
    console.print(f"Open it in a browser, e.g. {report.as_uri()}", markup=False)
    return 0


# ------------------------------------------------------------------------------- linear queries


def _load_workload(text: str, *, allow_zero_columns: bool = False, schema: Any = None) -> Workload:
    """A workload from a file (if ``text`` names an existing file) or a spec such as ``prefix:n=64``.

    With a records ``schema``, ``kway:k=2,all_range=age,prefix=hours`` names all k-way marginals of
    the schema's attributes with range / prefix queries on the named ordered attributes.
    """
    from dpopt.linear_queries import workloads

    if text.strip().lower().startswith("kway"):
        return _kway_workload(text, schema)
    path = Path(text)
    if path.is_file():
        try:  # a DPOptError's hint (allow_zero_columns=True) is said with the command's flags by main()
            return workloads.load(path, allow_zero_columns=allow_zero_columns)
        except DPOptError:
            raise
        except (ValueError, EOFError, zipfile.BadZipFile) as exc:  # unparsable file contents
            raise _UsageError(f"workload file {text}: could not read a numeric matrix ({exc})") from None
    if ":" not in text and (path.suffix or "/" in text or "\\" in text):
        raise _UsageError(f"workload file not found: {text}")
    for part in text.split("*"):
        name, _, rest = part.partition(":")
        name = name.strip().lower().replace("-", "_")
        keys = {item.partition("=")[0].strip() for item in rest.split(",")}
        if name in _RANDOM_WORKLOADS and "seed" not in keys:
            raise _UsageError(
                f"workload spec {part.strip()!r}: a random workload needs a seed (e.g. "
                f"'{part.strip()},seed=0') so that 'dpopt strategy' and 'dpopt answer' build the same queries"
            )
    try:
        return workloads.from_spec(text)
    except DPOptError as exc:  # the spec's keys are what the user typed: say which spec
        raise _UsageError(
            exc.render(names={"workload spec": f"workload spec {text!r}"}.get, spelling=_no_api_settings)
        ) from None


def _kway_workload(text: str, schema: Any) -> Workload:
    from dpopt.linear_queries.union import product_marginals

    if schema is None:
        raise _UsageError(
            f"workload spec {text!r}: kway workloads are defined on a records schema; pass --schema"
        )
    _, _, rest = text.partition(":")
    k = 2
    queries: dict[int, str] = {}
    for item in filter(None, (t.strip() for t in rest.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip().lower()
        if not eq:
            raise _UsageError(f"workload spec: expected key=value, got {item!r}")
        if key == "k":
            if not value.strip().isdigit():
                raise _UsageError("workload spec: k must be a non-negative integer")
            k = int(value)
        elif key in ("all_range", "prefix", "identity"):
            for name in value.split("+"):
                if name.strip() not in schema.names:
                    raise _UsageError(f"workload spec: {name.strip()!r} is not an attribute of the schema")
                queries[schema.names.index(name.strip())] = key
        else:
            raise _UsageError(f"workload spec: unknown key {key!r} for kway (k, all_range, prefix)")
    return product_marginals(schema.shape, k, queries=queries)


def _load_schema(text: str) -> Any:
    """A records schema from JSON: ``{"age": {"range": [17, 90]}, "sex": ["F", "M"], "hours": 100}``,
    given inline (text starting with ``{``) or as the name of a file holding it."""
    import json

    from dpopt.linear_queries.records import Schema

    inline = text.lstrip().startswith("{")
    where = "--schema (inline JSON)" if inline else f"schema file {text}"
    path = Path(text)
    if not inline and not path.is_file():
        raise _UsageError(
            f"schema file not found: {text} (--schema takes a JSON file or inline JSON starting with '{{')"
        )
    try:
        raw = json.loads(text if inline else path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise _UsageError(f"{where}: not valid JSON ({type(exc).__name__})") from None
    if not isinstance(raw, dict):
        raise _UsageError(f"{where}: expected an object mapping attribute names to domains")
    domains: dict[str, Any] = {}
    for name, dom in raw.items():
        if isinstance(dom, dict):
            bounds = dom.get("range")
            if not (
                isinstance(bounds, list) and len(bounds) == 2 and all(isinstance(b, int) for b in bounds)
            ):
                raise _UsageError(f'{where}: {name!r}: expected {{"range": [low, high]}} (integers)')
            domains[name] = range(bounds[0], bounds[1] + 1)
        else:
            domains[name] = dom
    return Schema.from_dict(domains)


def _load_histogram(text: str) -> np.ndarray[Any, Any]:
    """Counts, one per cell, from ``.npy``, ``.csv`` (comma separated) or whitespace-separated text."""
    import numpy as np

    from dpopt._validation import parse_numeric_table

    path = Path(text)
    if not path.is_file():
        raise _UsageError(f"histogram file not found: {text}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # numpy only warns on an empty text file
            if path.suffix.lower() == ".npy":
                x = np.load(path, allow_pickle=False)
            else:  # the checked parser names the line and column, never the text found there
                delim = "," if path.suffix.lower() == ".csv" else None
                x = parse_numeric_table(
                    path.read_text(encoding="utf-8"), f"histogram file {text}", delimiter=delim
                )
        x = np.asarray(x, dtype=np.float64)
    except DPOptError as exc:
        raise _UsageError(f"{exc}; expected numeric counts, one per cell") from None
    except (ValueError, TypeError, EOFError, UserWarning) as exc:
        raise _UsageError(
            f"histogram file {text}: could not read numeric counts ({type(exc).__name__})"
        ) from None
    if x.ndim == 2 and 1 in x.shape:
        x = x.reshape(-1)
    if x.ndim != 1 or x.size == 0:
        raise _UsageError(
            f"histogram file {text}: expected one count per cell (a single row or column), got shape {x.shape}"
        )
    return x


def _load_strategy(text: str, workload: Workload) -> StrategyResult:
    from dpopt.linear_queries import StrategyResult

    path = Path(text)
    if not path.is_file():
        raise _UsageError(f"strategy file not found: {text}")
    try:
        return StrategyResult.load(path, workload=workload)  # refuses a strategy for another workload
    except DPOptError as exc:  # the API's advice (re-run optimize_strategy) becomes the command's
        advice = "; make one with 'dpopt strategy WORKLOAD --out FILE'" if exc.hint is not None else ""
        raise _UsageError(f"strategy file {text}: {exc.render(hints=False)}{advice}") from None
    except (ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as exc:
        raise _UsageError(f"strategy file {text}: not a strategy saved by 'dpopt strategy' ({exc})") from None


def _warn_lines(caught: list[warnings.WarningMessage]) -> None:
    for w in caught:
        print(f"{PROG}: warning: {' '.join(str(w.message).split())}", file=sys.stderr)


def _optimize(workload: Workload, method: str, tol: float, progress: bool | None = False) -> StrategyResult:
    from dpopt.linear_queries import optimize_strategy

    if progress is None:  # automatic: long dense optimizations on a terminal
        progress = workload.domain_size >= 1024 and sys.stderr.isatty()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = optimize_strategy(workload, method=method, tol=tol, progress=progress)  # type: ignore[arg-type]
    _warn_lines(caught)
    return result


def _cmd_strategy(args: argparse.Namespace) -> int:
    from rich.table import Table

    out = Path(args.out)
    if out.is_dir():
        raise _UsageError(f"--out {args.out}: is a directory; give a file name such as strategy.npz")
    workload = _load_workload(args.workload)
    result = _optimize(workload, args.method, args.tol)
    saved = result.save(out)
    table = Table(
        title=f"strategy for {workload.name} (m={workload.n_queries}, n={workload.domain_size})",
        title_justify="left",
        show_header=False,
    )
    table.add_column("", style="bold")
    table.add_column("", justify="right")
    table.add_row("method", result.method)
    table.add_row("objective", f"{result.objective:.6g}")
    table.add_row("certified lower bound", f"{result.lower_bound:.6g}")
    table.add_row("relative gap", f"{result.gap:.2e}")
    table.add_row("iterations", str(result.n_iter))
    table.add_row("CPU seconds", f"{result.cpu_seconds:.2f}")
    table.add_row("status", result.status)
    console = _console()
    console.print(table)
    console.print(f"saved: {saved}", markup=False)
    return 0


def _write_release(out: Path, header: list[str], rows: list[list[Any]], *, overwrite: bool) -> Path:
    """Write a paid-for release as CSV to ``out``; never lose it and never overwrite without ``overwrite``.

    The rows go to a temporary file next to ``out`` first.  Without ``overwrite`` it is linked to
    ``out`` only if ``out`` still does not exist; if a file appeared there meanwhile, the release
    is kept under a new name (printed) instead.  Returns where the release is.
    """
    import os
    import time

    tmp = out.with_name(f".{out.name}.{os.getpid()}.partial")
    with tmp.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
        fh.flush()
        os.fsync(fh.fileno())
    if overwrite:
        os.replace(tmp, out)
        return out
    try:
        os.link(tmp, out)  # atomic "create only if absent"
    except FileExistsError:
        pass
    except OSError:  # a file system without hard links
        if not out.exists():
            os.replace(tmp, out)
            return out
    else:
        tmp.unlink()
        return out
    kept = out.with_name(f"{out.stem}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}{out.suffix}")
    os.replace(tmp, kept)
    _note(f"{out} appeared while answering; the answers were saved to {kept} instead")
    return kept


def _cmd_answer(args: argparse.Namespace) -> int:
    import numpy as np
    from rich.table import Table

    from dpopt.accounting import Budget
    from dpopt.exceptions import InvalidParameterError
    from dpopt.linear_queries import answer, query_variances
    from dpopt.linear_queries.mechanism import _check_histogram

    out = Path(args.out)
    if out.is_dir():
        raise _UsageError(f"--out {args.out}: is a directory; give a file name such as answers.csv")
    if not out.parent.is_dir():
        raise _UsageError(f"--out {args.out}: directory {out.parent} does not exist")
    if out.exists() and not args.overwrite:  # checked before anything is computed, drawn or spent
        raise _UsageError(
            f"--out {args.out}: the file exists (answers released earlier?); choose another file, or pass "
            "--overwrite to replace it"
        )
    budget = Budget(args.epsilon, args.delta)
    if not budget.delta > 0:
        raise _UsageError("--delta: the Gaussian matrix mechanism needs δ > 0")
    schema = _load_schema(args.schema) if args.schema else None
    workload = _load_workload(args.workload, allow_zero_columns=args.allow_zero_columns, schema=schema)
    # answer() checks the data again; checking first avoids optimizing a strategy for nothing
    x: Any
    if schema is not None:  # HISTOGRAM is a CSV of records with a header row
        x = schema.records(args.histogram, clip=args.clip)
        if schema.domain_size != workload.domain_size:
            raise _UsageError(
                f"--schema {args.schema}: its domain has {schema.domain_size} cells, the workload's {workload.domain_size}"
            )
    else:
        try:
            x = _check_histogram(_load_histogram(args.histogram), workload.domain_size, "integer")
        except InvalidParameterError as exc:  # the API's hint about counts='real' has no CLI option: dropped
            message = exc.render(
                names={"histogram": f"histogram file {args.histogram}"}.get, spelling=_no_api_settings
            )
            raise _UsageError(message) from None
    progress = False if args.no_progress else (True if args.progress else None)
    strategy = (
        _load_strategy(args.strategy, workload)
        if args.strategy
        else _optimize(workload, "dual", 1e-4, progress)
    )
    try:  # data independent, no privacy cost; computed before the release
        variances: np.ndarray[Any, Any] | None = query_variances(workload, strategy, budget)
    except InvalidParameterError as exc:
        variances = None
        _note(f"no per-query error: {exc}")
    from dpopt.cli_ledger import ledger_accountant, ledger_summary

    ledger_acct = ledger_accountant(args, command=f"dpopt answer {args.workload}")
    if ledger_acct is not None and ledger_acct.neighbouring != args.neighbouring:
        raise _UsageError(
            f"--neighbouring {args.neighbouring}: the ledger dataset {ledger_acct.dataset} is declared under "
            f"{ledger_acct.neighbouring} neighbours; pass --neighbouring {ledger_acct.neighbouring}"
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = answer(
            workload,
            x,
            budget=budget,
            rng=args.seed,  # None: fresh OS entropy
            strategy=strategy,
            neighbouring=args.neighbouring,
            accountant=ledger_acct,  # None: a fresh accountant limited to --epsilon/--delta
            nonnegative=args.nonnegative,
        )
    _warn_lines(caught)
    std: np.ndarray[Any, Any] | None = None
    if variances is not None:
        # query_variances calibrates for add/remove; rescale to the σ actually used (same total)
        total = float(variances.sum())
        scale = result.expected_error / total if total > 0 else 1.0
        std = np.sqrt(variances * scale)
    rows = [
        [q, repr(float(value)), "" if std is None else repr(float(std[q]))]
        for q, value in enumerate(result.values)
    ]
    out = _write_release(out, ["query", "answer", "expected_std"], rows, overwrite=args.overwrite)

    console = _console()
    p = result.privacy
    console.print(f"privacy spent: {p}", markup=False)
    console.print(
        f"expected total squared error: {result.expected_error:.6g} "
        f"(per query {result.expected_error_per_query:.6g}, RMSE {np.sqrt(result.expected_error_per_query):.4g})",
        markup=False,
    )
    console.print(
        f"strategy: {result.strategy_method}; noise σ = {result.sigma:.6g} per strategy query; "
        f"sensitivity {result.sensitivity:.6g} ({p.neighbouring})",
        markup=False,
    )
    if result.bias > 1e-12:
        _note(f"the workload is not in the strategy's row space (relative bias {result.bias:.3g})")
    console.print(f"answers: {out} ({len(result.values)} queries)", markup=False)
    if ledger_acct is not None:
        console.print(ledger_summary(ledger_acct), markup=False)
    if args.per_query and std is not None:
        shown = min(_PER_QUERY_ROWS, len(std))
        table = Table(
            title=f"expected error per query (first {shown} of {len(std)})",
            title_justify="left",
        )
        table.add_column("query", justify="right")
        table.add_column("answer", justify="right")
        table.add_column("expected std", justify="right")
        table.add_column("expected squared error", justify="right")
        for q in range(shown):
            table.add_row(str(q), f"{result.values[q]:.6g}", f"{std[q]:.6g}", f"{std[q] ** 2:.6g}")
        console.print(table)
        console.print(f"{len(std)} queries; all rows are in {out}", markup=False)
    return 0


# --------------------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (``list``, ``reproduce``, ``report``, ``tour``, ``strategy``, ``answer``)."""
    from dpopt import __version__
    from dpopt.cli_ledger import add_ledger_options, add_ledger_parser
    from dpopt.cli_site import add_site_parsers
    from dpopt.cli_types import nonneg_int, positive_float, probability

    parser = _Parser(
        prog=PROG,
        description="Differentially private optimization: reproductions of the seed papers, reports, a tour.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("list", help="list the registered experiments, one line each")
    p.add_argument("--long", action="store_true", help="show each experiment's full description and source")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("reproduce", help="run a named experiment and write records, figures and a report")
    p.add_argument("name", metavar="NAME", help="experiment name (see 'dpopt list')")
    p.add_argument(
        "--scale", choices=("quick", "paper"), default="quick", help="configuration (default quick)"
    )
    p.add_argument(
        "--seeds",
        nargs="+",
        type=_seed_token,
        default=[[0]],
        metavar="SEED",
        help="seeds: integers and/or ranges, e.g. '--seeds 0 1 2' or '--seeds 0-9' (default 0)",
    )
    p.add_argument("--out", metavar="DIR", help=f"run directory (default {DEFAULT_RUNS_DIR}/NAME-SCALE)")
    p.add_argument("--resume", action="store_true", help="continue a run in DIR, skipping completed seeds")
    p.add_argument("--overwrite", action="store_true", help="replace a previous run in DIR")
    p.add_argument("--no-progress", action="store_true", help="do not show a progress bar")
    p.add_argument("--no-report", action="store_true", help="do not write DIR/index.html")
    p.add_argument(
        "--set",
        action="append",
        type=_setting,
        default=[],
        metavar="KEY=VALUE",
        help="change one setting of the configuration, e.g. '--set dataset=movielens:ratings.dat' or "
        "'--set threads=1,2' (repeatable; lists are comma-separated; the settings are in the run's config.json)",
    )
    add_ledger_options(p)
    p.set_defaults(func=_cmd_reproduce)

    p = sub.add_parser("report", help="write DIR/index.html for the runs found in DIR")
    p.add_argument("dir", metavar="DIR", help="a run directory or a directory containing runs")
    p.add_argument("--open", choices=("yes", "no"), default="no", help="open the report in a browser")
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser("tour", help="run the quick tour experiments and write a report")
    p.add_argument("--out", metavar="DIR", default=DEFAULT_TOUR_DIR, help=f"(default {DEFAULT_TOUR_DIR})")
    p.add_argument("--no-progress", action="store_true", help="do not show progress bars")
    p.set_defaults(func=_cmd_tour)

    p = sub.add_parser(
        "docs", help="build the documentation site (strict) from a source checkout; needs the docs extra"
    )
    p.add_argument("--out", metavar="DIR", help="where to write the site (default: site/ in the repository)")
    p.add_argument("--config", metavar="FILE", help="the mkdocs.yml to build (default: the repository's)")
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=600.0,
        metavar="SECONDS",
        help="give up after this long (default 600)",
    )
    p.set_defaults(func=_cmd_docs)

    workload_help = (
        "a workload spec such as 'prefix:n=256' or 'ranges:m=1024,n=512,seed=0' (random workloads "
        "need seed=N), or a workload file (.npy, .npz, .csv, whitespace-separated text; one query per row)"
    )
    p = sub.add_parser(
        "strategy",
        help="optimize a linear-query strategy for a workload and save it (no data, no privacy cost)",
    )
    p.add_argument("workload", metavar="WORKLOAD", help=workload_help)
    p.add_argument("--out", metavar="FILE", required=True, help="where to save the strategy (.npz)")
    p.add_argument(
        "--method",
        choices=("dual", "paper", "newton"),
        default="dual",
        help="optimizer: dual (default, certified), paper (COA as published), newton",
    )
    tol_help = "target certified relative gap (default 1e-4)"
    p.add_argument("--tol", type=positive_float, default=1e-4, metavar="TOL", help=tol_help)
    p.set_defaults(func=_cmd_strategy)

    p = sub.add_parser(
        "answer",
        help="answer a workload on a histogram with the Gaussian matrix mechanism (spends the budget)",
        description="Answer WORKLOAD on the counts in HISTOGRAM under (ε, δ)-DP. Every run is a new "
        "release of the data and spends the budget again.",
    )
    p.add_argument(
        "workload",
        metavar="WORKLOAD",
        help=workload_help + "; with --schema also 'kway:k=2,all_range=age' (k-way marginals of the schema's "
        "attributes, ranges or prefixes on the named ordered attributes, joined by +)",
    )
    p.add_argument(
        "histogram",
        metavar="HISTOGRAM",
        help="the private counts, one non-negative integer per cell (.npy, .csv or whitespace-separated text); "
        "with --schema: a CSV of records with a header row naming the attributes",
    )
    p.add_argument(
        "--schema",
        metavar="JSON",
        help="declared attribute domains of the records in HISTOGRAM, inline or in a JSON file, e.g. "
        '{"age": {"range": [17, 90]}, "sex": ["F", "M"], "hours": 100} (attribute order = the domain\'s '
        "axes); records outside are refused unless --clip is given",
    )
    p.add_argument(
        "--clip",
        action="store_true",
        help="with --schema: move out-of-range values of range attributes to the nearest end instead of refusing",
    )
    p.add_argument(
        "--allow-zero-columns",
        action="store_true",
        help="accept a workload file with cells no query touches (they are left unmeasured)",
    )
    p.add_argument(
        "--progress",
        action="store_true",
        help="show the optimizer's progress (default: automatically for n >= 1024 on a terminal)",
    )
    p.add_argument("--no-progress", action="store_true", help="never show the optimizer's progress")
    p.add_argument(
        "--nonnegative",
        action="store_true",
        help="post-process into non-negative, mutually consistent answers (no privacy cost; lowers the error "
        "of marginal tables, may raise it for ranges; expected_std stays the least-squares figure)",
    )
    p.add_argument("--epsilon", type=positive_float, required=True, metavar="E", help="privacy budget ε > 0")
    p.add_argument("--delta", type=probability, required=True, metavar="D", help="privacy budget 0 < δ < 1")
    p.add_argument(
        "--strategy",
        metavar="FILE",
        help="a strategy saved by 'dpopt strategy' for the same workload (default: optimize one now)",
    )
    p.add_argument(
        "--neighbouring",
        choices=("add_remove", "replace_one"),
        default="add_remove",
        help="neighbouring relation (default add_remove; replace_one roughly doubles the noise)",
    )
    p.add_argument(
        "--seed",
        type=nonneg_int,
        metavar="N",
        help="seed of the noise, for reproducibility only (a known seed lets anyone remove the noise); "
        "default: fresh OS entropy",
    )
    p.add_argument(
        "--out",
        metavar="FILE",
        default="answers.csv",
        help="CSV of the noisy answers: query, answer, expected_std (default answers.csv); an existing "
        "file is never replaced unless --overwrite is given",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the --out file if it exists (its answers are lost; they were paid for)",
    )
    p.add_argument(
        "--per-query",
        action="store_true",
        help=f"print the expected error of the first {_PER_QUERY_ROWS} queries",
    )
    add_ledger_options(p)
    p.set_defaults(func=_cmd_answer)
    add_ledger_parser(sub)
    add_site_parsers(sub)
    return _finish(parser)


def _finish(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Every subcommand learns its flags (library errors are said with them) and gets a description."""
    for command in _subparsers(parser):
        command.set_defaults(_flags=_flag_map(command))
    _describe(parser)
    return parser


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every subcommand's parser, depth first (``answer``, ``ledger``, ``ledger init``, ...)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in dict.fromkeys(action.choices.values()):  # aliases map to one parser
                yield command
                yield from _subparsers(command)


def _describe(parser: argparse.ArgumentParser) -> None:
    """A subcommand without a description shows its one-line help at the top of its ``--help``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                command = action.choices[choice.dest]
                if not command.description and choice.help:
                    command.description = choice.help[:1].upper() + choice.help[1:] + "."
                _describe(command)


def _flag_map(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Option dest -> its action (``epsilon`` -> the action of ``--epsilon``)."""
    return {a.dest: a for a in parser._actions if a.option_strings and a.dest not in ("help", "version")}


#: Library parameter -> the option (dest) that sets it where the names differ (``out_dir`` is ``--out``).
_API_PARAMS = {"out_dir": "out"}


def _no_api_settings(setting: Setting) -> None:
    """The spelling of a layer without the API's settings: a hint naming one is left out."""
    return None


def _cli_message(exc: DPOptError, args: argparse.Namespace | None) -> str:
    """Say a library error in the command's terms, by its fields: its parameter becomes the
    command's flag (``epsilon`` -> ``--epsilon``; a setting changed with ``--set`` is ``--set name``)
    and its hint names flags (``clip=True`` -> ``--clip``); a hint naming a setting the command has
    no flag for is left out (Python-API advice has no meaning on the command line)."""
    flags: dict[str, argparse.Action] = (getattr(args, "_flags", None) or {}) if args is not None else {}
    settings = {key for key, _ in (getattr(args, "set", None) or [])} if args is not None else set()

    def name(param: str) -> str | None:
        if param in settings:
            return f"--set {param}"
        action = flags.get(_API_PARAMS.get(param, param))
        return max(action.option_strings, key=len) if action is not None else None

    def spelling(setting: Setting) -> str | None:
        if setting.param in settings:
            value = "VALUE" if setting.value is ... else setting.value
            return f"--set {setting.param}={value}"
        action = flags.get(_API_PARAMS.get(setting.param, setting.param))
        if action is None:
            return None
        flag = max(action.option_strings, key=len)
        if action.nargs == 0:  # a switch: --clip
            return flag if action.const == setting.value else None
        value = (action.metavar or action.dest.upper()) if setting.value is ... else setting.value
        return f"{flag} {value}"

    return exc.render(names=name, spelling=spelling)


def _fail(message: str) -> int:
    one_line = " ".join(str(message).split())
    print(f"{PROG}: error: {one_line}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``dpopt`` command with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    args: argparse.Namespace | None = None
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            raise _UsageError(
                "a command is required: list, reproduce, report, tour, docs, strategy, answer or ledger "
                "(see 'dpopt --help')"
            )
        return int(args.func(args))
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except argparse.ArgumentError as exc:  # a bad option value, found while parsing
        return _fail(f"{exc.argument_name}: {exc.message}" if exc.argument_name else exc.message)
    except _UsageError as exc:
        return _fail(str(exc))
    except DPOptError as exc:
        return _fail(_cli_message(exc, args))
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        return _fail(f"{exc.strerror or exc}{where}")
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted (rerun 'dpopt reproduce' with --resume to continue)", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
