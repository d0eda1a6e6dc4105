"""``dpopt ledger init|add-dataset|show|history|export`` and the ``--ledger/--dataset`` options.

The ledger URL comes from ``--ledger URL`` (``sqlite:///ledger.db``, a plain file path, or
``postgresql://...``), else ``$DPOPT_LEDGER``, else ``dpopt-ledger.db`` in the working directory.
``dpopt answer`` and ``dpopt reproduce`` take ``--ledger URL --dataset NAME``: every release they
make is then checked against, and recorded in, that dataset's total budget before noise is drawn.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpopt.cli_types import nonneg_int, positive_float, probability
from dpopt.exceptions import InvalidParameterError

if TYPE_CHECKING:
    from dpopt.ledger import Dataset, Ledger, LedgerAccountant

__all__ = [
    "add_ledger_options",
    "add_ledger_parser",
    "ledger_accountant",
    "ledger_charging",
    "ledger_summary",
]

DEFAULT_LEDGER = "dpopt-ledger.db"
_HISTORY_ROWS = 50


def _url(args: argparse.Namespace) -> str:
    url: str | None = getattr(args, "ledger", None)
    return url or os.environ.get("DPOPT_LEDGER") or DEFAULT_LEDGER


def _open(args: argparse.Namespace, *, create: bool = False) -> Ledger:
    from dpopt.ledger import Ledger

    return Ledger(_url(args), create=create)


def _eps(x: float) -> str:
    return "∞" if math.isinf(x) else f"{x:.4g}"


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


# ------------------------------------------------------------------------------------ commands


def _cmd_init(args: argparse.Namespace) -> int:
    ledger = _open(args, create=True)
    n = len(ledger.datasets())
    _console().print(
        f"ledger: {ledger.url} (schema {ledger.schema_version}, {n} dataset{'s' if n != 1 else ''})",
        markup=False,
    )
    if n == 0:
        _console().print(
            "add a dataset with: dpopt ledger add-dataset NAME --epsilon E --delta D", markup=False
        )
    return 0


def _cmd_add(args: argparse.Namespace) -> int:
    from dpopt.accounting import Budget

    budget = Budget(args.epsilon, args.delta)
    ledger = _open(args)
    ds = ledger.add_dataset(
        args.name,
        budget=budget,
        neighbouring=args.neighbouring,
        accountant=args.accountant,
        description=args.description,
    )
    _console().print(
        f"dataset {ds.name}: budget {ds.budget}, {ds.neighbouring} neighbours, {ds.accountant} accountant "
        f"(ledger {ledger.url})",
        markup=False,
    )
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from rich.table import Table
    from rich.text import Text

    ledger = _open(args)
    datasets = (ledger.dataset(args.name),) if args.name else ledger.datasets()
    console = _console()
    if not datasets:
        console.print(
            f"ledger {ledger.url}: no datasets yet (dpopt ledger add-dataset NAME ...)", markup=False
        )
        return 0
    table = Table(title=f"ledger {ledger.url}", title_justify="left")
    table.add_column("dataset", style="bold", overflow="fold")
    table.add_column("budget", justify="right", no_wrap=True)
    table.add_column("relation", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("releases", justify="right", no_wrap=True)
    table.add_column("spent ε", justify="right", no_wrap=True)
    table.add_column("left ε", justify="right", no_wrap=True)
    for ds in datasets:
        spent = _recorded_total(ledger, ds)
        left = max(0.0, ds.budget.epsilon - spent)
        table.add_row(
            Text(ds.name),
            f"ε={ds.budget.epsilon:g} δ={ds.budget.delta:g}",
            ds.neighbouring,
            ds.accountant,
            str(ds.n_releases),
            _eps(spent),
            Text(_eps(left), style="red" if left <= 0 else ""),
        )
    console.print(table)
    for ds in datasets:
        if ds.description:
            console.print(f"{ds.name}: {ds.description}", markup=False)
    return 0


def _recorded_total(ledger: Ledger, ds: Dataset) -> float:
    """The dataset's total ε as recorded with its last release: the total the ledger checked against
    the budget, at the dataset's δ (``Ledger.spent`` recomputes it, which needs the tight accountants'
    libraries; ``dpopt ledger export`` does)."""
    if ds.n_releases == 0:
        return 0.0
    last = ledger.history(ds.name, since=ds.n_releases - 1)
    return last[-1].epsilon_total if last else 0.0


def _cmd_history(args: argparse.Namespace) -> int:
    from rich.table import Table
    from rich.text import Text

    from dpopt.ledger.serialize import describe_event

    ledger = _open(args)
    ds = ledger.dataset(args.name)
    releases = ledger.history(args.name)
    console = _console()
    if not releases:
        console.print(f"dataset {ds.name}: no releases yet (budget {ds.budget})", markup=False)
        return 0
    shown = releases[-args.limit :] if args.limit else releases
    title = f"dataset {ds.name}: {len(releases)} release(s), budget {ds.budget}"
    if len(shown) < len(releases):
        title += f" (last {len(shown)})"
    table = Table(title=title, title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("recorded (UTC)", no_wrap=True)
    table.add_column("who", overflow="fold")
    table.add_column("what", overflow="fold")
    table.add_column("event", overflow="fold")
    table.add_column("ε spent", justify="right")
    table.add_column("total ε", justify="right")
    for r in shown:
        what = r.label + (f" — {r.note}" if r.note else "")
        event = (f"{r.count} × " if r.count > 1 else "") + describe_event(r.event, limit=80)
        table.add_row(
            str(r.seq),
            r.recorded_at.strftime("%Y-%m-%d %H:%M"),
            Text(r.actor),
            Text(what),
            Text(event),
            _eps(r.epsilon_spent),
            _eps(r.epsilon_total),
        )
    console.print(table)
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    ledger = _open(args)
    data = ledger.export(args.name)
    text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    if args.out in (None, "-"):
        sys.stdout.write(text)
        return 0
    out = Path(args.out)
    if out.is_dir():
        raise InvalidParameterError(f"--out {args.out}: is a directory; give a file name such as ledger.json")
    if not out.parent.is_dir():
        raise InvalidParameterError(f"--out {args.out}: directory {out.parent} does not exist")
    tmp = out.with_name(f".{out.name}.{os.getpid()}.partial")  # complete or absent: never a partial file
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out)
    except OSError as exc:  # name the user's file, not the temporary one
        tmp.unlink(missing_ok=True)
        raise InvalidParameterError(
            f"--out {args.out}: cannot write ({exc.strerror or type(exc).__name__})"
        ) from None
    n = sum(len(d["releases"]) for d in data["datasets"])
    _console().print(f"exported {len(data['datasets'])} dataset(s), {n} release(s) -> {out}", markup=False)
    return 0


# ------------------------------------------------------------------------------------- parsers


def _add_url(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ledger",
        metavar="URL",
        help=f"sqlite:///path.db, a file path, or postgresql://... (default $DPOPT_LEDGER or {DEFAULT_LEDGER})",
    )


def add_ledger_parser(sub: Any) -> None:
    """Add ``dpopt ledger ...`` to the command's subparsers ``sub``."""
    p = sub.add_parser(
        "ledger",
        help="a persistent privacy ledger: datasets with a total budget and every release on them",
        description="A persistent privacy ledger (SQLite file or PostgreSQL). The ledger is --ledger URL, "
        f"else $DPOPT_LEDGER, else {DEFAULT_LEDGER}.",
    )
    lsub = p.add_subparsers(dest="ledger_command", metavar="SUBCOMMAND")
    p.set_defaults(func=_need_subcommand(p))

    q = lsub.add_parser("init", help="create the ledger (if it does not exist)")
    _add_url(q)
    q.set_defaults(func=_cmd_init)

    q = lsub.add_parser("add-dataset", help="register a dataset with its total budget")
    q.add_argument("name", metavar="NAME", help="dataset name (letters, digits, _ . : @ + / -)")
    q.add_argument("--epsilon", type=positive_float, required=True, metavar="E", help="total budget ε > 0")
    q.add_argument(
        "--delta", type=probability, default=0.0, metavar="D", help="total budget 0 <= δ < 1 (default 0)"
    )
    q.add_argument(
        "--neighbouring",
        choices=("add_remove", "replace_one"),
        default="add_remove",
        help="neighbouring relation of every release on it (default add_remove)",
    )
    q.add_argument(
        "--accountant",
        choices=("pld", "rdp", "basic", "advanced"),
        default="pld",
        help="how releases compose (default pld)",
    )
    q.add_argument("--description", default="", metavar="TEXT", help="free text")
    _add_url(q)
    q.set_defaults(func=_cmd_add)

    q = lsub.add_parser("show", help="datasets with their budget, spend and what is left")
    q.add_argument("name", metavar="NAME", nargs="?", help="one dataset (default all)")
    _add_url(q)
    q.set_defaults(func=_cmd_show)

    q = lsub.add_parser("history", help="every release recorded on a dataset")
    q.add_argument("name", metavar="NAME")
    q.add_argument(
        "--limit",
        type=nonneg_int,
        default=_HISTORY_ROWS,
        metavar="N",
        help=f"show the last N releases (default {_HISTORY_ROWS}; 0: all)",
    )
    _add_url(q)
    q.set_defaults(func=_cmd_history)

    q = lsub.add_parser("export", help="the ledger (or one dataset) as JSON")
    q.add_argument("name", metavar="NAME", nargs="?", help="one dataset (default all)")
    q.add_argument("--out", metavar="FILE", help="write to FILE (default: standard output)")
    _add_url(q)
    q.set_defaults(func=_cmd_export)


