"""The light commands import no heavy library; ``dpopt list``'s static listing equals the registry.

Each command runs in a fresh interpreter (a subprocess), which then reports the heavy modules found
in ``sys.modules``.  No timing is asserted: the imports are what costs (about a second of CPU for
scipy and dp-accounting, more for numba and matplotlib).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dpopt import _experiment_catalog as catalog
from dpopt.cli import build_parser
from dpopt.experiments import registry

HEAVY = ("numpy", "scipy", "dp_accounting", "numba", "sklearn", "matplotlib", "ray", "pandas")

_PROBE = """
import contextlib, io, json, sys
from dpopt.cli import main
codes = []
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()):
        codes.append(main(argv))
print(json.dumps({"codes": codes, "out": out.getvalue(),
                  "heavy": sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)}))
"""


def _probe(commands: list[list[str]], cwd: Path) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(commands), json.dumps(HEAVY)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def _subcommands() -> list[list[str]]:
    """Every command and nested subcommand (``["list"]``, ..., ``["ledger", "show"]``, ...)."""

    def walk(parser: argparse.ArgumentParser, prefix: list[str]) -> list[list[str]]:
        out: list[list[str]] = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    out += [[*prefix, name], *walk(child, [*prefix, name])]
        return out

    return walk(build_parser(), [])


def _builtin() -> list[registry.Experiment]:
    """The registry's built-in experiments (other tests register their own for a while)."""
    return [e for e in registry.all_experiments() if e.run.__module__ in registry._BUILTIN_MODULES]


def test_help_of_every_command_imports_nothing_heavy(tmp_path: Path) -> None:
    commands = [["--help"]] + [[*c, "--help"] for c in _subcommands()]
    assert ["ledger", "show", "--help"] in commands
    result = _probe(commands, tmp_path)
    assert result["codes"] == [0] * len(commands)
    assert result["heavy"] == []


def test_list_imports_nothing_heavy_and_shows_the_registry(tmp_path: Path) -> None:
    result = _probe([["list"], ["list", "--long"]], tmp_path)
    assert result["codes"] == [0, 0]
    assert result["heavy"] == []
    short = _probe([["list"]], tmp_path)["out"]
    listed = [line.split()[0] for line in str(short).splitlines() if line.startswith("  ")]
    assert listed == [e.name for e in _builtin()]


def test_ledger_show_and_history_import_nothing_heavy(tmp_path: Path) -> None:
    from dpopt.accounting import Budget
    from dpopt.ledger import Ledger
    from dpopt.mechanisms import LaplaceMechanism

    ledger = Ledger(str(tmp_path / "dpopt-ledger.db"), create=True)
    ledger.add_dataset("survey", budget=Budget(1.0))  # the pld accountant (needs dp-accounting)
    acct = ledger.accountant("survey")
    for seed in range(3):
        LaplaceMechanism.calibrate(0.2, sensitivity=1.0).release(1.0, rng=seed, accountant=acct)
    result = _probe([["ledger", "show"], ["ledger", "history", "survey"]], tmp_path)
    assert result["codes"] == [0, 0]
    assert result["heavy"] == []
    shown = _probe([["ledger", "show"]], tmp_path)["out"]
    spent = ledger.spent("survey").epsilon  # recomputed: the recorded total shown is the same
    row = next(line for line in str(shown).splitlines() if "survey" in line)
    assert f"{spent:.4g}" in row and f"{1.0 - spent:.4g}" in row


def test_static_listing_equals_the_registry() -> None:
    entries, skipped = catalog.available()
    assert skipped == registry.skipped_modules()
    assert [(e.name, e.seed_doc, e.description) for e in entries] == [
        (e.name, e.seed_doc, e.description) for e in _builtin()
    ], "run: python -m dpopt._experiment_catalog --write"
    assert {e.module for e in entries} <= set(registry._BUILTIN_MODULES)


def test_static_listing_file_is_up_to_date() -> None:
    assert catalog.main([]) == 0, "run: python -m dpopt._experiment_catalog --write"


@pytest.mark.parametrize("module", sorted(catalog.REQUIRES))
def test_optional_modules_are_listed_with_their_requirement(module: str) -> None:
    assert module in registry._BUILTIN_MODULES
    assert any(e.module == module for e in catalog.ENTRIES)  # kept while the extra is absent here
