"""The ``dpopt`` command: ``list``, ``reproduce``, ``report`` and ``tour``.

Errors (unknown experiment, bad option values, unusable output directory, any dpopt error) print
one line ``dpopt: error: ...`` on stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import re
import sys
import webbrowser
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from dpopt.exceptions import DPOptError

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["main"]

PROG = "dpopt"
DEFAULT_RUNS_DIR = "dpopt-runs"
DEFAULT_TOUR_DIR = "dpopt-tour"
_SEED_RE = re.compile(r"^(\d+)(?:-(\d+))?$")
_MAX_SEEDS = 100_000


class _UsageError(Exception):
    """A command-line error; reported as one line and exit status 2."""


class _Parser(argparse.ArgumentParser):
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

    return Console(stderr=stderr, highlight=False)


def _note(message: str) -> None:
    print(f"{PROG}: note: {message}", file=sys.stderr)


# ------------------------------------------------------------------------------------- commands


def _cmd_list(args: argparse.Namespace) -> int:
    from rich.table import Table
    from rich.text import Text

    from dpopt.experiments import registry

    experiments = registry.all_experiments()
    for module, reason in registry.skipped_modules().items():
        _note(f"skipped {module}: {reason}")
    console = _console()
    if not experiments:
        console.print("No experiments are registered.", markup=False)
        return 0
    table = Table(title=f"{len(experiments)} experiments", title_justify="left")
    table.add_column("name", no_wrap=True, style="bold")
    table.add_column("description", overflow="fold")
    table.add_column("source", overflow="fold")
    for exp in experiments:
        table.add_row(Text(exp.name), Text(exp.summary), Text(exp.seed_doc))
    console.print(table)
    console.print("Run one with: dpopt reproduce NAME [--scale quick|paper] [--seeds 0-9]", markup=False)
    return 0


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
    result = run_experiment(
        experiment.name,
        scale=args.scale,
        seeds=seeds,
        out_dir=out,
        progress=not args.no_progress,
        resume=args.resume,
        overwrite=args.overwrite,
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
    if not args.no_report:
        report = write_report(result.out_dir)
        console.print(f"report: {report}", markup=False)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from dpopt.experiments.report import write_report

    target = write_report(Path(args.dir))
    _console().print(f"report: {target}", markup=False)
    if args.open == "yes":
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
    report = write_report(out, title="dpopt tour")
    console.print(f"Tour report: {report}", markup=False)
    console.print(f"Open it in a browser, e.g. {report.as_uri()}", markup=False)
    return 0


# --------------------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (subcommands ``list``, ``reproduce``, ``report``, ``tour``)."""
    from dpopt import __version__

    parser = _Parser(
        prog=PROG,
        description="Differentially private optimization: reproductions of the seed papers, reports, a tour.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("list", help="list the registered experiments")
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
    p.set_defaults(func=_cmd_reproduce)

    p = sub.add_parser("report", help="write DIR/index.html for the runs found in DIR")
    p.add_argument("dir", metavar="DIR", help="a run directory or a directory containing runs")
    p.add_argument("--open", choices=("yes", "no"), default="no", help="open the report in a browser")
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser("tour", help="run the quick tour experiments and write a report")
    p.add_argument("--out", metavar="DIR", default=DEFAULT_TOUR_DIR, help=f"(default {DEFAULT_TOUR_DIR})")
    p.add_argument("--no-progress", action="store_true", help="do not show progress bars")
    p.set_defaults(func=_cmd_tour)
    return parser


def _fail(message: str) -> int:
    one_line = " ".join(str(message).split())
    print(f"{PROG}: error: {one_line}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``dpopt`` command with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            raise _UsageError("a command is required: list, reproduce, report or tour (see 'dpopt --help')")
        return int(args.func(args))
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except (_UsageError, DPOptError) as exc:
        return _fail(str(exc))
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        return _fail(f"{exc.strerror or exc}{where}")
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted (rerun 'dpopt reproduce' with --resume to continue)", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
