"""The documentation site: its code runs the way the pages say, and it builds strict.

Every ```python block of the guides runs here, in page order with one namespace per page (later
blocks see earlier blocks' names), from a fresh working folder.  A page that tells the reader to
save its code as a file and run it with ``python3 FILE.py`` (code that starts worker processes
must: the workers import the main script) is run exactly so, in a subprocess.  The strict build
(``dpopt docs``, warnings are errors) runs once per session when the docs extra is installed and
is skipped otherwise, saying how to install it; ``.ci/run`` installs it.  The built site is then
checked: search works from the file system (the offline index, searched in Chromium when one is
installed) and every public name has an entry in the API reference's inventory.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import warnings
import zlib
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from dpopt.cli import main
from test_api_reference import defined_at, public_names

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
#: How a page tells the reader to run its code as one script.
_SCRIPT = re.compile(r"run it with `python3 ([\w-]+\.py)`")
#: Code that starts worker processes (or Ray), which re-import the main script.
_STARTS_WORKERS = re.compile(r"ProcessEngine|RayEngine|engine=\"(?:processes|ray)\"|n_jobs=|multiprocessing")
#: Seconds a page's script may take (the consortium guide: about a minute on an idle machine).
_SCRIPT_TIMEOUT = 600


def _blocks(page: str) -> list[str]:
    return _BLOCK.findall((DOCS / page).read_text(encoding="utf-8"))


def _script(page: str) -> str | None:
    """The file name the page tells the reader to save its code as, if it does."""
    found = _SCRIPT.search((DOCS / page).read_text(encoding="utf-8"))
    return found.group(1) if found else None


def _docs_tools_missing() -> list[str]:
    return [m for m in ("mkdocs", "mkdocstrings", "material") if importlib.util.find_spec(m) is None]


def test_every_guide_page_is_listed_and_has_code() -> None:
    on_disk = {p.relative_to(DOCS).as_posix() for p in (DOCS / "guides").glob("*.md")}
    assert on_disk <= set(PAGES), f"guide pages whose code is not run: {sorted(on_disk - set(PAGES))}"
    for page in PAGES:
        assert _blocks(page), f"{page} has no python block"


@pytest.mark.parametrize("page", PAGES)
def test_page_code_runs(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = _blocks(page)
    script = _script(page)
    if script is not None:
        _run_as_script(page, script, blocks, tmp_path)
        return
    starts = [i + 1 for i, block in enumerate(blocks) if _STARTS_WORKERS.search(block)]
    assert not starts, (
        f"{page}: python blocks {starts} start worker processes, which import the main script: tell the "
        "reader to save the code as a file and run it with `python3 FILE.py`, and guard it with "
        '`if __name__ == "__main__":`'
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace: dict[str, object] = {"__name__": f"docs:{page}"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a page may show a warning on purpose (privacy.md)
        for i, block in enumerate(blocks):
            exec(compile(block, f"docs/{page} (python block {i + 1})", "exec"), namespace)


def _run_as_script(page: str, script: str, blocks: list[str], folder: Path) -> None:
    """What the reader does: the page's blocks, in order, saved as ``script``; ``python3 script``."""
    (folder / script).write_text("\n".join(blocks), encoding="utf-8")
    path = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=path)
    try:
        proc = subprocess.run(
            [sys.executable, script], cwd=folder, env=env, capture_output=True, text=True,
            timeout=_SCRIPT_TIMEOUT, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"{page}: python3 {script} took longer than {_SCRIPT_TIMEOUT} s")
    assert proc.returncode == 0, f"{page}: python3 {script} failed:\n{proc.stderr[-4000:]}"
    assert proc.stdout.strip(), f"{page}: python3 {script} printed nothing"


def test_pages_run_as_scripts_guard_their_code() -> None:
    """A script page's code runs under ``if __name__ == "__main__":`` (workers import the script)."""
    scripts = [page for page in PAGES if _script(page) is not None]
    assert "guides/admm-consortium.md" in scripts
    for page in scripts:
        for i, block in enumerate(_blocks(page)):
            top = [line for line in block.splitlines() if line and not line[0].isspace()]
            calls = [
                line for line in top if not re.match(r"(import|from|def|class|if __name__|#|\)|\])", line)
            ]
            assert not calls, f"{page} python block {i + 1}: code outside the __main__ guard: {calls}"


#: Shell sessions run as shell (bash, ``set -e``): page -> the user's own files the commands name,
#: and files the session must leave.  (The install lines of getting-started.md and the reproductions
#: of reproducing.md are too heavy here; the README's lines run in tests/test_readme.py.)
SHELL_PAGES = {
    "guides/query-release.md": ({"counts.csv": 256}, ["prefix256.npz", "answers.csv"]),
    "ledger.md": ({"counts.txt": 16}, ["dpopt-ledger.db", "more.csv", "survey-ledger.json"]),
}
_SHELL = re.compile(r"^```(?:bash|console)\n(.*?)^```", re.S | re.M)


