"""actbench report: the page's numbers equal `compare --format json`, sections in order, values
escaped, nothing external, no torch without the shapes section, bad input exits 2 with nothing written."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from typer.testing import CliRunner

from activation_bench.cli.main import app
from activation_bench.render import report as rep
from tests.conftest import TINY

SECTIONS = ["summary", "tables", "ranking", "curves", "shapes", "problems", "methods", "provenance"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real tiny sweep with a held-out loss: 2 activations x 2 data x 4 seeds."""
    root = tmp_path_factory.mktemp("report") / "runs"
    result = CliRunner().invoke(app, ["sweep", "activation=gelu,relu", "data=normal,uniform", "seed=range(4)",
                                      "data.target=teacher", "data.n_val=5", *TINY, "--name", "study",
                                      "--runs-dir", str(root)])
    assert result.exit_code == 0, result.output
    return root / "study"


def invoke(*args: str):
    return CliRunner().invoke(app, ["report", *map(str, args)])


def figure_texts(fig: Any) -> list[str]:
    """A matplotlib figure's titles, axis labels, texts and legend entries, without drawing it (tick
    labels are chosen at drawing time: not among them). Collected by hand: Artist.findobj builds
    every axis's ticks, as costly as a draw."""
    texts = [fig.get_suptitle(), fig.get_supxlabel(), fig.get_supylabel(), *(t.get_text() for t in fig.texts)]
    legends = [*fig.legends]
    for ax in fig.axes:
        texts += [ax.get_title(loc) for loc in ("left", "center", "right")]
        texts += [ax.get_xlabel(), ax.get_ylabel(), *(t.get_text() for t in ax.texts)]
        legends += [ax.get_legend()] if ax.get_legend() is not None else []
    for legend in legends:
        texts += [legend.get_title().get_text(), *(t.get_text() for t in legend.get_texts())]
    return texts


def leave_figures_undrawn(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace the report's drawing (render.report.svg: matplotlib's savefig, most of a report's
    CPU time) by a stand-in for tests that read a page's tables and text, not its figures' layout:
    an <svg> element labelled as the figure would be, holding each text the figure was built with
    (titles, axis labels, legends; escaped) as a <text> element. The figures are still built; returns
    the label of each one handed over, in order. test_sections_in_order_and_self_contained and the
    browser tests (test_report_browser.py) draw theirs."""
    from html import escape

    labels: list[str] = []

    def stand_in(fig: Any, prefix: str, tight: bool = False) -> str:
        labels.append(prefix)
        texts = "".join(f"<text>{escape(t)}</text>" for t in figure_texts(fig) if t)
        return f'<svg role="img" aria-label="{prefix}">{texts}</svg>'

    monkeypatch.setattr(rep, "svg", stand_in)
    return labels


@pytest.fixture
def undrawn(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return leave_figures_undrawn(monkeypatch)


class Cells(HTMLParser):
    """Collects, per compare table (data-metric), per row, the cells' data-* numbers and text."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[dict]]] = {}
        self.section_ids: list[str] = []
        self._table: str | None = None
        self._cell: dict | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag == "section":
            self.section_ids.append(a.get("id", ""))
        elif tag == "table" and "compare" in (a.get("class") or ""):
            self._table = a["data-metric"]
            self.tables[self._table] = []
        elif tag == "tr" and self._table and "data-row" in a:
            self.tables[self._table].append([])
        elif tag == "td" and self._table:
            self._cell = {"data": {k[5:]: v for k, v in a.items() if k.startswith("data-")}, "text": ""}
            self.tables[self._table][-1].append(self._cell)

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = None
        elif tag == "td":
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell["text"] += data


def parse(html: str) -> Cells:
    p = Cells()
    p.feed(html)
    return p


def test_numbers_equal_compare_json(sweep, tmp_path, undrawn):
    out = tmp_path / "r.html"
    metrics = ["final", "epoch=2", "auc", "to=0.5", "early_stop"]
    args = [sweep, "--output", out, "--baseline", "activation=relu", "--no-shapes"]
    result = invoke(*args, *[a for m in metrics for a in ("--metric", m)])
    assert result.exit_code == 0, result.output
    page = parse(out.read_text(encoding="utf-8"))
    assert list(page.tables) == metrics
    checked: set[str] = set()
    for metric in metrics:
        res = CliRunner().invoke(app, ["compare", str(sweep), "--metric", metric, "--baseline", "activation=relu",
                                       "--format", "json"])
        assert res.exit_code == 0, res.output
        doc = json.loads(res.stdout)
        rows = page.tables[metric]
        assert len(rows) == len(doc["rows"]) == 4
        for cells, want in zip(rows, doc["rows"]):
            assert [c["text"] for c in cells[: len(doc["group_columns"])]] == [want[g] for g in doc["group_columns"]]
            for cell in cells:
                for key, value in cell["data"].items():
                    checked.add(key)
                    if want[key] is None:
                        assert value == "", (metric, key)
                    else:
                        assert float(value) == want[key], (metric, key)  # exact: repr round-trips
    assert {"n", "geo_mean", "mean", "ci_low", "ci_high", "median", "n_pairs", "mean_diff", "ratio", "win_rate",
            "p_t_holm", "p_wilcoxon_holm", "d_z", "n_diverged", "n_not_reached"} <= checked


