"""The README runs as written: its Python blocks, and every line of its bash blocks.

Each bash line is either run here, verbatim, through ``dpopt``'s ``main`` from a fresh working
folder (in README order, so later lines see the files earlier ones wrote), or listed in
``NOT_RUN_HERE`` with the reason and the test that covers it instead.  A new README line that is
in neither place fails :func:`test_every_readme_bash_line_is_accounted_for`.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from dpopt.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"
CI_RUN = Path(__file__).resolve().parents[1] / ".ci" / "run"

#: Lines not run by this module, with the reason (and where they do run).
NOT_RUN_HERE: dict[str, str] = {
    "python3 -m pip install . && dpopt tour": (
        "installing here would replace the editable install; tests/test_user_commands.py installs a "
        "non-editable copy and runs 'dpopt tour' with it from a fresh folder"
    ),
    'python3 -m pip install -q -e ".[dev,ray]" && python3 -m pytest -q': (
        "the test command itself; .ci/run runs it (kept in sync: test_readme_test_command_is_what_ci_runs)"
    ),
}

#: Placeholders in the README and what they stand for here: the run made by the line before.
PLACEHOLDERS = {"NAME": "tour-mechanisms", "DIR": "runs/tour"}

#: Lines that must fail cleanly here (exit 2, one line naming the problem, nothing written).
EXPECTED_ERRORS = {
    # MovieLens 1M is not shipped: the bad path is refused before a run folder exists
    "dpopt reproduce hamsi-table3.1 --scale paper --set dataset=movielens:ml-1m/ratings.dat": "does not exist",
}


def _bash_lines() -> list[str]:
    text = README.read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    assert blocks, "README has no bash block"
    lines = []
    for block in blocks:
        for raw in block.splitlines():
            line = raw.split(" #")[0].strip()  # drop the trailing comment
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def test_readme_python_tour_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README has no python block"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "(ε=0.5, δ=1e-05)-DP [pld, add_remove]" in out


def test_every_readme_bash_line_is_accounted_for() -> None:
    lines = _bash_lines()
    for line in lines:
        assert line in NOT_RUN_HERE or line.startswith("dpopt "), (
            f"README line neither run nor listed: {line}"
        )
    assert set(NOT_RUN_HERE) <= set(lines), "NOT_RUN_HERE names a line the README no longer has"
    assert set(EXPECTED_ERRORS) <= set(lines)


def test_readme_test_command_is_what_ci_runs() -> None:
    """CI runs the README's test command verbatim, in a fresh virtualenv, before it installs anything.

    So CI fails exactly when a new user's first test run would (an extra installed earlier would hide
    a module that needs it).
    """
    test_command = next(line for line in NOT_RUN_HERE if "pytest" in line)
    assert test_command in _bash_lines()
    commands = [
        ln.strip() for ln in CI_RUN.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")
    ]
    first_install = next(i for i, ln in enumerate(commands) if "pip install" in ln or "pytest" in ln)
    assert commands[first_install] == test_command, "the README's test command must be CI's first install"
    before = commands[:first_install]
    assert any(re.search(r"python3 -m venv ", ln) for ln in before), "CI must make a fresh virtualenv first"
    assert any(ln.startswith("source ") and "activate" in ln for ln in before)


def test_readme_dpopt_lines_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from dpopt.experiments import registry
    from dpopt.experiments.tour import TourConfig

    monkeypatch.chdir(tmp_path)
    # the user's own files that the linear-query lines name
    np.savetxt("counts.csv", np.random.default_rng(0).integers(0, 50, size=256), fmt="%d")
    np.save("W.npy", np.tril(np.ones((16, 16))))
    np.save("counts.npy", np.arange(16))
    # the commands run verbatim; the tour's experiment is shrunk so the lines stay cheap, and
    # 'dpopt tour' runs only it (the full quick tour runs in tests/test_user_commands.py)
    original = registry.get("tour-mechanisms")
    small = TourConfig(n_runs=400, n_runs_selection=100, steps=(1,))
    registry.register(dataclasses.replace(original, configs={"quick": small, "paper": small}), replace=True)
    monkeypatch.setattr(registry, "TOUR", [])
    try:
        for line in _bash_lines():
            if line in NOT_RUN_HERE:
                continue
            argv = [PLACEHOLDERS.get(a, a) for a in shlex.split(line)]
            assert argv[0] == "dpopt"
            before = sorted(p.name for p in tmp_path.iterdir())
            status = main([*argv[1:], "--no-progress"] if argv[1] in ("reproduce", "tour") else argv[1:])
            captured = capsys.readouterr()
            if line in EXPECTED_ERRORS:
                assert status == 2, line
                assert EXPECTED_ERRORS[line] in captured.err and "Traceback" not in captured.err
                assert sorted(p.name for p in tmp_path.iterdir()) == before, "a failed line wrote files"
            else:
                assert status == 0, f"{line}\n{captured.err}"
    finally:
        registry.register(original, replace=True)
    # what the lines promise
    assert (tmp_path / "runs" / "tour" / "records.jsonl").is_file()
    assert (tmp_path / "runs" / "index.html").is_file()
    assert (tmp_path / "dpopt-tour" / "index.html").is_file()
    assert (tmp_path / "prefix256.npz").is_file()
    assert len((tmp_path / "answers.csv").read_text().splitlines()) == 1 + 256
