"""The README's Python tour runs as written."""

from __future__ import annotations

import re
from pathlib import Path


def test_readme_python_tour_runs(capsys) -> None:  # type: ignore[no-untyped-def]
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README has no python block"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "(ε=0.5, δ=1e-05)-DP [pld, add_remove]" in out