def test_sections_in_order_and_self_contained(sweep):
    """Drawn in full (most reports here leave the drawing out), and written where a report goes by
    default: inside the sweep."""
    out = sweep / "report.html"
    result = invoke(sweep)
    assert result.exit_code == 0, result.output
    html = out.read_text(encoding="utf-8")
    out.unlink()  # the other tests read the sweep without it
    assert len(html) > 10_000
    page = parse(html)
    assert page.section_ids == SECTIONS
    assert list(page.tables) == ["final", "early_stop"]  # validation losses: early_stop by default
    assert html.count("<svg") == 4  # ranking diagram, train_loss and val_loss curves, activation shapes
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:|//)""", html, re.I)
    assert not re.search(r"<script|<link|<iframe|@import|url\((?!#)", html, re.I)
    assert "<?xml" not in html and "<!DOCTYPE svg" not in html
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))  # figures' ids are prefixed, so they never clash
    assert "actbench sweep activation=gelu,relu data=normal,uniform" in html  # provenance from sweep.yaml
    assert "teacher_hidden_dim" in html  # one member's resolved config
    assert "n_val: 5" in html
    import torch

    from activation_bench.host import cpu_model  # the runs' CPU and thread count, from their summaries
    n = torch.get_num_threads()
    assert f"<dt>runs trained on</dt><dd>{cpu_model()}, {n} torch thread{'s' * (n != 1)}</dd>" in html


