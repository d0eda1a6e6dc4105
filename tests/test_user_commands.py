"""The README's commands, run as a user runs them: the ``dpopt`` script of an installed package.

A session fixture installs this checkout (non-editable, no dependencies, no network) into a fresh
virtual environment that sees the running environment's site packages, and every test runs that environment's
``dpopt`` console script from a fresh temporary working folder, with no ``--out`` or a relative
one, exactly as the README shows.  These tests are marked ``e2e``; the default run (and
``.ci/run``) includes them.  Deselect them with ``-m "not slow and not e2e"`` for a quicker loop.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
import venv
from pathlib import Path

import pytest

from report_checks import PUBLIC, jargon_in, visible_text  # tests/report_checks.py

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
#: The cheapest quick-scale reproduction (measured: ~3 s; see tests/contracts/).
CHEAP = "admm-fig2"
_TIMEOUT = 600


def _see_running_packages(python: Path) -> None:
    """Let the venv of ``python`` import the dependencies installed where the tests run.

    The running environment's site packages go on the new venv's path through a ``.pth`` line (after
    the venv's own site packages, so the installed copy of dpopt wins).  ``system_site_packages``
    would not do: when the tests run in a virtualenv (as the README's command does on a fresh
    machine, and as ``.ci/run`` does), it exposes the base interpreter's packages, not this one's.
    A plain path line in a ``.pth`` file is not itself scanned for ``.pth`` files, so the running
    environment's editable install of the checkout stays invisible.
    """
    proc = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    target = Path(proc.stdout.strip())
    running = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    (target / "_dpopt_test_deps.pth").write_text("".join(f"{path}\n" for path in running))


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` folder of a venv with this checkout installed as a user installs it (non-editable)."""
    root = tmp_path_factory.mktemp("installed")
    # build from a copy: an in-tree build would write build/ and *.egg-info into the shared checkout
    src = root / "checkout"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(
        REPO / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    )
    env_dir = root / "venv"
    venv.EnvBuilder(system_site_packages=False, with_pip=False, symlinks=True).create(env_dir)
    bin_dir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    python = bin_dir / "python"
    _see_running_packages(python)
    # the running environment's pip installs into the venv when run by the venv's interpreter (no
    # ensurepip download)
    proc = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=_TIMEOUT,
    )
    hint = "\n(needs setuptools and wheel installed: python3 -m pip install -e '.[dev]')"
    assert proc.returncode == 0, proc.stdout + proc.stderr + hint
    return bin_dir


def _dpopt(bin_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DPOPT_DATASETS")}
    env["MPLBACKEND"] = "Agg"
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        ["dpopt", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=_TIMEOUT
    )


def _workdir(tmp_path: Path) -> Path:
    cwd = tmp_path / "user"
    cwd.mkdir()
    return cwd


def test_installed_script_is_not_the_checkout(installed: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(installed / "python"), "-c", "import dpopt; print(dpopt.__file__)"],
        cwd=_workdir(tmp_path),
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    where = Path(proc.stdout.strip()).resolve()
    assert str(installed.parent.resolve()) in str(where), where  # the venv's copy, not src/
    assert REPO / "src" not in where.parents


def test_readme_tour_command_with_default_out(installed: Path, tmp_path: Path) -> None:
    # README: python3 -m pip install . && dpopt tour   (the install is the session fixture)
    cwd = _workdir(tmp_path)
    proc = _dpopt(installed, cwd, "tour")
    assert proc.returncode == 0, proc.stderr
    out = cwd / "dpopt-tour"
    report = out / "index.html"
    assert report.is_file() and "Tour report" in proc.stdout
    runs = sorted(p.parent for p in out.glob("*/run.json"))
    assert runs and any(r.name == "tour-mechanisms" for r in runs)
    for run in runs:
        info = json.loads((run / "run.json").read_text())
        assert info["n_records"] > 0
        assert all((run / f).is_file() for f in info["figures"])
    assert "<img" in report.read_text()
    # a user's machine has no public data sets: the report names none as used, and speaks plainly
    text = visible_text(report.read_text())
    for m in PUBLIC.finditer(text):
        assert "not found" in text[m.end() : m.end() + 160], text[m.start() - 80 : m.end() + 160]
    assert jargon_in(text) == []


@pytest.mark.parametrize("out", [None, "runs/cheap"], ids=["default-out", "relative-out"])
def test_readme_reproduce_command(installed: Path, tmp_path: Path, out: str | None) -> None:
    # README: dpopt reproduce NAME --scale quick --seeds ... --out runs/tour
    cwd = _workdir(tmp_path)
    args = ["reproduce", CHEAP, "--scale", "quick", "--no-progress"]
    if out is not None:
        args += ["--out", out]
    proc = _dpopt(installed, cwd, *args)
    assert proc.returncode == 0, proc.stderr
    run = cwd / (out if out is not None else f"dpopt-runs/{CHEAP}-quick")
    info = json.loads((run / "run.json").read_text())
    assert info["n_records"] > 0 and info["figures"]
    assert all((run / f).is_file() for f in info["figures"])
    assert (run / "index.html").is_file()
    if out is None:
        return
    # a second run into the same folder is refused, --resume skips the completed seed
    again = _dpopt(installed, cwd, *args)
    assert again.returncode == 2 and "already holds a run" in again.stderr
    resumed = _dpopt(installed, cwd, *args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "skipped seeds already completed: 0" in resumed.stdout


def test_bad_setting_fails_before_a_run_folder_exists(installed: Path, tmp_path: Path) -> None:
    # README: dpopt reproduce hamsi-table3.1 --scale paper --set dataset=movielens:ml-1m/ratings.dat
    cwd = _workdir(tmp_path)
    args = ["reproduce", "hamsi-table3.1", "--set", "dataset=movielens:ml-1m/ratings.dat", "--out", "r"]
    proc = _dpopt(installed, cwd, *args)
    assert proc.returncode == 2
    assert "dataset" in proc.stderr and "does not exist" in proc.stderr and "Traceback" not in proc.stderr
    assert list(cwd.iterdir()) == []  # nothing was written, so a corrected rerun needs no --overwrite


def test_python_m_dpopt_runs_the_installed_package(installed: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(installed / "python"), "-m", "dpopt", "--version"],
        cwd=_workdir(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout.startswith("dpopt "), proc.stderr
