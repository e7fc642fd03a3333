"""Fronts, PNG/HTML, and the report page rendered in headless Chromium, on a real small tune."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tuner.results.pareto import fronts
from tuner.results.plots import front_html, front_png
from tuner.results.report import build_report

pytestmark = pytest.mark.integration
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def test_front_and_plots(real_study, tmp_path: Path) -> None:
    study, _, _ = real_study
    (f,) = fronts({"real": study}, "recall.effective_context", "load.output_tok_s")
    assert [p.trial for p in f.front] == sorted(p.trial for p in f.front if p.trial in (0, 1)) or f.front
    assert {p.signature for p in f.faint} == {"kv_cache_oom"}
    assert f.hypervolume > 0
    front_png([f], "recall.effective_context", "load.output_tok_s", tmp_path / "f.png")
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = front_html([f], "recall.effective_context", "load.output_tok_s")
    assert "kv_cache_oom" in page  # the faint point's signature is in its hover text


def test_report_markdown(real_study) -> None:
    study, _, space = real_study
    md = build_report(study, space).markdown
    for needle in (
        "## Trials by state",
        "| COMPLETE | 2 |",
        "| PRUNED | 1 |",
        "### kv_cache_oom: 1 trial(s)",
        "failed to allocate buffer for kv cache",
        "## Chosen config",
    ):
        assert needle in md


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)")
def test_report_renders_in_headless_chromium(real_study, tmp_path: Path) -> None:
    study, _, space = real_study
    page = tmp_path / "report.html"
    measure = (  # what overflows a 1280-pixel window: the page, and each table within its own box
        "<script>addEventListener('load',()=>{const w=[...document.querySelectorAll('table')]"
        ".filter(t=>t.scrollWidth>t.clientWidth+1||t.getBoundingClientRect().right>innerWidth+1).length;"
        "document.body.dataset.overflow=w+' '+(document.documentElement.scrollWidth>innerWidth+1)})</script>"
    )
    page.write_text(build_report(study, space).html.replace("</body>", measure + "</body>"))
    dom = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=10000",
            "--window-size=1280,900",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert 'class="main-svg"' in dom, "plotly did not draw the front"
    assert "scatterlayer" in dom and "tuner report: real" in dom
    for element in (
        "Trials",
        "Timeline",
        "Parameter importance",
        "Failures by signature",
        "Re-validation on fresh servers",
        "Noise",
        "Chosen config",
    ):
        assert f"{element}" in dom, element
    for plot in ('id="front"', 'id="timeline"'):
        assert plot in dom, plot
    assert dom.count('class="main-svg"') >= 2  # front, timeline drawn (importance where computable)
    # one load level per trial here: no chart of axes alone, one line that says why instead
    assert 'id="concurrency"' not in dom and "Throughput vs concurrency: left out, no trial measured" in dom
    assert 'data-overflow="0 false"' in dom, "a table or the page is wider than a 1280-pixel window"


def test_report_html_has_tables_and_code_not_literal_markdown(real_study) -> None:
    study, _, space = real_study
    page = build_report(study, space).html
    body = page.split("<h2>Front (interactive)</h2>")[0]  # plotly's own script may hold backticks
    assert "<table>" in body and "<td>COMPLETE</td>" in body and "<code>" in body
    assert "`" not in body and "**" not in body and "| COMPLETE |" not in body