def test_ranking_equals_actbench_rank(sweep, tmp_path, undrawn):
    out = tmp_path / "r.html"
    assert invoke(sweep, "--output", out, "--no-shapes", "--metric", "epoch=2").exit_code == 0
    html = out.read_text(encoding="utf-8")
    body = html[html.index('<table class="ranking">'):]
    body = body[body.index("<tbody>"):body.index("</tbody>")]
    rows = [re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", body)]
    res = CliRunner().invoke(app, ["rank", str(sweep), "--metric", "epoch=2", "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["tasks"] == ["data=normal", "data=uniform"]
    assert [(r[0], r[1], r[-1]) for r in rows] == [(w["activation"], f"{w['mean_rank']:.2f}", w["group"])
                                                  for w in doc["rows"]]
    assert 'aria-label="ranking"' in html  # the critical-difference diagram


SHIFT = [-0.3, -0.1, -0.25, 0.05]  # log10 of gelu's loss over relu's, per seed


def _csv(path: Path, activations=("relu", "gelu"), diverge: bool = False) -> Path:
    rows = []
    for i, act in enumerate(activations):
        for seed in range(4):
            for e in range(1, 4):
                loss = (seed + 2.0) / e**2 * 10 ** (SHIFT[seed] if i else 0.0)
                rows.append({"activation": act, "seed": seed, "epoch": e, "train_loss": loss})
    if diverge:
        rows.append({"activation": activations[0], "seed": 9, "epoch": 1, "train_loss": float("nan")})
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_values_from_files_and_title_are_escaped(tmp_path):
    """Drawn in full: the figures' legends hold the activation's name too (escaped by matplotlib)."""
    evil = "<script>alert(1)</script>"
    data = _csv(tmp_path / "t.csv", activations=("relu", evil))
    out = tmp_path / "r.html"
    result = invoke(data, "--output", out, "--title", "<b>study</b> & co")
    assert result.exit_code == 0, result.output
    html = out.read_text(encoding="utf-8")
    assert "<script" not in html and "<b>study" not in html
    assert "&lt;b&gt;study&lt;/b&gt; &amp; co" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "not a registered activation" in html  # the shapes section leaves it out, and says so


def test_diverged_and_incomplete_runs_are_listed(sweep, tmp_path, undrawn):
    data = _csv(tmp_path / "t.csv", diverge=True)
    out = tmp_path / "r.html"
    assert invoke(data, "--output", out, "--no-shapes").exit_code == 0
    html = out.read_text(encoding="utf-8")
    assert "1 diverged run " in html and '<table class="diverged">' in html
    copy = tmp_path / "study"
    shutil.copytree(sweep, copy)
    (copy / "results.csv").unlink()
    member = sorted(d for d in copy.iterdir() if d.is_dir())[0]
    (member / "summary.json").unlink()
    assert invoke(copy, "--output", out, "--no-shapes").exit_code == 0
    html = out.read_text(encoding="utf-8")
    assert f"incomplete run skipped (no finished summary.json): {member}" in html
    assert "Diverged runs: 0; incomplete runs: 1 (listed" in html


def test_summary_interval_is_the_paired_t_interval(tmp_path):
    from activation_bench.analysis import compare as cmp

    res = cmp.run_compare([_csv(tmp_path / "t.csv")], "final", baseline="activation=relu")
    found = rep.finding(rep.compare_table(res), res)
    d = np.array(SHIFT)
    lo, hi = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
    assert found is not None and found["group"] == "activation=gelu" and found["n_pairs"] == 4
    assert found["interval"] == f"{10**lo:.3g}–{10**hi:.3g}"
    assert found["effect"].startswith(f"{10**d.mean():.3g}x")
    assert rep._ci_of_effect({"n_pairs": 3, "mean_diff": 0.0, "d_z": None, "note": "all 3 pairs tie"}) == (0.0, 0.0)


def test_no_torch_without_the_shapes_section(sweep, tmp_path):
    """Every import of `report --no-shapes` happens with its figures built but not drawn: drawing is
    matplotlib's rasterising (render.svg), which imports nothing of ours; the drawn page is
    test_sections_in_order_and_self_contained's."""
    out = tmp_path / "r.html"
    code = ("import sys; from typer.testing import CliRunner; from activation_bench.cli.main import app; "
            "import activation_bench.render.report as rr; "
            "rr.svg = lambda fig, prefix, tight=False: '<svg></svg>'; "
            f"r = CliRunner().invoke(app, ['report', {str(sweep)!r}, '-o', {str(out)!r}, '--no-shapes']); "
            "assert r.exit_code == 0, r.output; print('torch' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
    assert out.is_file()


@pytest.mark.parametrize(("make", "message"), [
    (lambda t: [t / "empty", "-o", t / "r.html"], "empty directory"),
    (lambda t: [t / "only_incomplete", "-o", t / "r.html"], "no complete runs"),
    (lambda t: [t / "nosuch", "-o", t / "r.html"], "no such file or directory"),
    (lambda t: [t / "t.csv", "-o", t / "nodir" / "r.html"], "does not exist"),
    (lambda t: [t / "t.csv", "-o", t / "r.pdf"], "use a .html suffix"),
    (lambda t: [t / "t.csv", "-o", t / "r"], "use a .html suffix"),
    (lambda t: [t / "t.csv", "-o", t / "adir.html"], "is a directory"),
    (lambda t: [t / "t.csv", "-o", t / "r.html", "--metric", "epoch=0"], "needs a positive integer"),
    (lambda t: [t / "t.csv", "-o", t / "r.html", "--baseline", "activation=nosuch"], "no runs with"),
])
def test_bad_input_exit_2_nothing_written(tmp_path, make, message):
    _csv(tmp_path / "t.csv")
    (tmp_path / "empty").mkdir()
    (tmp_path / "adir.html").mkdir()
    incomplete = tmp_path / "only_incomplete" / "0000_run"
    incomplete.mkdir(parents=True)
    (incomplete / "config.yaml").write_text("seed: 0\n")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    result = invoke(*make(tmp_path))
    assert result.exit_code == 2, result.output
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_write_failure_leaves_nothing(tmp_path, monkeypatch, undrawn):
    data = _csv(tmp_path / "t.csv")

    def refuse(src, dst):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(os, "replace", refuse)
    result = invoke(data, "-o", tmp_path / "r.html", "--no-shapes")
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: cannot write {tmp_path / 'r.html'}: Read-only file system"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]


def test_template_ships_with_the_package():
    import importlib.resources

    assert importlib.resources.files("activation_bench.render").joinpath("templates/report.html.j2").is_file()
    text = Path("pyproject.toml").read_text(encoding="utf-8")
    assert '"activation_bench.render" = ["templates/*.j2"]' in text and '"jinja2' in text


def test_real_data_early_stop_on_test_loss(tmp_path, undrawn):
    """A real table: early_stop by default, on test_loss as compare chooses it, the same numbers."""
    root = tmp_path / "runs"
    result = CliRunner().invoke(app, ["sweep", "activation=gelu,relu", "data=diabetes", "seed=range(3)", "epochs=3",
                                      "--name", "real", "--runs-dir", str(root), "-q"])
    assert result.exit_code == 0, result.output
    out = tmp_path / "r.html"
    assert invoke(root / "real", "-o", out, "--no-shapes").exit_code == 0
    html = out.read_text(encoding="utf-8")
    page = parse(html)
    assert list(page.tables) == ["final", "early_stop"]
    assert 'data-metric="early_stop" data-loss="test_loss"' in html
    res = CliRunner().invoke(app, ["compare", str(root / "real"), "--metric", "early_stop", "--format", "json"])
    doc = json.loads(res.stdout)
    assert doc["loss"] == "test_loss"
    for cells, want in zip(page.tables["early_stop"], doc["rows"]):
        for cell in cells:
            for key, value in cell["data"].items():
                assert (value == "") if want[key] is None else float(value) == want[key]