def _need_subcommand(p: argparse.ArgumentParser) -> Any:
    def run(args: argparse.Namespace) -> int:
        raise InvalidParameterError(
            "dpopt ledger: a subcommand is required: init, add-dataset, show, history or export"
        )

    return run


def add_ledger_options(p: argparse.ArgumentParser) -> None:
    """``--ledger URL --dataset NAME`` for a command that releases (answer, reproduce)."""
    g = p.add_argument_group("privacy ledger")
    g.add_argument(
        "--ledger",
        metavar="URL",
        help="record every release in this ledger (sqlite:///path.db, a file path, or postgresql://...); "
        "needs --dataset",
    )
    g.add_argument(
        "--dataset",
        metavar="NAME",
        help="the ledger dataset whose total budget the releases are charged to (needs --ledger)",
    )


def ledger_accountant(args: argparse.Namespace, *, command: str) -> LedgerAccountant | None:
    """The dataset's accountant for ``--ledger/--dataset`` (None when neither is given)."""
    url, name = getattr(args, "ledger", None), getattr(args, "dataset", None)
    if url is None and name is None:
        return None
    if url is None or name is None:
        raise InvalidParameterError(
            "--ledger URL and --dataset NAME go together (the ledger, and which dataset's budget to charge)"
        )
    from dpopt.ledger import Ledger

    return Ledger(url).accountant(name, note=command)


@contextlib.contextmanager
def ledger_charging(args: argparse.Namespace, *, command: str) -> Iterator[LedgerAccountant | None]:
    """Within the block every release of this process is charged to ``--ledger/--dataset`` (if given)."""
    acct = ledger_accountant(args, command=command)
    if acct is None:
        yield None
        return
    from dpopt.accounting.commit import charging

    with charging(acct):
        yield acct


def ledger_summary(acct: LedgerAccountant) -> str:
    """One line: what this command recorded on the dataset, its total and what is left."""
    added = acct.recorded
    spent = acct.spent()
    left = acct.remaining()
    what = (
        f"{len(added)} release(s) recorded on dataset {acct.dataset} (seq {added[0][0]}"
        + (f"-{added[-1][0]}" if len(added) > 1 else "")
        + f", adding ε={_eps(sum(a for _, a in added))})"
        if added
        else f"nothing recorded on dataset {acct.dataset}"
    )
    return f"ledger: {what}; the dataset has spent ε={_eps(spent.epsilon)} of its budget {acct.budget}, ε={_eps(left)} left"
