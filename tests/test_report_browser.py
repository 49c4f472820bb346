"""actbench report in a real browser: headless Chromium (Debian's `chromium`) renders the page;
the rendered DOM has the sections, tables and figures, and nothing was fetched or blocked.

Without a chromium binary these tests skip (.ci/run installs it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from activation_bench.cli.main import app
from tests.conftest import TINY
from tests.test_report import SECTIONS

BROWSER = next((b for b in (shutil.which(n) for n in ("chromium", "chromium-browser")) if b), None)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no chromium binary on PATH (apt-get install -y chromium; "
                                "CI's .ci/run installs it)")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]

# Test-only probe, injected into a copy of the report: it records every resource the page fetched
# and every load the page's Content-Security-Policy blocked, and the rendered size of each figure.
PROBE = """<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline';
img-src data:; script-src 'unsafe-inline'">
<script>
window.__blocked = [];
document.addEventListener("securitypolicyviolation",
                          e => window.__blocked.push(e.blockedURI + " " + e.violatedDirective));
window.addEventListener("load", () => {
  const size = el => { const b = el.getBoundingClientRect(); return [Math.round(b.width), Math.round(b.height)]; };
  const clipped = [];  // text drawn (partly) outside its figure: [figure, text, left room, right room]
  document.querySelectorAll("figure svg").forEach((svg, i) => {
    const b = svg.getBoundingClientRect();
    svg.querySelectorAll("text").forEach(t => {
      const r = t.getBoundingClientRect();
      if (r.width && (r.left < b.left - 1 || r.right > b.right + 1 || r.top < b.top - 1 || r.bottom > b.bottom + 1))
        clipped.push([i, t.textContent.slice(0, 60), Math.round(r.left - b.left), Math.round(b.right - r.right)]);
    });
  });
  const r = {blocked: window.__blocked, fetched: performance.getEntriesByType("resource").map(e => e.name),
             svgs: [...document.querySelectorAll("figure svg")].map(size), clipped: clipped,
             texts: document.querySelectorAll("figure svg text").length,
             images: [...document.images].map(i => [i.src.slice(0, 60), i.naturalWidth])};
  const pre = document.createElement("pre"); pre.id = "probe"; pre.textContent = JSON.stringify(r);
  document.body.appendChild(pre);
});
</script>
"""


def chromium(tmp_path: Path, page: Path, *extra: str) -> str:
    """Run headless chromium on a local file with its own profile; returns stdout."""
    profile = tmp_path / "profile"
    proc = subprocess.run([BROWSER, *FLAGS, f"--user-data-dir={profile}", *extra, page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def probe(tmp_path: Path, html: str, rendered: Dom | None = None) -> dict:
    """The probe's findings for a page: its CSP meta replaced by one that lets the probe run.
    `rendered`, if given, is fed the rendered DOM too (the probe adds no section, table or figure)."""
    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html)
    page = tmp_path / "probe.html"
    page.write_text(html.replace("<head>", "<head>\n" + PROBE, 1), encoding="utf-8")
    dom = chromium(tmp_path, page, "--virtual-time-budget=5000", "--dump-dom")
    if rendered is not None:
        rendered.feed(dom)
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                      .replace("&gt;", ">"))


class Dom(HTMLParser):
    """Sections, compare tables with their row counts, and the drawing elements of each figure."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.tables: dict[str, int] = {}
        self.figures: list[int] = []
        self._table: str | None = None
        self._svg = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag == "section":
            self.sections.append(a.get("id", ""))
        elif tag == "table" and "compare" in (a.get("class") or ""):
            self._table = a.get("data-metric", "")
            self.tables[self._table] = 0
        elif tag == "tr" and self._table is not None and "data-row" in a:
            self.tables[self._table] += 1
        elif tag == "svg":
            self._svg += 1
            self.figures.append(0)
        elif self._svg and tag in ("path", "use", "text"):
            self.figures[-1] += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = None
        elif tag == "svg":
            self._svg -= 1


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("browser")
    result = CliRunner().invoke(app, ["sweep", "activation=gelu,relu", "data=normal,uniform", "seed=range(3)",
                                      "data.target=teacher", "data.n_val=5", *TINY, "--name", "study",
                                      "--runs-dir", str(root / "runs")])
    assert result.exit_code == 0, result.output
    out = root / "report.html"
    result = CliRunner().invoke(app, ["report", str(root / "runs" / "study"), "-o", str(out),
                                      "--metric", "final", "--metric", "epoch=2"])
    assert result.exit_code == 0, result.output
    return out


def test_rendered_dom_has_sections_tables_and_figures_nothing_fetched_or_blocked(report, tmp_path):
    """The rendered DOM read from the probe's rendering (the probe adds no section, table or figure):
    one browser start for both checks, as the classification report's test does."""
    dom = Dom()
    found = probe(tmp_path, report.read_text(encoding="utf-8"), dom)
    assert dom.sections == SECTIONS
    assert dom.tables == {"final": 4, "epoch=2": 4}
    assert len(dom.figures) == 4 and all(n > 20 for n in dom.figures), dom.figures  # ranking, curves x2, shapes
    assert found["blocked"] == [] and found["fetched"] == [] and found["images"] == []
    assert len(found["svgs"]) == 4 and found["clipped"] == [] and found["texts"] > 50
    assert all(w > 400 and h > 100 for w, h in found["svgs"]), found["svgs"]