@pytest.mark.parametrize("page", sorted(SHELL_PAGES))
def test_page_shell_session_runs(page: str, tmp_path: Path) -> None:
    inputs, outputs = SHELL_PAGES[page]
    rng = np.random.default_rng(0)
    for name, cells in inputs.items():  # the user's histogram, one count per line
        np.savetxt(tmp_path / name, rng.integers(0, 50, size=cells), fmt="%d")
    blocks = _SHELL.findall((DOCS / page).read_text(encoding="utf-8"))
    lines = [line.removeprefix("$ ") for block in blocks for line in block.splitlines() if line.strip()]
    assert lines and all(line.startswith("dpopt ") for line in lines), lines
    # `dpopt` is this checkout's (the installed command is the same entry point)
    script = 'set -euo pipefail\ndpopt() { "$DPOPT_PYTHON" -m dpopt "$@"; }\n' + "\n".join(lines) + "\n"
    path = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, DPOPT_PYTHON=sys.executable, PYTHONPATH=path)
    env.pop("DPOPT_LEDGER", None)  # the session's ledger is dpopt-ledger.db in its folder
    proc = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"{page}: the shell session failed:\n{proc.stderr[-4000:]}"
    for name in outputs:
        assert (tmp_path / name).is_file(), f"{page}: the session did not write {name}"


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


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once by ``dpopt docs`` (strict)."""
    missing = _docs_tools_missing()
    if missing:
        pytest.skip(f"docs extra not installed ({', '.join(missing)}): python3 -m pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("docs") / "site"
    assert main(["docs", "--out", str(out)]) == 0  # mkdocs's messages: the captured stderr
    return out


def test_docs_build_strict(site: Path) -> None:
    for page in ("index.html", "privacy.html", "reference/accounting.html", "changelog.html"):
        assert (site / page).is_file(), page  # pages are files: links work from the file system
    reference = (site / "reference" / "mechanisms.html").read_text(encoding="utf-8")
    assert "LaplaceMechanism" in reference and "Examples" in reference  # generated from the docstrings
    assert "Unreleased" in (site / "changelog.html").read_text(encoding="utf-8")
    flower = (site / "reference" / "flower.html").read_text(encoding="utf-8")
    assert "FlowerEngine" in flower  # an optional-dependency module, documented without flwr


def test_site_search_works_from_the_file_system(site: Path) -> None:
    index = (site / "search" / "search_index.js").read_text(encoding="utf-8")
    assert index.startswith("var __index = ") and "IterationInfo" in index  # loaded by a <script>
    home = (site / "index.html").read_text(encoding="utf-8")
    assert "javascripts/iframe-worker-shim.js" in home  # Web Workers under file://, shipped here
    assert not re.search(r"<script[^>]+src=\"https?://", home), "the offline site loads a script from the web"
    results = _search_in_browser(site / "index.html", "IterationInfo")
    assert any("iteration" in href for href in results), results


def _search_in_browser(page: Path, query: str) -> list[str]:
    """Open ``page`` as a file in headless Chromium, type ``query`` in the search box, return the
    links of the results.  Skipped when Playwright or Chromium is missing (``.ci/run`` has both)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright is not installed (python3 -m pip install -e '.[docs]')")
    names = ("chromium", "chromium-browser", "google-chrome", "chrome")
    exe = os.environ.get("DPOPT_CHROMIUM") or next((p for p in map(shutil.which, names) if p), None)
    if exe is None:
        pytest.skip("no Chromium found (apt-get install chromium, or set DPOPT_CHROMIUM to a browser)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        try:
            tab = browser.new_page()
            tab.goto(page.as_uri())
            tab.fill("input.md-search__input", query, timeout=30_000)
            tab.wait_for_selector("li.md-search-result__item a", timeout=30_000)
            return [
                str(a.get_attribute("href")) for a in tab.query_selector_all("li.md-search-result__item a")
            ]
        finally:
            browser.close()


def test_every_public_name_is_in_the_reference_inventory(site: Path) -> None:
    """Checked on what the build rendered: the inventory (objects.inv) lists each entry's path."""
    raw = (site / "objects.inv").read_bytes().split(b"\n", 4)[4]
    entries = {line.split(" ", 1)[0] for line in zlib.decompress(raw).decode().splitlines()}
    missing = [
        f"{m}.{n}" for m, n in public_names() if f"{m}.{n}" not in entries and defined_at(m, n) not in entries
    ]
    assert not missing, f"public names without an entry in the built API reference: {missing}"


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
