"""tools/house_figures.py: the structural figures of issue 27 and their ratchet.

It runs clean on the repository against the checked-in baseline, and it finds planted offenders
(a 1,001-line module, a 151-line function body, 17 parameters, an import cycle through a lazy
import, a BaseException subclass and raise, a branch on an error message), fails on a new or grown
one and on a fixed one still in the baseline, and ``--shrink-baseline`` only removes entries.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "house_figures.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("house_figures", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["house_figures"] = module
    spec.loader.exec_module(module)
    return module


hf = _load()


def test_the_repository_has_no_regression_against_its_baseline() -> None:
    # the command CI runs (ruff format --check included when ruff is installed)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "house figures" in proc.stdout and "OK:" in proc.stdout


def _function(name: str, body_lines: int, *, docstring_lines: int = 0) -> str:
    doc = (
        ['    """' + "x" * 10, *(["    more"] * max(docstring_lines - 2, 0)), '    """']
        if docstring_lines
        else []
    )
    return "\n".join(
        [f"def {name}() -> int:", *doc, "    x = 0", *(["    x += 1"] * (body_lines - 2)), "    return x", ""]
    )


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    pkg = tmp_path / "src" / "dpopt"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "big.py").write_text("x = 1\n" * 1001)
    (pkg / "small.py").write_text("x = 1\n" * 1000)
    (pkg / "long.py").write_text(
        _function("too_long", 151) + "\n\n" + _function("at_limit", 150, docstring_lines=30)
    )
    params = ", ".join(f"p{i}: int" for i in range(17))
    (pkg / "params.py").write_text(
        f"def many({params}) -> None:\n    pass\n\n\n"
        "class Model:\n"
        f"    def method(self, {', '.join(f'p{i}' for i in range(16))}):\n        pass\n"
    )
    (pkg / "a.py").write_text("from dpopt import b\n")
    (pkg / "b.py").write_text("def f():\n    from dpopt.a import x  # lazy, still a cycle\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dpopt import a  # never runs\n"
    )
    (pkg / "errors.py").write_text(
        textwrap.dedent(
            """\
            import re

            class Stop(BaseException):
                pass

            class Stopper(Stop):
                pass

            def halt():
                raise BaseException("halt")

            def branch(f):
                try:
                    f()
                except ValueError as problem:
                    if "convert" in str(problem):
                        return 1
                    if re.search("x+", str(problem)):
                        return 2
                    text = str(problem).lower()
                    if text == "y":
                        return 3
                    raise RuntimeError(str(problem)) from None  # passing it on is fine
            """
        )
    )
    return tmp_path


def _run(root: Path, *extra: str) -> tuple[int, str]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = hf.main(["--root", str(root), "--no-ruff", *extra])
    return rc, out.getvalue()


def test_planted_offenders_are_found(planted: Path) -> None:
    figures, totals, _ = hf.measure(planted, ruff=False)
    assert figures["module_lines"] == {"src/dpopt/big.py": 1001}
    assert figures["function_lines"] == {"src/dpopt/long.py::too_long": 151}
    assert figures["parameters"] == {"src/dpopt/params.py::many": 17}
    assert figures["import_cycles"] == {"dpopt.a": 2, "dpopt.b": 2}
    assert totals["import cycles"] == ["dpopt.a <-> dpopt.b"]
    assert figures["base_exceptions"] == {
        "src/dpopt/errors.py::class Stop": 1,
        "src/dpopt/errors.py::class Stopper": 1,
        "src/dpopt/errors.py::raise in halt": 1,
    }
    assert figures["error_text_control_flow"] == {"src/dpopt/errors.py::branch": 3}


def test_new_grown_and_fixed_offenders_fail_and_the_baseline_only_shrinks(planted: Path) -> None:
    baseline = planted / "tools" / "house_baseline.json"
    baseline.parent.mkdir()
    baseline.write_text("{}")
    rc, out = _run(planted)
    assert rc == 1 and "new function_lines: src/dpopt/long.py::too_long (151)" in out
    assert "new import_cycles: dpopt.a (2)" in out

    figures, _, _ = hf.measure(planted, ruff=False)
    known = {cat: dict(v) for cat, v in figures.items()}
    known["function_lines"]["src/dpopt/long.py::too_long"] = 160  # today's size was larger
    known["module_lines"]["src/dpopt/gone.py"] = 1200  # an offender since fixed
    known["parameters"]["src/dpopt/params.py::many"] = 16  # grown since
    baseline.write_text(json.dumps(known))
    rc, out = _run(planted)
    assert rc == 1
    assert "grown parameters: src/dpopt/params.py::many (16 -> 17)" in out
    assert "fixed module_lines: src/dpopt/gone.py (was 1200): remove it from the baseline" in out
    assert "shrunk function_lines: src/dpopt/long.py::too_long (160 -> 151)" in out

    known["parameters"]["src/dpopt/params.py::many"] = 17
    baseline.write_text(json.dumps(known))
    rc, out = _run(planted, "--shrink-baseline")
    assert rc == 0, out
    written = json.loads(baseline.read_text())
    assert "src/dpopt/gone.py" not in written["module_lines"]
    assert written["function_lines"]["src/dpopt/long.py::too_long"] == 151
    assert written == {cat: figures.get(cat, {}) for cat in hf.CATEGORIES if cat != "ruff_format"} | {
        "ruff_format": {}
    }

    # shrinking never adds: a new offender still fails after --shrink-baseline
    (planted / "src" / "dpopt" / "big2.py").write_text("x = 1\n" * 1002)
    rc, out = _run(planted, "--shrink-baseline")
    assert rc == 1 and "new module_lines: src/dpopt/big2.py (1002)" in out
    assert "src/dpopt/big2.py" not in json.loads(baseline.read_text())["module_lines"]