def test_the_probe_sees_failed_and_external_loads_and_clipped_text(tmp_path):
    """The checks of the probe can fail: the same probe (one browser start) on a page with a missing
    and an external image, and a figure whose title starts left of its edge (the clipping check of
    test_long_expression_labels_are_never_clipped)."""
    html = ('<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" content="default-src \'none\'">'
            '</head><body><img src="missing.png"><img src="https://example.invalid/a.png">'
            '<figure><svg viewBox="0 0 200 50" width="400" height="100">'
            '<text x="-40" y="20" font-size="12">a title cut on the left</text>'
            '<text x="10" y="40" font-size="12">inside</text></svg></figure></body></html>')
    found = probe(tmp_path, html)
    assert len(found["blocked"]) == 2 and len(found["images"]) == 2 and all(w == 0 for _, w in found["images"])
    assert [c[1] for c in found["clipped"]] == ["a title cut on the left"] and found["texts"] == 2


def test_screenshot_is_drawn(report, tmp_path):
    shot = tmp_path / "shot.png"
    chromium(tmp_path, report, f"--screenshot={shot}", "--window-size=1280,2400")
    from matplotlib import image

    pixels = image.imread(shot)
    assert pixels.shape[:2] == (2400, 1280)
    assert (pixels[..., :3] < 0.5).mean() > 0.005  # text, tables and curves, not a blank page


def test_classification_report_renders_accuracy_tables_and_curves(tmp_path):
    """A classification sweep: its accuracy tables and loss-and-accuracy figures render at full size."""
    from tests.test_accuracy_render import fake_sweep

    sweep = fake_sweep(tmp_path / "runs", seeds=3)
    out = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["report", str(sweep), "-o", str(out), "--no-shapes"])
    assert result.exit_code == 0, result.output
    dom = Dom()  # read from the probe's rendering: one browser start for both
    found = probe(tmp_path, out.read_text(encoding="utf-8"), dom)
    assert dom.sections == SECTIONS and len(dom.figures) == 4  # ranking; train_loss; val and test with accuracy
    assert found["blocked"] == [] and found["fetched"] == []
    assert all(w > 400 and h > 100 for w, h in found["svgs"]), found["svgs"]
    assert found["svgs"][2][1] > 1.3 * found["svgs"][1][1]  # the accuracy row below the loss row


LONG = "exp(-abs(sinh(x) - x)) * max(x, 0)"
LONGER = "x*sigmoid(1.702*x) + 0.25*tanh(softplus(x))*exp(-abs(x)) - 0.125*sin(x)*cos(x)"


@pytest.fixture(scope="module")
def expressions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sweep of relu, gelu and three expressions (two of them long) at two learning rates."""
    root = tmp_path_factory.mktemp("expressions")
    fns = ",".join(f'"{fn}"' for fn in ("x*sigmoid(x)", LONG, LONGER))
    result = CliRunner().invoke(app, ["sweep", "activation=relu,gelu,expr", f"activation.fn={fns}", "lr=1e-3,1e-2",
                                      "seed=range(3)", "data.target=teacher", "data.n_val=5", *TINY,
                                      "--name", "exprs", "--runs-dir", str(root / "runs")])
    assert result.exit_code == 0, result.output
    return root / "runs" / "exprs"


@pytest.mark.parametrize("tuned", [False, True])
def test_long_expression_labels_are_never_clipped(expressions, tmp_path, tuned):
    """Every title, legend and label of every figure lies inside its figure in the browser: the
    curves' legends (`activation=<expression>, lr=...` untuned), the tuning section's sensitivity
    figure and the activations' shapes; the tuned curves name each function once."""
    out = tmp_path / "report.html"
    args = ["report", str(expressions), "-o", str(out), *(["--tune", "lr", "--tune-seeds", "1"] if tuned else
                                                           ["--no-shapes"])]  # the shapes: drawn once is enough
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    html = out.read_text(encoding="utf-8")
    found = probe(tmp_path, html)
    assert found["blocked"] == [] and found["fetched"] == []
    # tuned: sensitivity, curves x2, shapes; untuned: the ranking over the two lrs (tasks), curves x2
    assert len(found["svgs"]) == (4 if tuned else 3), found["svgs"]
    assert all(w > 400 and h > 60 for w, h in found["svgs"]), found["svgs"]
    assert found["clipped"] == [] and found["texts"] > 60, (found["clipped"], found["texts"])
    assert "activation=relu" in html  # the default baseline
    curves = html[html.index('<section id="curves">'):html.index('<section id="shapes">')]
    assert ("lr=0.01" in curves) != tuned  # tuned: one curve per function, at its chosen lr
