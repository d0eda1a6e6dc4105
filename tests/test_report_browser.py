"""The tour's HTML report in a real headless browser: every image loads, nothing overflows.

Uses Playwright driving the system Chromium (Debian's ``chromium``; ``.ci/run`` installs it and the
``docs`` extra installs Playwright).  Skipped, saying which piece is missing, only when no browser
can be started.  Set ``DPOPT_SCREENSHOTS=DIR`` to keep the screenshots for a person to look at.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from dpopt.experiments import registry
from dpopt.experiments.report import write_report
from dpopt.experiments.runner import run_experiment
from dpopt.experiments.tour import INTRO, TourConfig

_CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def _browser_or_skip() -> tuple[Any, str]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright is not installed (python3 -m pip install -e '.[docs]')")
    exe = os.environ.get("DPOPT_CHROMIUM") or next(
        (p for p in (shutil.which(n) for n in _CHROMIUM_NAMES) if p), None
    )
    if exe is None:
        pytest.skip("no Chromium found (apt-get install chromium, or set DPOPT_CHROMIUM to a browser)")
    return sync_playwright, exe


@pytest.fixture(scope="module")
def tour_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real tour report: the audit run (shrunk) and a one-row, four-panel line figure."""
    out = tmp_path_factory.mktemp("tour")
    original = registry.get("tour-mechanisms")
    small = TourConfig(n_runs=1_000, n_runs_selection=200, steps=(1, 10))
    registry.register(dataclasses.replace(original, configs={"quick": small, "paper": small}), replace=True)
    try:
        run_experiment("tour-mechanisms", seeds=(0,), out_dir=out / "tour-mechanisms", progress=False)
    finally:
        registry.register(original, replace=True)
    return write_report(out, title="dpopt tour", intro=INTRO)


_CHECKS = """
() => {
  const vw = document.documentElement.clientWidth;
  const imgs = [...document.images].map(i => ({src: i.currentSrc.slice(0, 40), ok: i.complete && i.naturalWidth > 0,
                                              shown: i.getBoundingClientRect().width}));
  const overflowing = [];
  for (const el of document.querySelectorAll('h1,h2,h3,p,li,figcaption,summary,.meta span,img,figure,table')) {
    const r = el.getBoundingClientRect();
    if (el.closest('.table-wrap') && el.tagName !== 'TABLE') continue;   // tables scroll inside their box
    if (el.tagName === 'TABLE') { const w = el.closest('.table-wrap'); if (w && w.clientWidth <= vw) continue; }
    if (r.right > vw + 1 || el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX === 'visible'
        && el.tagName !== 'TABLE' && el.tagName !== 'IMG' && el.tagName !== 'FIGURE')
      overflowing.push(el.tagName + ': ' + (el.textContent || '').trim().slice(0, 60));
  }
  const anchors = [...document.querySelectorAll('nav.toc a')].map(a => a.getAttribute('href'));
  const missing = anchors.filter(h => !document.querySelector(h));
  return {imgs, overflowing, missing, pageWidth: document.documentElement.scrollWidth, vw,
          h2: [...document.querySelectorAll('h2')].map(h => h.textContent.trim()),
          text: document.body.innerText};
}
"""


@pytest.mark.parametrize("width", [1280, 760])
def test_tour_report_renders_in_a_browser(tour_report: Path, width: int) -> None:
    sync_playwright, exe = _browser_or_skip()
    keep = os.environ.get("DPOPT_SCREENSHOTS")
    with sync_playwright() as pw:
        try:
            browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"], timeout=60_000)
        except Exception as exc:  # the browser binary exists but cannot start here
            pytest.skip(f"Chromium at {exe} could not be started: {type(exc).__name__}")
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.goto(tour_report.as_uri(), wait_until="load", timeout=60_000)
            page.evaluate("() => [...document.images].forEach(i => i.loading = 'eager')")
            page.wait_for_function("() => [...document.images].every(i => i.complete)", timeout=30_000)
            result = page.evaluate(_CHECKS)
            if keep:
                Path(keep).mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(Path(keep) / f"tour-report-{width}.png"), full_page=True)
        finally:
            browser.close()
    assert result["imgs"] and all(i["ok"] for i in result["imgs"]), result["imgs"]
    assert all(i["shown"] > 0.4 * min(width, 1180) - 60 for i in result["imgs"]), result["imgs"]
    assert not result["overflowing"], result["overflowing"]
    assert result["pageWidth"] <= result["vw"], "the page scrolls sideways"
    assert not result["missing"], f"table of contents points nowhere: {result['missing']}"
    assert result["h2"][0].startswith("1. tour-mechanisms")  # the audit comes first
    text = result["text"]
    assert "1 seed (seed 0)" in text and "seeds:" not in text
    assert "stayed within their claimed ε" in text and "refuted the 2 deliberately broken" in text
