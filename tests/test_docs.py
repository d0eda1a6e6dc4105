"""The documentation site: its code runs, and it builds strict.

Every ```python block of the guides runs here, in page order with one namespace per page (later
blocks see earlier blocks' names), from a fresh working folder.  The strict build (``dpopt docs``,
warnings are errors) runs when the docs extra is installed and is skipped otherwise, saying how to
install it; ``.ci/run`` installs it.
"""

from __future__ import annotations

import importlib.util
import re
import warnings
from pathlib import Path
from types import ModuleType

import pytest

from dpopt.cli import main

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

#: Pages whose code is run here (pages written by benchmarks record commands, not snippets).
PAGES = [
    "getting-started.md",
    "guides/query-release.md",
    "guides/erm.md",
    "guides/admm.md",
    "guides/admm-consortium.md",
    "guides/flower.md",
    "guides/matrix-factorization.md",
    "guides/reproducing.md",
    "privacy.md",
    "ledger.md",
    "recipes.md",
]

_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _blocks(page: str) -> list[str]:
    return _BLOCK.findall((DOCS / page).read_text(encoding="utf-8"))


def _docs_tools_missing() -> list[str]:
    return [m for m in ("mkdocs", "mkdocstrings", "material") if importlib.util.find_spec(m) is None]


def test_every_guide_page_is_listed_and_has_code() -> None:
    on_disk = {p.relative_to(DOCS).as_posix() for p in (DOCS / "guides").glob("*.md")}
    assert on_disk <= set(PAGES), f"guide pages whose code is not run: {sorted(on_disk - set(PAGES))}"
    for page in PAGES:
        assert _blocks(page), f"{page} has no python block"


@pytest.mark.parametrize("page", PAGES)
def test_page_code_runs(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace: dict[str, object] = {"__name__": f"docs:{page}"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a page may show a warning on purpose (privacy.md)
        for i, block in enumerate(_blocks(page)):
            exec(compile(block, f"docs/{page} (python block {i + 1})", "exec"), namespace)


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dpopt_docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_nav_hook_drops_missing_pages_and_adds_unlisted_ones(tmp_path: Path) -> None:
    hooks = _hooks()
    for name in ("index.md", "reproductions.md", "new_results.md"):
        (tmp_path / name).write_text("# page\n")
    config = {
        "docs_dir": str(tmp_path),
        "nav": [
            {"Home": "index.md"},
            {"Results": [{"Verdicts": "reproductions.md"}, {"Ledger": "ledger.md"}]},
            {"Later": [{"Nothing yet": "later.md"}]},
        ],
    }
    nav = hooks.on_config(config)["nav"]
    assert nav == [{"Home": "index.md"}, {"Results": [{"Verdicts": "reproductions.md"}, "new_results.md"]}]
    text = "See [the ledger](../ledger.md#x) and [verdicts](reproductions.md) and [bad](nowhere.md)."
    out = hooks.on_page_markdown(text, None, config, None)
    # a link to a listed-but-unwritten page becomes text; other links (broken or not) stay for the check
    assert out == "See the ledger and [verdicts](reproductions.md) and [bad](nowhere.md)."


def test_docs_build_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = _docs_tools_missing()
    if missing:
        pytest.skip(f"docs extra not installed ({', '.join(missing)}): python3 -m pip install -e '.[docs]'")
    site = tmp_path / "site"
    assert main(["docs", "--out", str(site)]) == 0, capsys.readouterr().err
    for page in (
        "index.html",
        "privacy/index.html",
        "reference/accounting/index.html",
        "changelog/index.html",
    ):
        assert (site / page).is_file(), page
    reference = (site / "reference" / "mechanisms" / "index.html").read_text(encoding="utf-8")
    assert "LaplaceMechanism" in reference and "Examples" in reference  # generated from the docstrings
    assert "Unreleased" in (site / "changelog" / "index.html").read_text(encoding="utf-8")


def test_docs_command_outside_a_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["docs", "--config", "nowhere/mkdocs.yml"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dpopt: error: --config nowhere/mkdocs.yml: file not found")


def test_docs_command_says_how_to_install_the_tools(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mkdocs" else real(name, *a)
    )
    assert main(["docs", "--config", str(ROOT / "mkdocs.yml")]) == 2
    err = capsys.readouterr().err
    assert "needs mkdocs" in err and "pip install -e '.[docs]'" in err
