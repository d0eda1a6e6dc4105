"""Progress of long work (:mod:`dpopt.progress`): ``dpopt reproduce`` reports on stderr unless
``--no-progress``; Python calls are silent by default; the compiled kernels announce their first
compilation through the current reporter."""

from __future__ import annotations

import contextlib
import dataclasses
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numba
import numpy as np
import pytest

from dpopt import progress
from dpopt.cli import main
from dpopt.experiments import registry
from dpopt.experiments.runner import run_experiment
from dpopt.solvers import _mf_kernels, als

NOTICE = "compiling numeric kernels (first run only"


@dataclasses.dataclass(frozen=True)
class Cfg:
    n: int = 3
    kernels: bool = False


def _run(cfg: Cfg, rng: np.random.Generator) -> Iterator[dict[str, Any]]:
    if cfg.kernels:  # as a kernel module does before the first call of its kernels
        progress.announce_compilation(als._gather, seconds=10)
    for i in range(cfg.n):
        yield {"i": i, "y": float(rng.normal())}


class _Compiled(Exception):
    """Raised instead of compiling a kernel (the tests check only what is said before)."""


def _refuse(*args: Any) -> None:
    raise _Compiled


@pytest.fixture
def demo() -> Iterator[str]:
    exp = registry.Experiment(
        name="progress-demo",
        description="Progress demo.",
        seed_doc="tests",
        run=_run,
        configs={"quick": Cfg(), "paper": Cfg(kernels=True)},
    )
    registry.register(exp)
    yield exp.name
    registry.unregister(exp.name)


@pytest.fixture
def cold(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every numba cache looks cold (as on a fresh checkout)."""
    monkeypatch.setattr(progress, "cold_numba_cache", lambda *dispatchers: True)


def test_reproduce_reports_progress_on_stderr(
    demo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["reproduce", demo, "--seeds", "0-1", "--out", str(tmp_path / "r"), "--no-report"]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("dpopt: progress-demo (quick): ")]
    assert lines[0] == "dpopt: progress-demo (quick): 0/2 ..."
    assert "1/2 seeds (seed 0: 3 records)" in lines[1] and "2/2 seeds (seed 1: 3 records)" in lines[2]


def test_no_progress_prints_no_progress(
    demo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["reproduce", demo, "--out", str(tmp_path / "r"), "--no-report", "--no-progress"]
    assert main(argv) == 0
    assert capsys.readouterr().err == ""


def test_python_calls_are_silent_by_default(
    demo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_experiment(demo, out_dir=tmp_path / "r")
    assert capsys.readouterr().err == ""


def test_compilation_is_announced_on_a_cold_cache(
    demo: str, cold: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_experiment(demo, scale="paper", out_dir=tmp_path / "on", progress=True)
    err = capsys.readouterr().err
    assert f"dpopt: {NOTICE}, ~10 s)…" in err
    assert err.index("0/1 ...") < err.index(NOTICE) < err.index("1/1 seeds")
    run_experiment(demo, scale="paper", out_dir=tmp_path / "off", progress=False)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("module", "first_kernel", "warm_flag"),
    [(_mf_kernels, "strata_gradient", "_WARM"), (als, "_counting_order", None)],
)
def test_kernel_warmups_announce_their_compilation(
    module: Any, first_kernel: str, warm_flag: str | None, cold: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if warm_flag is not None:
        monkeypatch.setattr(module, warm_flag, False)  # as in a fresh process
    monkeypatch.setattr(module, first_kernel, _refuse)
    out = io.StringIO()
    with progress.reporting(progress.Reporter(stream=out, bar=False)), pytest.raises(_Compiled):
        module.warmup()
    assert NOTICE in out.getvalue()
    with pytest.raises(_Compiled):  # no reporter: nothing is said
        module.warmup()


def test_compiled_kernels_are_not_announced() -> None:
    kernel = numba.njit(lambda x: x + 1)
    assert progress.cold_numba_cache(kernel)  # not compiled, not cached on disk
    assert kernel(1) == 2
    assert not progress.cold_numba_cache(kernel)
    out = io.StringIO()
    with progress.reporting(progress.Reporter(stream=out, bar=False)):
        progress.announce_compilation(kernel, seconds=1)
    assert out.getvalue() == ""


def test_plain_lines_are_throttled() -> None:
    out = io.StringIO()
    reporter = progress.Reporter(stream=out, bar=False, interval=3600)
    reporter.start("task", 3)
    reporter.update(1, "a")  # within the interval: not written
    reporter.update(2, "b", force=True)
    assert out.getvalue().splitlines() == ["dpopt: task: 0/3 ...", "dpopt: task: 2/3 b (0 s)"]


def test_a_long_python_call_reports_iterations_within_a_reporting_block() -> None:
    """Any iterative front door (here DP-GD through minimize) shows a sign of life when the caller
    wraps it in ``reporting(Reporter())``, and stays silent otherwise."""
    from dpopt import Budget, minimize
    from dpopt.problems import DataBounds, ERMProblem
    from dpopt.progress import Reporter, reporting

    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (200, 3)) / np.sqrt(3)
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    problem = ERMProblem("logistic", DataBounds(feature_norm=1.0), l2_penalty=0.1)

    def fit() -> None:
        minimize(problem, X, y, method="dp_gd", budget=Budget(1.0, 1e-5), rng=0, max_iter=50)

    out = io.StringIO()
    with reporting(Reporter(stream=out, bar=False, interval=0.0)):
        fit()
    lines = out.getvalue().splitlines()
    assert any(line.startswith("dpopt: iteration ") for line in lines), lines
    quiet = io.StringIO()
    with contextlib.redirect_stderr(quiet):
        fit()
    assert "iteration" not in quiet.getvalue()
